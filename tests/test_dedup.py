"""Exact de-duplication (`dedup: exact`): conversations with the same messages and tools after the
normalisation of data/README.md are kept once, the first in source order, within and across sources
and formats; the keys recomputed here with hashlib from the files, without databuild."""

from __future__ import annotations

import hashlib
import json
import unicodedata

import pyarrow.parquet as pq
import pytest

from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError
from test_build import independent_rows
from test_mixture import SHARDS, build, entry, fixture_rows, mixture, sharegpt, write_copy
from conftest import write_config


def hashlib_key(messages: list[dict], tools) -> str:
    """data/README.md's key: sha256 of the canonical JSON of [role, NFC(content), fields] per message
    and the tools (the fixtures carry no other fields and no tools)."""
    normalised = {"messages": [[m["role"], unicodedata.normalize("NFC", m["content"]), None] for m in messages],
                  "tools": tools}
    text = json.dumps(normalised, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory):
    """Source a (messages): the first shard, then row 5 again under another id, and row 6 with its
    first message in decomposed Unicode (NFD, the same text after NFC). Source b (ShareGPT): 20 of a's
    conversations under other ids, one of them twice, one with a trailing space (not the same), then
    40 rows of the second shard."""
    tmp = tmp_path_factory.mktemp("dedup")
    first = fixture_rows(SHARDS[0])
    a = first + [{**first[5], "id": "again-5"},
                 {**first[6], "id": "nfd-6", "messages": [{**first[6]["messages"][0], "content": unicodedata.normalize(
                     "NFD", first[6]["messages"][0]["content"] + " café")}] + first[6]["messages"][1:]}]
    first[6]["messages"][0]["content"] += " café"  # the NFC spelling, kept first
    a[6] = {**a[6], "messages": first[6]["messages"]}
    b_rows = [{"id": f"b-{k}", "messages": first[k]["messages"]} for k in range(20)]
    b_rows += [{"id": "b-3-again", "messages": first[3]["messages"]},
               {"id": "b-space", "messages": [{**first[7]["messages"][0], "content": first[7]["messages"][0]["content"]
                                               + " "}] + first[7]["messages"][1:]}]
    b_rows += [{"id": r["id"], "messages": r["messages"]} for r in fixture_rows(SHARDS[1])[:40]]
    source_a = write_copy(tmp / "a", {"train-00000-of-00001.parquet": a})
    source_b = write_copy(tmp / "b", {"train-00000-of-00001.parquet": [
        {"id": r["id"], **sharegpt(r["messages"]), "source": "b"} for r in b_rows]})
    config = mixture(tmp, entry(source_a, repo="org/a"), entry(source_b, repo="org/b", format="sharegpt"),
                     rows="all", dedup="exact")
    return tmp, config, a + b_rows, build(config, tmp / "out")


def expected_duplicates(conversations: list[dict]) -> list[int]:
    seen, found = set(), []
    for index, conversation in enumerate(conversations):
        key = hashlib_key(conversation["messages"], None)
        if key in seen:
            found.append(index)
        seen.add(key)
    return found


def test_the_duplicates_are_those_hashlib_finds(duplicated, tokenizer):
    _, _, conversations, result = duplicated
    expected = expected_duplicates(conversations)
    # the fixture's first shard repeats two conversations itself (tiny-0066 is tiny-0064, tiny-0169 is
    # tiny-0051: inspected); then again-5, nfd-6, b-0..b-19 and b-3-again; b-space is not one
    listed = result.data["duplicate_conversations"]
    assert [d["index"] for d in listed] == expected
    assert [d["id"] for d in listed][:4] == ["tiny-0066", "tiny-0169", "again-5", "nfd-6"]
    assert len(listed) == 25 and "b-space" not in [d["id"] for d in listed]
    assert listed[4]["source"] == "org/b" and "(id 'tiny-0000'), kept" in listed[4]["reason"]
    assert result.data["counts"]["duplicates"] == {"found": 25, "by_source": [4, 21]}
    assert result.data["build"]["dedup"]["policy"] == "exact"
    # the rows: the stream's permutation over every row, the duplicates left out where it meets them
    table = pq.read_table(result.parquet)
    rows, _, _ = independent_rows(tokenizer, [(c["id"], tuple(c["messages"])) for c in conversations], 512,
                                  table.num_rows, dropped=set(expected))
    assert table.to_pylist() == rows


def test_the_funnel_counts_them_by_source(duplicated):
    _, _, _, result = duplicated
    funnel = result.data["counts"]["funnel"]
    assert [s["dropped"]["duplicate"] for s in funnel["sources"]] == [4, 21]  # rows: all reaches every one
    for box in funnel["sources"] + [funnel["total"]]:
        assert box["read"] == sum(box["dropped"].values()) + box["packed"]
    counts = result.data["counts"]
    assert sum(s["conversations_read"] for s in counts["sources"]) == counts["conversations_read"]
    assert [s["conversations_read"] for s in counts["sources"]] == [172 - 4, 62 - 21]


def test_the_same_bytes_whatever_the_workers_and_the_error_policy(duplicated, sixteen_cores):
    tmp, config, _, result = duplicated
    again = make(load_config(config), tmp / "again", workers=2, batch_size=5, window=16, progress=False)
    assert again.parquet.read_bytes() == result.parquet.read_bytes()
    assert again.manifest.read_bytes() == result.manifest.read_bytes()


def test_dedup_is_none_or_exact(tmp_path):
    with pytest.raises(BuildError, match="key 'dedup' = 'fuzzy': expected one of none, exact"):
        load_config(write_config(tmp_path / "c.yaml", dedup="fuzzy"))
