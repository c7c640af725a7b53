"""Each trainer export of a `packing: bfd` build (rows ending in a padding segment, conversation id
""): read by the transcription of its trainer's reading code (tests/support/trainer_readers.py), it trains
exactly the native targets, and the padding is dropped or kept as that trainer expects."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import databuild
from test_export import FORMATS, check_export, native_rows


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_trainer_reads_a_bfd_build(bfd_build, tmp_path, fmt):
    result = databuild.export(bfd_build.parquet, fmt, tmp_path / fmt / "bfd.parquet")
    manifest = check_export(bfd_build.parquet, fmt, result.path, 512)
    rows = native_rows(bfd_build.parquet)
    padded = [row["seq_start_id"][-1] if row["conversation_ids"][-1] == "" else 512 for row in rows]
    assert sum(512 - p for p in padded) == bfd_build.data["output"]["padding_tokens"] > 0
    exported = pq.read_table(result.path).to_pylist()
    if fmt == "miles":  # the row as it is, padding segment included, in metadata
        assert [r["metadata"]["conversation_ids"] for r in exported] == [r["conversation_ids"] for r in rows]
        return
    assert manifest["counts"]["padding_tokens_dropped"] == bfd_build.data["output"]["padding_tokens"]
    assert [len(r["input_ids"]) for r in exported] == padded  # each row ends where its padding began
    assert all(0 not in r.get("seq_lengths", [1]) for r in exported)
