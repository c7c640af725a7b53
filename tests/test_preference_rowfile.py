"""The preference row file: written and read back the same; its rows_sha256 recomputed with numpy and
hashlib alone from data/README's definition; every row check refuses a file that breaks it, naming the row."""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from databuild.records.origin import Origin
from databuild.records.pair import TokenizedPair
from databuild.rowfile.preference import PairFigures, schema
from databuild.rowfile.preference_read import figures_of, read_pairs
from databuild.rowfile.preference_write import write_pairs
from databuild.rowfile.schema import RowFormatError

RNG = np.random.default_rng(7)


def random_pair(k: int, unpaired: bool = False) -> TokenizedPair:
    def completion():
        n = int(RNG.integers(1, 9))
        mask = RNG.integers(0, 2, n).astype(np.int8)
        mask[-1] = 1
        return RNG.integers(0, 3500, n).astype(np.int32), mask
    chosen, rejected = completion(), completion()
    pairs = (chosen,) if unpaired else (chosen, rejected)
    return TokenizedPair(Origin(k, k, f"id-{k}-é", "s"), RNG.integers(0, 3500, int(RNG.integers(1, 6))).astype(np.int32),
                         tuple(c[0] for c in pairs), tuple(c[1] for c in pairs), bool(k % 2) if unpaired else None)


def reference_rows_sha256(path, unpaired: bool) -> str:
    """data/README's definition, from the parquet read with pyarrow alone."""
    sha = hashlib.sha256()
    for row in pq.read_table(path).to_pylist():
        encoded = row.pop("id").encode("utf-8")
        label = row.pop("label", None)
        sha.update(np.uint32(len(encoded)).astype("<u4").tobytes() + encoded)
        for name, values in row.items():
            kind = "<i4" if name.endswith("input_ids") else "u1"
            sha.update(np.uint32(len(values)).astype("<u4").tobytes() + np.array(values, dtype=kind).tobytes())
        if unpaired:
            sha.update(bytes([label]))
    return sha.hexdigest()


@pytest.mark.parametrize("unpaired", [False, True])
def test_written_and_read_back_the_same(tmp_path, unpaired):
    pairs = [random_pair(k, unpaired) for k in range(1100)]  # three row groups of 512
    kind = "unpaired" if unpaired else "paired"
    path = tmp_path / "p.parquet"
    written = PairFigures(kind)
    assert write_pairs(iter(pairs), path, kind, written) == 1100
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    back = list(read_pairs(path))
    assert [b.id for b in back] == [p.origin.id for p in pairs]
    for b, p in zip(back, pairs):
        assert np.array_equal(b.prompt_ids, p.prompt_ids) and b.label == p.label
        assert all(np.array_equal(x, y) for x, y in zip(b.completion_ids + b.completion_masks,
                                                         p.completion_ids + p.completion_masks))
    read, digest, size = figures_of(path, 3500)
    assert read.record() == written.record() and read.row_digests == written.row_digests
    assert read.rows_sha256 == reference_rows_sha256(path, unpaired)
    assert (digest, size) == (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size)


def write_table(path, rows: dict):
    pq.write_table(pa.Table.from_pydict(rows, schema=schema("paired")), path)


GOOD = {"id": ["a", "b"], "prompt_input_ids": [[1, 2], [3]], "chosen_input_ids": [[4], [5, 6]],
        "chosen_loss_mask": [[1], [0, 1]], "rejected_input_ids": [[7], [8]], "rejected_loss_mask": [[1], [1]]}


@pytest.mark.parametrize("column, value, message", [
    ("chosen_loss_mask", [0, 2], "row 1 (id 'b'): chosen_loss_mask holds a value other than 0 or 1"),
    ("chosen_loss_mask", [1], "row 1 (id 'b'): chosen_input_ids and chosen_loss_mask lengths differ (2 and 1)"),
    ("rejected_loss_mask", [0], "row 1 (id 'b'): rejected holds no target"),
    ("prompt_input_ids", [], "row 1 (id 'b'): its prompt is empty"),
    ("rejected_input_ids", [9999], "row 1 (id 'b'): rejected holds token id 9999, outside 0..3499"),
    ("prompt_input_ids", [-1], "row 1 (id 'b'): prompt holds token id -1"),
])
def test_a_bad_row_is_named(tmp_path, column, value, message):
    rows = {k: list(v) for k, v in GOOD.items()}
    rows[column][1] = value
    write_table(tmp_path / "bad.parquet", rows)
    with pytest.raises(RowFormatError, match=None) as error:
        figures_of(tmp_path / "bad.parquet", 3500)
    assert message in str(error.value)


def test_a_token_id_equal_to_the_size_is_refused_and_one_below_read(tmp_path):
    """The range check's boundary: 3499 is an id of a 3,500-id tokenizer, 3500 is not."""
    for value, refused in ((3499, False), (3500, True)):
        rows = {k: list(v) for k, v in GOOD.items()}
        rows["chosen_input_ids"][1] = [value, 6]
        write_table(tmp_path / "ids.parquet", rows)
        if refused:
            with pytest.raises(RowFormatError, match="row 1 \\(id 'b'\\): chosen holds token id 3500, outside 0..3499"):
                figures_of(tmp_path / "ids.parquet", 3500)
        else:
            figures_of(tmp_path / "ids.parquet", 3500)


def test_identical_completions_and_lengths_are_refused(tmp_path):
    rows = {k: list(v) for k, v in GOOD.items()}
    rows["rejected_input_ids"][1], rows["rejected_loss_mask"][1] = [5, 6], [0, 1]
    write_table(tmp_path / "same.parquet", rows)
    with pytest.raises(RowFormatError, match="row 1 .*chosen and rejected are the same tokens and targets"):
        figures_of(tmp_path / "same.parquet")
    write_table(tmp_path / "good.parquet", GOOD)
    figures_of(tmp_path / "good.parquet", 3500, prompt_tokens=2, sequence_tokens=3)
    with pytest.raises(RowFormatError, match="row 0 .*its prompt is 2 tokens, over prompt_tokens \\(1\\)"):
        figures_of(tmp_path / "good.parquet", prompt_tokens=1)
    with pytest.raises(RowFormatError, match="row 0 .*prompt and chosen are 3 tokens, over sequence_tokens \\(2\\)"):
        figures_of(tmp_path / "good.parquet", prompt_tokens=2, sequence_tokens=2)


def test_a_file_of_another_format_is_refused(tmp_path, tiny_build):
    with pytest.raises(RowFormatError, match="is not a preference row file"):
        figures_of(tiny_build.parquet)
