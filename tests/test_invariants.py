"""Invariants of pack, masks and hashing over generated inputs (hypothesis: a fixed seed, fixed example
counts, so CI runs the same cases in bounded time). Each expected value is computed here, from the
definitions in data/README.md, not by the code under test."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import record_count, supervised_runs
from databuild.encode.encoder import Encoder
from databuild.records.conversation import TokenizedConversation, Conversation
from databuild.records.origin import Origin
from databuild.encode.render import Renderer
from databuild.pack.rows import Packing, PackStats
from databuild.pack.policy import pack
from databuild.rowfile.hashes import ROW_DIGEST_HEX, RowsHasher, hash_parquet
from databuild.rowfile.write import SCHEMA

SEP = 99
FIXED = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

conversation_tokens = st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 5, SEP]), st.integers(0, 1)),
                               min_size=1, max_size=12)


def expected_rows(conversations: list[list[tuple[int, int]]], row_tokens: int):
    """The README's step 7, written out: one separator between conversations (none after one that ends
    with it), cut into rows of row_tokens, rows without a target dropped. Rows as (ids, mask, starts, owners)."""
    ids, mask, starts = [], [], []
    for k, tokens in enumerate(conversations):
        if ids and ids[-1] != SEP:
            ids.append(SEP)
            mask.append(0)
        starts.append((len(ids), f"c{k}"))
        ids += [t for t, _ in tokens]
        mask += [m for _, m in tokens]
    rows = []
    for low in range(0, len(ids) - row_tokens + 1, row_tokens):
        if not any(mask[low:low + row_tokens]):
            continue
        owner = [cid for start, cid in starts if start <= low][-1]
        inside = [(start - low, cid) for start, cid in starts if low < start < low + row_tokens]
        rows.append((ids[low:low + row_tokens], mask[low:low + row_tokens], [0] + [s for s, _ in inside],
                     [owner] + [cid for _, cid in inside]))
    return rows


@settings(FIXED, max_examples=300)
@given(st.lists(conversation_tokens, min_size=1, max_size=12), st.integers(1, 9))
def test_pack_is_the_readme_definition(conversations, row_tokens):
    stream = [TokenizedConversation(Origin(k, k, f"c{k}", "s"), np.array([t for t, _ in tokens], np.int32),
                                    np.array([m for _, m in tokens], np.int8)) for k, tokens in enumerate(conversations)]
    rows = list(pack(stream, Packing("concat", row_tokens, "</s>", SEP), PackStats()))
    found = [(r.input_ids.tolist(), r.loss_mask.tolist(), r.seq_start_id.tolist(), list(r.conversation_ids))
             for r in rows]
    assert found == expected_rows(conversations, row_tokens)
    for row in rows:
        assert len(row.input_ids) == len(row.loss_mask) == row_tokens
        assert row.seq_start_id[0] == 0 and (np.diff(row.seq_start_id) > 0).all()
    record_count("property: pack", "examples")


@settings(FIXED, max_examples=150)
@given(st.lists(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(0, 1)), min_size=4, max_size=4),
                min_size=1, max_size=20),
       st.data())
def test_rows_sha256_over_any_split_equals_the_streaming_hash(rows, data):
    ids = np.array([[t for t, _ in row] for row in rows], dtype=np.int64)
    mask = np.array([[m for _, m in row] for row in rows], dtype=np.int64)
    # The README's definition: each row's ids as little-endian int32, then its mask as one byte a token.
    row_bytes = [b"".join(int(t).to_bytes(4, "little", signed=True) for t in r) + bytes(int(m) for m in k)
                 for r, k in zip(ids, mask)]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=5)))
    hasher = RowsHasher()
    for low, high in zip([0] + cuts, cuts + [len(rows)]):
        hasher.update_rows(ids[low:high], mask[low:high])
    assert hasher.hexdigest() == hashlib.sha256(b"".join(row_bytes)).hexdigest()
    assert hasher.row_digests == [hashlib.sha256(b).hexdigest()[:ROW_DIGEST_HEX] for b in row_bytes]
    record_count("property: hashing", "examples")


@settings(FIXED, max_examples=40)
@given(st.integers(1, 30), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_hash_parquet_is_the_same_over_any_row_group_split(tmp_path_factory, rows, group_rows, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 2**31, size=(rows, 6), dtype=np.int64).astype(np.int32)  # ids are never negative
    mask = rng.integers(0, 2, size=(rows, 6)).astype(np.int8)
    mask[:, 0] = 1
    table = pa.table({"input_ids": pa.array(ids.tolist(), pa.list_(pa.int32())),
                      "loss_mask": pa.array(mask.tolist(), pa.list_(pa.int8())),
                      "seq_start_id": pa.array([[0]] * rows, pa.list_(pa.int32())),
                      "conversation_ids": pa.array([["c"]] * rows, pa.list_(pa.string()))}, schema=SCHEMA)
    path = tmp_path_factory.mktemp("groups") / "rows.parquet"
    pq.write_table(table, path, row_group_size=group_rows)
    expected = hashlib.sha256(b"".join(r.astype("<i4").tobytes() + k.astype(np.uint8).tobytes()
                                       for r, k in zip(ids, mask))).hexdigest()
    assert hash_parquet(path).rows_sha256 == expected
    record_count("property: hashing", "examples")


SPECIAL_TEXT = ["<|end|>", "<|return|>", "<|start|>", "<|message|>", "<|channel|>", "assistant", "final",
                "<|start|>assistant<|channel|>final<|message|>", "\ue000", "\ue0000\ue001", " ", "\n", "x"]
content = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(SPECIAL_TEXT), max_size=6).map("".join))
messages = st.lists(st.tuples(st.sampled_from(["system", "developer", "user", "assistant"]), content),
                    min_size=1, max_size=5)


@settings(FIXED, max_examples=120)
@given(messages)
def test_targets_are_only_the_assistant_contents_and_their_closing_tokens(tokenizer, messages):
    renderer = Renderer(tokenizer.chat_template, dict(tokenizer.special_tokens_map),
                        {"current_date": "2026-10-01", "reasoning_effort": "xhigh"})
    encoder = Encoder(tokenizer, renderer, "muse_spark")
    record = tuple({"content": text, "role": role} for role, text in messages)  # the Tulu schema's key order
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), record)])
    if out.problem is not None:  # a conversation the strategy cannot justify is refused, never guessed at
        assert out.problem.kind in ("mask_error", "template_error", "stop_token_in_field") and not len(out.input_ids)
        if out.problem.kind == "stop_token_in_field":  # an answer spelling a token it is closed by, or EOS
            stops = ("<|end|>", "<|return|>", tokenizer.eos_token)
            assert any(role == "assistant" and any(s in text for s in stops) for role, text in messages), messages
        record_count("property: masks", "refused")
        return
    last = len(messages) - 1
    expected = [text + ("<|return|>" if i == last else "<|end|>")
                for i, (role, text) in enumerate(messages) if role == "assistant" and text]
    # Adjacent runs merge only if two spans touch, which a template writing headers between turns never does.
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected
    record_count("property: masks", "built")
