"""The package-level API: make, verify, export, load; one exception type with the CLI's lines."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import databuild
from conftest import REPO, TINY


@pytest.fixture
def copy(tiny_build, tmp_path):
    shutil.copyfile(tiny_build.parquet, tmp_path / f"{TINY}.parquet")
    shutil.copyfile(tiny_build.manifest, tmp_path / f"{TINY}.manifest.json")
    return tmp_path / f"{TINY}.parquet"


def test_load_gives_the_hf_layout_of_the_verified_rows(tiny_build):
    dataset = databuild.load(tiny_build.parquet)
    native = pq.read_table(tiny_build.parquet).to_pylist()
    assert dataset.column_names == ["input_ids", "labels", "seq_lengths"] and len(dataset) == 40
    for row, example in zip(native, dataset):
        ids, mask = np.array(row["input_ids"]), np.array(row["loss_mask"])
        assert example["input_ids"] == row["input_ids"]
        starts = np.zeros(512, dtype=bool)
        starts[row["seq_start_id"]] = True  # the tiny build has no padding segment
        assert example["labels"] == np.where((mask == 1) & ~starts, ids, -100).tolist()
        assert example["seq_lengths"] == np.diff(row["seq_start_id"] + [512]).tolist()


def test_a_corrupt_file_raises_and_never_loads(copy):
    data = bytearray(copy.read_bytes())
    data[100] ^= 0x01
    copy.write_bytes(bytes(data))
    with pytest.raises(databuild.BuildError, match=r"parquet: refused, does not verify: (row group 0 unreadable|parquet_sha256: expected)"):
        databuild.load(copy)
    with pytest.raises(databuild.BuildError, match="does not verify: .*(unreadable|parquet_sha256: expected)"):
        databuild.verify(copy)


def test_errors_are_one_exception_type_with_one_line(tmp_path):
    with pytest.raises(databuild.BuildError) as missing:
        databuild.verify(tmp_path / "nothing.parquet")
    with pytest.raises(databuild.BuildError) as unknown:
        databuild.make("no-such-config")
    with pytest.raises(databuild.BuildError) as bad_format:
        databuild.export(tmp_path / "nothing.parquet", "torchtune", tmp_path / "out.parquet")
    for error in (missing, unknown, bad_format):
        assert "\n" not in str(error.value)


def test_verify_returns_the_report_of_a_good_file(tiny_build, tmp_path):
    assert databuild.verify(tiny_build.parquet).failures == []
    out = databuild.export(tiny_build.parquet, "hf", tmp_path / "hf.parquet").path
    assert databuild.verify(out, source=tiny_build.parquet).failures == []


def test_license_matches_pyproject():
    declared = re.search(r'^license = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert declared == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()
