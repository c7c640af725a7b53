"""Packing invariants on hand-made token streams, where every expected row can be written out."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from conftest import PHI3, TOKENIZER_DIR, needs_phi3, write_config
from databuild.records.conversation import TokenizedConversation
from databuild.records.origin import Origin
from databuild.pack.rows import Packing, PackStats
from databuild.pack.policy import pack

SEP = 99


def conv(position: int, ids: list[int], mask: list[int], source: str = "s") -> TokenizedConversation:
    return TokenizedConversation(Origin(position, position, f"c{position}", source), np.array(ids, np.int32),
                                 np.array(mask, np.int8))


def rows_of(conversations, row_tokens, limit=None):
    stats = PackStats()
    rows = list(islice(pack(conversations, Packing("concat", row_tokens, "</s>", SEP), stats), limit))
    return rows, stats


def test_one_separator_between_conversations_never_supervised():
    rows, stats = rows_of([conv(0, [1, 2], [0, 1]), conv(1, [3, 4, 5], [0, 0, 1]), conv(2, [6, 7], [1, 1])], 4)
    assert [r.input_ids.tolist() for r in rows] == [[1, 2, SEP, 3], [4, 5, SEP, 6]]
    assert [r.loss_mask.tolist() for r in rows] == [[0, 1, 0, 0], [0, 1, 0, 1]]
    assert [r.seq_start_id.tolist() for r in rows] == [[0, 3], [0, 3]]
    assert [r.conversation_ids for r in rows] == [("c0", "c1"), ("c1", "c2")]
    assert stats.separators_inserted == 2 and stats.rows_kept == 2


def test_a_render_ending_with_the_separator_supplies_it():
    rows, stats = rows_of([conv(0, [1, SEP], [1, 1]), conv(1, [2, 3], [0, 1]), conv(2, [4, 5, 6, 7], [1] * 4)], 3)
    assert [r.input_ids.tolist() for r in rows] == [[1, SEP, 2], [3, SEP, 4], [5, 6, 7]]
    assert rows[0].loss_mask.tolist() == [1, 1, 0]  # its own separator keeps its own mask
    assert rows[1].loss_mask.tolist() == [1, 0, 1]  # the inserted one is never a target
    assert stats.separators_inserted == 1  # only after c1: c0 brought its own


def test_long_conversation_continues_and_unsupervised_rows_are_skipped():
    long = conv(0, list(range(10)), [0] * 7 + [1] * 3)
    rows, stats = rows_of([long, conv(1, [20, 21, 22], [0, 1, 0])], 3)
    # stream: 0..9, SEP, 20, 21, 22 -> rows [0,1,2] [3,4,5] skipped, [6,7,8] kept, [9,SEP,20] kept
    assert [r.input_ids.tolist() for r in rows] == [[6, 7, 8], [9, SEP, 20]]
    assert [r.seq_start_id.tolist() for r in rows] == [[0], [0, 2]]
    assert [r.conversation_ids for r in rows] == [("c0",), ("c0", "c1")]
    assert stats.rows_skipped_unsupervised == 2
    assert all(r.loss_mask.any() for r in rows)


def test_a_row_starting_with_the_separator_belongs_to_the_previous_conversation():
    rows, _ = rows_of([conv(0, [1, 2], [1, 1]), conv(1, [3, 4], [1, 1])], 2)
    assert [r.input_ids.tolist() for r in rows] == [[1, 2], [SEP, 3]]
    assert [r.seq_start_id.tolist() for r in rows] == [[0], [0, 1]]
    assert rows[1].conversation_ids == ("c0", "c1")


def test_counts_add_up():
    conversations = [conv(i, list(range(i % 7 + 1)), [i % 2] * (i % 7 + 1), source=f"s{i % 3}") for i in range(60)]
    rows, stats = rows_of(conversations, 8, limit=10)
    assert stats.rows_kept == len(rows) == 10
    assert stats.tokens_kept == 80 == sum(stats.tokens_by_source.values())
    assert stats.supervised_tokens_kept == sum(int(r.loss_mask.sum()) for r in rows)
    distinct = {cid for r in rows for cid in r.conversation_ids}
    assert sum(stats.conversations_by_source.values()) == len(distinct)


@pytest.mark.parametrize("row_tokens", [2, 5, 16])  # 1 would make separator-only rows, skipped
def test_rows_are_the_stream_cut_in_order(row_tokens):
    rng = np.random.default_rng(0)
    conversations = []
    for i in range(40):
        n = int(rng.integers(1, 12))
        conversations.append(conv(i, rng.integers(0, 50, n).tolist(), [1] * n))
    stream = []
    for k, c in enumerate(conversations):
        if k:
            stream.append(SEP)
        stream += c.input_ids.tolist()
    rows, _ = rows_of(conversations, row_tokens)
    flat = [t for r in rows for t in r.input_ids.tolist()]
    assert flat == stream[:len(flat)] and len(flat) == len(stream) // row_tokens * row_tokens


def test_a_row_continues_a_conversation_begun_in_a_skipped_row():
    """c0's first 8 tokens fill two rows without a target, both skipped: the kept row after them still
    continues c0, though no kept row before it shows c0."""
    rows, stats = rows_of([conv(0, list(range(10)), [0] * 8 + [1, 1]), conv(1, [20, 21, 22, 23, 24], [1] * 5)], 4)
    assert [r.conversation_ids for r in rows] == [("c0", "c1"), ("c1",)]
    assert [r.continues for r in rows] == [True, True]
    assert stats.rows_skipped_unsupervised == 2 and stats.continued_rows == [0, 1]
    at_start, _ = rows_of([conv(0, [1, 2, 3], [1, 1, 1]), conv(1, [4, 5, 6, 7], [1] * 4)], 4)
    assert [r.continues for r in at_start] == [False, False]  # c1 begins exactly where row 1 does
    inside, _ = rows_of([conv(0, [1, 2], [1, 1]), conv(1, [4, 5, 6, 7, 8], [1] * 5)], 4)
    assert [r.continues for r in inside] == [False, True]


def test_a_conversation_of_no_token_leaves_no_separator_and_no_segment():
    rows, stats = rows_of([conv(0, [1, 2], [0, 1]), conv(1, [], []), conv(2, [], []), conv(3, [3, 4, 5], [1, 1, 1])], 3)
    assert [r.input_ids.tolist() for r in rows] == [[1, 2, SEP], [3, 4, 5]]
    assert [r.conversation_ids for r in rows] == [("c0",), ("c3",)]
    assert (stats.empty_renders, stats.conversations_read, stats.separators_inserted) == (2, 2, 1)


@pytest.mark.parametrize("key", ["separator", "pad_token"])
@pytest.mark.parametrize("which", ["fixture", pytest.param("phi-3", marks=needs_phi3)])
def test_a_token_the_tokenizer_does_not_know_is_refused(tmp_path, key, which):
    """A tokenizer with an unknown-token id (Phi-3's <unk>) maps any unknown text to it rather than to
    None: either way the config's token is refused, never packed as <unk>."""
    from databuild.config import load_config
    from databuild.encode.render import load_tokenizer
    from databuild.errors import BuildError
    from databuild.pack.policy import packing_for

    tokenizer = load_tokenizer(TOKENIZER_DIR if which == "fixture" else PHI3)
    config = load_config(write_config(tmp_path / "c.yaml", packing="bfd", **{key: "<|no such token|>"}))
    with pytest.raises(BuildError, match=rf"key '{key}' = '<\|no such token\|>': not a single token of the tokenizer"):
        packing_for(tokenizer, config)


def test_a_conversation_expanded_into_samples_counts_once():
    """history: expand gives one sample per turn, each a segment with the conversation's stream position: the
    conversation is read once and counted once in the kept rows, in one row or across several."""
    samples = [TokenizedConversation(Origin(0, 7, "c7", "s"), np.array(ids, np.int32), np.array([1] * len(ids), np.int8),
                                     part=k, parts=3) for k, ids in enumerate([[1, 2], [1, 2, 3], [1, 2, 3, 4]])]
    rows, stats = rows_of([*samples, conv(1, [5, 6], [1, 1])], 6)
    assert [tuple(o.position for o in r.origins) for r in rows] == [(0, 0), (0, 0)]  # [1 2 SEP 1 2 3] [SEP 1 2 3 4 SEP], then 5 6 left
    assert stats.conversations_read == 2
    assert stats.conversations_by_source == {"s": 1} and stats.kept_rows == {0: 7}
