"""The spill: the stream read back in permutation order, whatever the window, prefix or passes."""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SOURCE_DIR
from databuild.executors.stream import batch_sizes
from databuild.prepare import prepare
from databuild.sources.formats import FORMATS
from databuild.sources.reader import source_files
from databuild.sources.mixture import Placement
from databuild.sources.spill import Spill, expected_prefix
from databuild.sources.spilled import open_bucket


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
    spill = Spill(files, Placement.one_each(np.argsort(order)), window, tmp_path)  # each row's stream position
    assert spill.check_and_spill(prefix) == []
    stream = list(spill.conversations())
    assert [c.origin.index for c in stream] == order.tolist()
    assert [c.origin.position for c in stream] == list(range(len(order)))
    assert [(c.origin.id, c.messages) for c in stream] == [source_rows[i] for i in order]
    assert spill.passes == passes
    assert [c.origin.index for c in spill.conversations()] == order.tolist()  # read again, without another pass
    assert spill.passes == passes


def test_first_pass_spills_only_the_prefix(files, tmp_path):
    spill = Spill(files, Placement.one_each(np.argsort(np.random.default_rng(42).permutation(300))), 10, tmp_path)
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
    assert expected_prefix(files, Placement.one_each(every), 1000) == math.ceil(300 * 1000 * 8 / message_bytes)
    assert expected_prefix(files, Placement.one_each(every), 10**9) == 300
    # every other row taken (the files have 170 and 130 rows): 150 positions, each file's bytes halved
    half = np.where(every % 2 == 0, every // 2, -1)
    taken_bytes = per_file[0] * 85 // 170 + per_file[1] * 65 // 130
    assert expected_prefix(files, Placement.one_each(half), 1000) == math.ceil(150 * 1000 * 8 / taken_bytes)


def test_the_tiny_build_needs_one_pass(tiny_config, tiny_build):
    read = 76  # conversations the tiny build packs (its manifest's counts, inspected)
    assert tiny_build.data["counts"]["conversations_read"] == read
    with prepare(tiny_config, offline=True, window=7) as prepared:  # small buckets: the prefix is not all
        assert read <= prepared.spill.spilled < 300
        assert sum(1 for _ in islice(prepared.conversations(), read)) == read and prepared.spill.passes == 1


@pytest.fixture(scope="module")
def small_groups(tmp_path_factory, source_rows):
    """The fixture source rewritten as two files of row groups of 7 rows, one row made malformed (an
    unknown role): a pass has many parts to read at once, and a finding to report in source order."""
    import pyarrow as pa

    root = tmp_path_factory.mktemp("groups")
    (root / "data").mkdir()
    table = pa.concat_tables([pq.read_table(f.path) for f in source_files(SOURCE_DIR, "train", FORMATS["messages"],
                                                                          "fixture")])
    rows = table.to_pylist()
    rows[100]["messages"] = [{"content": "hi", "role": "narrator"}]
    table = pa.Table.from_pylist(rows, schema=table.schema)
    half = table.num_rows // 2
    for k, part in enumerate((table.slice(0, half), table.slice(half))):
        pq.write_table(part, root / "data" / f"train-{k:05d}-of-00002.parquet", row_group_size=7)
    return source_files(root, "train", FORMATS["messages"], "groups")


@pytest.mark.parametrize("threads", [1, 2, 5, 64])
def test_the_pass_in_parts_on_threads_gives_the_same_stream_and_findings(small_groups, tmp_path, threads):
    """However many threads read the parts (runs of row groups, finishing in any order, writing the
    same bucket files), the stream and the malformed rows found are those of one thread, in order."""
    rows = sum(f.rows for f in small_groups)
    order = np.random.default_rng(7).permutation(rows)
    spill = Spill(small_groups, Placement.one_each(np.argsort(order)), 16, tmp_path, threads=threads)
    found = spill.check_and_spill(rows)
    assert [(bad.index, bad.problem.reason) for bad in found] == [(100, "message 0: unknown role 'narrator' "
                                                                        "(expected one of system, developer, "
                                                                        "user, assistant, tool)")]
    stream = list(spill.conversations())
    assert [c.origin.index for c in stream] == order.tolist()
    assert spill.passes == 1


@pytest.mark.parametrize("read_rows, spill_rows", [(3, 1), (5, 8), (64, 16), (4096, 8192)])
def test_the_batches_read_and_written_change_nothing(small_groups, tmp_path, monkeypatch, read_rows, spill_rows):
    """However many rows a batch read holds (READ_BATCH_ROWS) and a part gathers before it writes them
    (SPILL_ROWS): the same findings, record counts, stream and rows in each bucket file."""
    import databuild.sources.reader as reader
    import databuild.sources.spill as spill_module

    rows = sum(f.rows for f in small_groups)
    placed = Placement.one_each(np.argsort(np.random.default_rng(7).permutation(rows)))

    def one_pass(directory):
        directory.mkdir()
        spill = Spill(small_groups, placed, 16, directory, threads=2)
        found = [(bad.index, bad.problem.reason) for bad in spill.check_and_spill(200)]
        buckets = {p.name: sorted(open_bucket(p).column("index").to_pylist()) for p in directory.iterdir()}
        return found, spill.counts_of(small_groups), buckets, [c.origin.index for c in spill.conversations()]

    default = one_pass(tmp_path / "default")
    monkeypatch.setattr(reader, "READ_BATCH_ROWS", read_rows)
    monkeypatch.setattr(spill_module, "SPILL_ROWS", spill_rows)
    assert one_pass(tmp_path / "other") == default
    assert default[0] and len(default[2]) == 13  # a finding; buckets of 16 for the prefix of 200


def test_parts_are_whole_row_groups_in_source_order(small_groups):
    from databuild.sources.spill import _parts

    for count in (1, 3, 40, 1000):
        parts = _parts(small_groups, count)
        covered = [(f.name, g) for f, groups in parts for g in groups]
        every = [(f.name, g) for f in small_groups for g in range(pq.ParquetFile(f.path).metadata.num_row_groups)]
        assert covered == every  # each group once, in order
    assert len(_parts(small_groups, 1)) == 2  # at least a part per file
    assert len(_parts(small_groups, 1000)) == len(every)  # at most a part per group


def permuted(files, rows: int, window: int, directory) -> Spill:
    """A spill of `files` (`rows` rows) in a seeded random order."""
    return Spill(files, Placement.one_each(np.argsort(np.random.default_rng(7).permutation(rows))), window, directory)


@pytest.mark.parametrize("window, prefix, size", [(7, 0, 5), (7, 300, 7), (16, 20, 300), (64, 100, 1)])
def test_batches_of_references_read_as_the_stream(small_groups, tmp_path, window, prefix, size):
    """What a local worker is sent (a batch naming rows of the bucket files) reads back as the stream's
    next `size` conversations, across bucket boundaries and further passes, the malformed one marked
    exactly as the stream marks it; and it pickles as a reference, not as the text."""
    import pickle

    from databuild.records.problems import marked

    rows = sum(f.rows for f in small_groups)
    spill = permuted(small_groups, rows, window, tmp_path)
    malformed = {bad.index: bad for bad in spill.check_and_spill(prefix)}
    batches = list(spill.batches(size, malformed))
    assert [len(b) for b in batches] == [size] * (rows // size) + ([rows % size] if rows % size else [])
    # in the sizes a build asks for (smaller first: executors.stream.batch_sizes), the same conversations
    ramped = list(spill.batches(batch_sizes(size, 3), malformed))
    assert [c for b in ramped for c in b.read()] == [c for b in batches for c in b.read()]
    asked = list(islice(batch_sizes(size, 3), len(ramped)))
    assert [len(b) for b in ramped][:-1] == asked[:-1] and 0 < len(ramped[-1]) <= asked[-1]
    read = [c for b in batches for c in b.read()]
    assert read == list(marked(spill.conversations(), malformed))
    assert [c.origin.index for c in read if c.problem is not None] == [100]
    if size >= 5:  # a reference has a fixed cost of its own (the bucket's path)
        text = sum(len(pickle.dumps(b.read())) for b in batches)
        assert sum(len(pickle.dumps(b)) for b in batches) < text / 10


@pytest.mark.parametrize("window, start, stop", [(16, 0, 5), (16, 5, 16), (16, 5, None), (16, 13, 40), (7, 0, None),
                                                 (64, 30, 30)])
def test_batches_of_a_range_of_positions_are_that_slice_of_the_stream(small_groups, tmp_path, window, start, stop):
    """The batches of stream positions [start, stop) (the first positions sent ahead, then the rest of the
    stream: prepare.Prepared.batches) read back as that slice of the stream, across buckets and passes."""
    rows = sum(f.rows for f in small_groups)
    spill = permuted(small_groups, rows, window, tmp_path)
    malformed = {bad.index: bad for bad in spill.check_and_spill(window)}
    whole = [c.origin.position for c in spill.conversations()]
    sliced = [c.origin.position for b in spill.batches(3, malformed, start, stop) for c in b.read()]
    assert sliced == whole[start:stop] == list(range(start, rows if stop is None else stop))
