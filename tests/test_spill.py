"""The spill: the stream read back in permutation order, whatever the window, prefix or passes."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SOURCE_DIR
from databuild.build import prepare
from databuild.sources.formats import FORMATS
from databuild.sources.permute import inverse_permutation, permutation
from databuild.sources.reader import source_files
from databuild.sources.spill import BYTES_PER_TOKEN_BOUND, Spill, expected_prefix


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
    order = permutation(len(source_rows), 42)
    spill = Spill(files, inverse_permutation(order), window, tmp_path)
    assert spill.check_and_spill(prefix) == []
    stream = list(spill.conversations())
    assert [c.index for c in stream] == order.tolist()
    assert [c.position for c in stream] == list(range(len(order)))
    assert [(c.id, c.messages) for c in stream] == [source_rows[i] for i in order]
    assert spill.passes == passes
    assert [c.index for c in spill.conversations()] == order.tolist()  # read again, without another pass
    assert spill.passes == passes


def test_first_pass_spills_only_the_prefix(files, tmp_path):
    spill = Spill(files, inverse_permutation(permutation(300, 42)), 10, tmp_path)
    spill.check_and_spill(25)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bucket-000000.arrow", "bucket-000001.arrow",
                                                          "bucket-000002.arrow"]
    assert spill.spilled == 30


def test_expected_prefix(files):
    message_bytes = sum(f.message_bytes for f in files)
    assert 250_000 < message_bytes < 1_000_000  # the fixture's ~300 conversations of a few hundred words
    every = np.arange(300)
    # positions for 1,000 tokens: 300 * 8,000 / message_bytes, rounded up
    assert expected_prefix(files, every, 1000) == -(-300 * 1000 * BYTES_PER_TOKEN_BOUND // message_bytes)
    assert expected_prefix(files, every, 10**9) == 300
    # every other row taken (the files have 170 and 130 rows): 150 positions, each file's bytes halved
    half = np.where(every % 2 == 0, every // 2, -1)
    taken_bytes = sum(f.message_bytes // 2 for f in files)
    assert expected_prefix(files, half, 1000) == -(-150 * 1000 * BYTES_PER_TOKEN_BOUND // taken_bytes)



def test_the_tiny_build_needs_one_pass(tiny_config, tiny_build):
    with prepare(tiny_config, offline=True, window=7) as prepared:  # small buckets: the prefix is not all
        assert 0 < prepared.spill.spilled < 300
        read = sum(1 for _ in islice(prepared.conversations(), tiny_build.data["counts"]["conversations_read"]))
        assert read == tiny_build.data["counts"]["conversations_read"] and prepared.spill.passes == 1
