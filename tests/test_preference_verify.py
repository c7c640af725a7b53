"""verify on a preference file fails closed: each planted corruption class is found and named (the row
and id where a row is bad, the field and both values where a figure differs), with verify's exit codes;
the built file verifies, through the CLI and the Python API alike."""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import databuild
from conftest import verify_cli
from databuild.config import resolve_config
from databuild.errors import BuildError
from databuild.preference.build import make_preference
from databuild.rowfile.preference import schema
from databuild.rowfile.write import WRITER_OPTIONS

NAME = "muse-spark-tiny-preference-v1"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return make_preference(resolve_config(NAME), tmp_path_factory.mktemp("pref"))


@pytest.fixture
def copied(built, tmp_path):
    """A copy of the build (file and manifest) to corrupt."""
    for path in (built.parquet, built.manifest):
        shutil.copyfile(path, tmp_path / path.name)
    return tmp_path / built.parquet.name


def rewrite(path, change, table_schema=None):
    """The file's rows through `change` (a list of dicts, changed in place), written back as make writes."""
    rows = pq.read_table(path).to_pylist()
    change(rows)
    table = pa.Table.from_pylist(rows, schema=table_schema or schema("paired"))
    pq.write_table(table, path, row_group_size=512, **WRITER_OPTIONS)


def test_the_build_verifies(built):
    result = verify_cli(built.parquet)
    assert result.exit_code == 0 and "verified" in result.output
    assert databuild.verify(built.parquet).failures == []


def set_cell(row: int, column: str, value):
    def change(rows):
        rows[row][column] = value(rows[row]) if callable(value) else value
    return change


CORRUPTIONS = [  # (what is planted, in row 3, and what verify says)
    (set_cell(3, "chosen_loss_mask", lambda r: [2] + r["chosen_loss_mask"][1:]),
     "row 3 (id '{id}'): chosen_loss_mask holds a value other than 0 or 1"),
    (set_cell(3, "rejected_loss_mask", lambda r: r["rejected_loss_mask"][:-1]),
     "row 3 (id '{id}'): rejected_input_ids and rejected_loss_mask lengths differ"),
    (set_cell(3, "chosen_loss_mask", lambda r: [0] * len(r["chosen_loss_mask"])), "row 3 (id '{id}'): chosen holds no target"),
    (lambda rows: rows[3].update(rejected_input_ids=rows[3]["chosen_input_ids"],
                                 rejected_loss_mask=rows[3]["chosen_loss_mask"]),
     "row 3 (id '{id}'): chosen and rejected are the same tokens and targets"),
    (set_cell(3, "rejected_input_ids", lambda r: [99999] + r["rejected_input_ids"][1:]),
     "row 3 (id '{id}'): rejected holds token id 99999, outside 0..3499"),
    (set_cell(3, "prompt_input_ids", lambda r: [5] * 200), "row 3 (id '{id}'): its prompt is 200 tokens, over prompt_tokens (128)"),
    (set_cell(3, "prompt_input_ids", []), "row 3 (id '{id}'): its prompt is empty"),
    (set_cell(3, "chosen_input_ids", lambda r: [(r["chosen_input_ids"][0] + 1) % 3000] + r["chosen_input_ids"][1:]),
     "output.rows_sha256: expected '{rows_sha256}', found "),
    (set_cell(3, "id", "someone-else"), "output.rows_sha256: expected"),
    (lambda rows: rows.insert(0, rows.pop(3)), "first differing row 0: it holds expected row 3 (rows reordered)"),
    (lambda rows: rows.pop(), "output.rows: expected 31, found 30"),
    (set_cell(3, "chosen_loss_mask", lambda r: [1] * len(r["chosen_loss_mask"])), "output.chosen_supervised_tokens: "),
]


@pytest.mark.parametrize("plant, said", CORRUPTIONS)
def test_each_planted_corruption_is_named(copied, built, plant, said):
    row3 = pq.read_table(built.parquet).slice(3, 1).to_pylist()[0]
    rewrite(copied, plant)
    result = verify_cli(copied)
    assert result.exit_code == 1, result.output
    assert said.format(id=row3["id"], rows_sha256=built.data["output"]["rows_sha256"]) in result.output
    with pytest.raises(BuildError):
        databuild.verify(copied)


def test_the_same_rows_in_other_bytes_differ_in_parquet_sha256_only(copied, built):
    pq.write_table(pq.read_table(copied), copied, compression="snappy")
    result = verify_cli(copied)
    assert result.exit_code == 1 and "output.parquet_sha256: expected" in result.output
    assert "rows_sha256" not in result.output


def test_a_schema_other_than_the_preference_one_is_refused(copied):
    other = pa.schema([f if f.name != "chosen_loss_mask" else pa.field("chosen_loss_mask", pa.list_(pa.int32()))
                       for f in schema("paired")], metadata=schema("paired").metadata)
    rewrite(copied, lambda rows: None, other)
    result = verify_cli(copied)
    assert result.exit_code == 1 and "column 'chosen_loss_mask' is list<" in result.output
    assert "int32>, expected list<item: int8>" in result.output


def test_a_null_is_named(copied):
    loose = pa.schema([pa.field(f.name, f.type) for f in schema("paired")], metadata=schema("paired").metadata)
    rewrite(copied, set_cell(2, "rejected_input_ids", None), loose)
    result = verify_cli(copied)
    assert result.exit_code == 1 and "row 2: column 'rejected_input_ids' holds a null" in result.output


def test_a_damaged_manifest_value_is_named(copied, built):
    manifest = copied.with_name(built.manifest.name)
    manifest.write_text(manifest.read_text().replace(built.data["output"]["parquet_sha256"], "0" * 64))
    result = verify_cli(copied)
    assert result.exit_code == 1 and f"output.parquet_sha256: expected '{'0' * 64}'" in result.output


def test_exit_codes_for_usage_and_unreadable_files(copied, built):
    copied.with_name(built.manifest.name).unlink()
    assert verify_cli(copied).exit_code == 2  # nothing to check it against
    rows_sha256 = built.data["output"]["rows_sha256"]
    assert verify_cli(copied, "--rows-sha256", rows_sha256).exit_code == 0
    assert verify_cli(copied, "--rows-sha256", "0" * 64).exit_code == 1
    assert verify_cli(copied, "--segments-sha256", "0" * 64).exit_code == 2
    copied.write_bytes(copied.read_bytes()[:100])
    assert verify_cli(copied, "--rows-sha256", rows_sha256).exit_code in (1, 3)


def test_hash_prints_the_figures_from_the_file_alone(copied, built):
    from conftest import run

    copied.with_name(built.manifest.name).unlink()
    result = run("hash", copied)
    assert result.exit_code == 0, result.output
    lines = dict(line.split(None, 1) for line in result.output.splitlines())
    output = built.data["output"]
    for key in ("rows_sha256", "parquet_sha256", "parquet_bytes", "rows", "chosen_supervised_tokens", "kind"):
        assert lines[key] == str(output[key]), key
