"""diff of two preference row files: identical builds say so (exit 0); a changed pin, a changed row, moved
rows and a lost row are each said, with the first place the rows part (exit 1); a preference file against
an SFT file is a usage error (exit 2)."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run
from databuild.config import resolve_config
from databuild.preference.build import make_preference
from databuild.rowfile.preference import schema
from databuild.rowfile.write import WRITER_OPTIONS

NAME = "muse-spark-tiny-preference-v1"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return make_preference(resolve_config(NAME), tmp_path_factory.mktemp("pref"))


def copy(built, folder):
    folder.mkdir()
    for path in (built.parquet, built.manifest):
        shutil.copyfile(path, folder / path.name)
    return folder / built.parquet.name


def rewrite(path, change):
    rows = pq.read_table(path).to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema("paired")), path, row_group_size=512, **WRITER_OPTIONS)


def test_the_same_build_is_identical(built, tmp_path):
    result = run("diff", built.parquet, copy(built, tmp_path / "b"))
    assert result.exit_code == 0 and result.output.startswith("identical: the same pins and the same 31 rows")


def test_a_changed_token_is_placed(built, tmp_path):
    other = copy(built, tmp_path / "b")
    row3 = pq.read_table(built.parquet).slice(3, 1).to_pylist()[0]

    def change(rows):
        rows[3]["rejected_input_ids"][2] += 1
    rewrite(other, change)
    result = run("diff", built.parquet, other)
    assert result.exit_code == 1, result.output
    assert "1 differ in place (rejected_input_ids 1); 0 of them are rows of A found whole elsewhere in B" in result.output
    token = row3["rejected_input_ids"][2]
    assert f"first: row 3 (id '{row3['id']}' in A, '{row3['id']}' in B): rejected_input_ids parts at token 2 " \
           f"({token} in A, {token + 1} in B" in result.output


def test_moved_and_lost_rows(built, tmp_path):
    other = copy(built, tmp_path / "b")
    rewrite(other, lambda rows: (rows.insert(0, rows.pop(5)), rows.pop()))
    result = run("diff", built.parquet, other)
    assert result.exit_code == 1
    assert "rows: 31 in A, 30 in B; 7 differ in place" in result.output  # rows 0-5 moved, row 30 lost
    assert "row count 1" in result.output and "6 of them are rows of A found whole elsewhere in B" in result.output
    ids = pq.read_table(built.parquet, columns=["id"]).column("id").to_pylist()
    assert f"first: row 0: id is {ids[0]!r} in A, {ids[5]!r} in B" in result.output


def test_a_changed_pin_is_listed(built, tmp_path):
    other = copy(built, tmp_path / "b")
    manifest = other.with_name(built.manifest.name)
    data = json.loads(manifest.read_text())
    data["build"]["seed"] = 7
    manifest.write_text(json.dumps(data))
    result = run("diff", built.parquet, other)
    assert result.exit_code == 1 and "build.seed: 42 in A, 7 in B" in result.output
    assert "rows: the same 31 rows" in result.output


def test_a_preference_file_against_an_sft_file_is_refused(built, tiny_build):
    result = run("diff", built.parquet, tiny_build.parquet)
    assert result.exit_code == 2 and "is a preference row file and" in result.output
