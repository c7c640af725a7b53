"""The spill: the stream read back in permutation order, whatever the window, prefix or passes."""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SOURCE_DIR
from databuild.build import prepare
from databuild.sources.formats import FORMATS
from databuild.sources.reader import source_files
from databuild.sources.spill import Spill, expected_prefix


@pytest.fixture(scope="module")
def files():
    return source_files(SOURCE_DIR, "train", FORMATS["messages"], "fixture")


@pytest.fixture(scope="module")
def source_rows(files):
    """Every source row as (id, messages), read with pyarrow alone, in source order."""
    rows = []
    for file in files:
        for row in pq.read_table(file.path).to_pylist():
            rows.append((row["id"], tuple(row["messages"])))
    return rows


@pytest.mark.parametrize("window, prefix, passes", [
    (8192, 300, 1),  # everything in one pass, one bucket
    (7, 300, 1),
    (7, 0, 8),  # the check alone, then 7, 14, 28, ..., 224, 300: a pass per doubling
    (64, 100, 3),  # 128, 256, 300
    (1, 1, 10),
])
def test_stream_is_the_permutation_whatever_the_passes(files, source_rows, tmp_path, window, prefix, passes):
    order = np.random.default_rng(42).permutation(len(source_rows))  # data/README.md, "Permutation"
    spill = Spill(files, np.argsort(order), window, tmp_path)  # each row's stream position
    assert spill.check_and_spill(prefix) == []
    stream = list(spill.conversations())
    assert [c.index for c in stream] == order.tolist()
    assert [c.position for c in stream] == list(range(len(order)))
    assert [(c.id, c.messages) for c in stream] == [source_rows[i] for i in order]
    assert spill.passes == passes
    assert [c.index for c in spill.conversations()] == order.tolist()  # read again, without another pass
    assert spill.passes == passes


def test_first_pass_spills_only_the_prefix(files, tmp_path):
    spill = Spill(files, np.argsort(np.random.default_rng(42).permutation(300)), 10, tmp_path)
    spill.check_and_spill(25)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bucket-000000.arrow", "bucket-000001.arrow",
                                                          "bucket-000002.arrow"]
    assert spill.spilled == 30


def footer_message_bytes(path) -> int:
    """B of data/README.md: the uncompressed size of the file's message columns, from its parquet footer."""
    metadata = pq.ParquetFile(path).metadata
    return sum(metadata.row_group(g).column(j).total_uncompressed_size for g in range(metadata.num_row_groups)
               for j in range(metadata.num_columns) if metadata.row_group(g).column(j).path_in_schema.startswith("messages."))


def test_expected_prefix(files):
    per_file = [footer_message_bytes(f.path) for f in files]
    assert [f.rows for f in files] == [170, 130]
    message_bytes = sum(per_file)
    assert 250_000 < message_bytes < 1_000_000  # the fixture's ~300 conversations of a few hundred words
    every = np.arange(300)
    # ceil(n * tokens * 8 / B) positions: room for 8 bytes of message per token
    assert expected_prefix(files, every, 1000) == math.ceil(300 * 1000 * 8 / message_bytes)
    assert expected_prefix(files, every, 10**9) == 300
    # every other row taken (the files have 170 and 130 rows): 150 positions, each file's bytes halved
    half = np.where(every % 2 == 0, every // 2, -1)
    taken_bytes = per_file[0] * 85 // 170 + per_file[1] * 65 // 130
    assert expected_prefix(files, half, 1000) == math.ceil(150 * 1000 * 8 / taken_bytes)


def test_the_tiny_build_needs_one_pass(tiny_config, tiny_build):
    read = 76  # conversations the tiny build packs (its manifest's counts, inspected)
    assert tiny_build.data["counts"]["conversations_read"] == read
    with prepare(tiny_config, offline=True, window=7) as prepared:  # small buckets: the prefix is not all
        assert read <= prepared.spill.spilled < 300
        assert sum(1 for _ in islice(prepared.conversations(), read)) == read and prepared.spill.passes == 1
