"""The funnel adds up: every source row is in exactly one box, per source and in total, and the boxes
are recomputed here without databuild: the take and the permutation with numpy (data/README's rules),
the conversations in kept rows from the parquet, the bad rows by construction, the overlong ones
by transformers' own apply_chat_template."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SOURCE_DIR, write_config
from databuild.build import make
from databuild.config import load_config
from test_build import run_cli, strict_tokenizer

SEED, TAKE_A, WINDOW, ROW_TOKENS = 42, 120, 40, 512
KWARGS = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}


def b_rows() -> list[tuple[str, list[tuple[str, str]], str]]:
    """Source B: (id, messages, what the build must do with it)."""
    rows = []
    for i in range(60):
        if i % 10 == 3:
            rows.append((f"b-{i:02d}", [("user", "hi"), ("robot", "beep")], "malformed"))
        elif i % 10 == 5:
            rows.append((f"b-{i:02d}", [("user", "q"), ("assistant", "answer 1")], "template_error"))
        elif i % 10 == 7:
            rows.append((f"b-{i:02d}", [("user", "long " * 700), ("assistant", "ok")], "overlong"))
        else:
            rows.append((f"b-{i:02d}", [("user", f"question {i}"), ("assistant", f"reply {i}")], "good"))
    return rows


def write_b(tmp_path):
    kind = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    rows = b_rows()
    table = pa.table({"id": [r[0] for r in rows],
                      "messages": pa.array([[{"content": c, "role": role} for role, c in r[1]] for r in rows], kind)})
    (tmp_path / "b" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "b" / "data" / "train-00000-of-00001.parquet")
    return tmp_path / "b"


def boxes_add_up(entry: dict) -> None:
    assert entry["rows"] == entry["not_taken"] + entry["taken"]
    assert entry["taken"] == entry["not_reached"] + entry["read"]
    assert entry["read"] == sum(entry["dropped"].values()) + entry["packed"]
    assert entry["packed"] == entry["in_kept_rows"] + entry["in_rows_without_target"] + entry["not_written"]
    terminal = (entry["not_taken"] + entry["not_reached"] + sum(entry["dropped"].values()) + entry["in_kept_rows"]
                + entry["in_rows_without_target"] + entry["not_written"])
    assert terminal == entry["rows"] and min(v for k, v in entry.items() if isinstance(v, int)) >= 0


def test_the_funnel_of_a_bfd_mixture_adds_up_and_matches_an_independent_count(tmp_path, tokenizer):
    config = write_config(tmp_path / "mix.yaml", name="mix", source=None, rows=8, row_tokens=ROW_TOKENS, seed=SEED,
                          sources=[{"repo": "a", "revision": "1" * 40, "dir": str(SOURCE_DIR), "take": TAKE_A},
                                   {"repo": "b", "revision": "2" * 40, "dir": str(write_b(tmp_path))}],
                          tokenizer=strict_tokenizer(tmp_path), on_bad_conversation="skip", packing="bfd",
                          packing_window=WINDOW, overlong="drop")
    result = make(load_config(config), tmp_path / "out", progress=False)
    funnel = result.data["counts"]["funnel"]

    # the stream, by numpy alone: A's take, then B, permuted
    a_table = pa.concat_tables(pq.read_table(p) for p in sorted((SOURCE_DIR / "data").glob("*.parquet")))
    a_rows, b = a_table.num_rows, b_rows()
    taken_a = np.sort(np.random.default_rng([SEED, 1]).permutation(a_rows)[:TAKE_A])
    mixed = np.concatenate([taken_a, a_rows + np.arange(len(b))])
    stream = mixed[np.random.default_rng(SEED).permutation(len(mixed))]
    ids = a_table.column("id").to_pylist() + [r[0] for r in b]
    position = {ids[row]: k for k, row in enumerate(stream)}

    # bfd reads whole windows of the conversations that reach it (skipped ones never do): the last kept
    # row's window is the last one read
    kept_ids = {c for cs in pq.read_table(result.parquet).column("conversation_ids").to_pylist() for c in cs if c}
    skipped = [row >= a_rows and b[row - a_rows][2] in ("malformed", "template_error") for row in stream]
    reaching = np.cumsum(~np.array(skipped))  # conversations handed to bfd up to each position
    last_window = (reaching[max(position[c] for c in kept_ids)] - 1) // WINDOW
    read = int(min(len(stream), np.searchsorted(reaching, (last_window + 1) * WINDOW) + 1))
    read_rows = stream[:read]
    is_a = read_rows < a_rows
    fates_b = [b[row - a_rows][2] for row in read_rows[~is_a]]

    def overlong_a(row):  # transformers' render, plus the separator bfd appends
        messages = a_table.column("messages")[int(row)].as_py()
        ids_ = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **KWARGS)["input_ids"]
        return len(ids_) + (ids_[-1] != tokenizer.eos_token_id) > ROW_TOKENS

    expected = [
        {"rows": a_rows, "taken": TAKE_A, "read": int(is_a.sum()),
         "dropped": {"malformed": 0, "template_error": 0, "overlong": sum(map(overlong_a, read_rows[is_a]))},
         "in_kept_rows": sum(1 for c in kept_ids if c.startswith("tiny-"))},
        {"rows": len(b), "taken": len(b), "read": len(fates_b),
         "dropped": {kind: fates_b.count(kind) for kind in ("malformed", "template_error", "overlong")},
         "in_kept_rows": sum(1 for c in kept_ids if c.startswith("b-"))},
    ]
    assert [s["source"] for s in funnel["sources"]] == ["a", "b"]
    for found, want in zip(funnel["sources"], expected):
        boxes_add_up(found)
        assert {k: found[k] for k in ("rows", "taken", "read", "in_kept_rows")} == \
               {k: want[k] for k in ("rows", "taken", "read", "in_kept_rows")}
        assert {k: found["dropped"][k] for k in want["dropped"]} == want["dropped"]
    boxes_add_up(funnel["total"])
    assert funnel["total"]["read"] == read and funnel["total"]["not_reached"] > 0
    assert funnel["total"]["not_written"] > 0  # bfd: packed in the last window, beyond the 8 rows written
    assert all(funnel["total"]["dropped"][k] > 0 for k in ("malformed", "template_error", "overlong"))
    # the manifest's other counters agree
    counts = result.data["counts"]
    assert funnel["total"]["dropped"]["overlong"] == counts["overlong_conversations"]["dropped"]
    assert funnel["total"]["packed"] + funnel["total"]["dropped"]["overlong"] == counts["conversations_read"]


def test_the_tiny_build_funnel_and_where_it_is_shown(tiny_build, tmp_path):
    funnel = tiny_build.data["counts"]["funnel"]
    boxes_add_up(funnel["total"])
    kept_ids = {c for cs in pq.read_table(tiny_build.parquet).column("conversation_ids").to_pylist() for c in cs if c}
    assert funnel["total"]["in_kept_rows"] == len(kept_ids)
    assert funnel["total"]["rows"] == 300 and funnel["sources"][0]["source"] == "databuild-fixtures/tulu-tiny"
    shown = run_cli("hash", str(tiny_build.parquet))
    assert shown.returncode == 0 and "where the source rows went" in shown.stdout
    kept_line = next(line for line in shown.stdout.splitlines() if "in kept rows" in line)
    assert kept_line.split()[-1] == f"{len(kept_ids):,}"


def test_a_funnel_edited_into_another_shape_is_refused(tiny_build, tmp_path):
    from databuild.errors import BuildError
    from databuild.publish.manifest_read import read_manifest

    manifest = json.loads(tiny_build.manifest.read_text())
    manifest["counts"]["funnel"]["sources"][0]["in_kept_rows"] = "13"
    (tmp_path / "m.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BuildError, match=r"counts.funnel.sources\[0\].in_kept_rows is str '13', expected int"):
        read_manifest(tmp_path / "m.manifest.json")


def test_a_sources_conversations_read_leave_out_its_empty_renders():
    """counts.sources[i].conversations_read: the stream positions the packer was handed that hold the
    source's rows (BuildRecord.read: empty renders among them), less its skipped and its empty renders."""
    from types import SimpleNamespace

    import numpy as np

    from databuild.pack.rows import PackStats
    from databuild.publish.manifest import source_counts

    stats = PackStats(conversations_read=4, empty_render_rows=[4])  # as the packer records it: the source row
    sources = [SimpleNamespace(spec=SimpleNamespace(name=name), selected=np.arange(10)) for name in ("a", "b")]
    record = SimpleNamespace(inputs=SimpleNamespace(sources=sources, selections=([0, 10], [np.arange(10)] * 2)),
                             stats=stats, skipped=(), malformed=(), record_counts=())
    counts = source_counts(record, read=[3, 2])  # source a: 2 read and row 4 rendered empty; source b: 2 read
    assert [c["conversations_read"] for c in counts] == [2, 2]
