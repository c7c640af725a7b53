"""verify checks every token id against the tokenizer's size the manifest records (an id equal to the size is
out of range), and show, report and diff refuse a row holding such an id in one line (an OverflowError before)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from databuild.cli import main
from databuild.rowfile.hashes import hash_parquet

TOKEN = 5  # the token of row 0 given another id


def with_id(tiny_build, tmp_path, token_id: int, name: str = "x"):
    """A copy of the tiny build whose row 0 token TOKEN is `token_id`, with a manifest whose output figures are
    the new file's (as one forged, or written by a build that went wrong, would be): only the id is off."""
    folder = tmp_path / name
    folder.mkdir()
    parquet, manifest = folder / tiny_build.parquet.name, folder / tiny_build.manifest.name
    table = pq.read_table(tiny_build.parquet)
    ids = table.column("input_ids").to_pylist()
    ids[0][TOKEN] = token_id
    column = pa.array(ids, type=table.schema.field("input_ids").type)
    pq.write_table(table.set_column(table.schema.get_field_index("input_ids"), "input_ids", column), parquet)
    data = json.loads(tiny_build.manifest.read_text())
    if token_id < 0:  # no figures to forge: hash_parquet refuses the file whatever the size
        manifest.write_text(json.dumps(data, indent=2))
        return parquet, manifest
    summary = hash_parquet(parquet)
    data["output"].update(rows_sha256=summary.rows_sha256, parquet_sha256=summary.parquet_sha256,
                          parquet_bytes=summary.parquet_bytes)
    data["row_digests"] = list(summary.row_digests)
    manifest.write_text(json.dumps(data, indent=2))
    return parquet, manifest


def cli(*args):
    result = CliRunner().invoke(main, [*map(str, args)])
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit), \
        result.output
    return result


def test_the_manifest_records_the_tokenizer_size(tiny_build, tokenizer):
    assert tiny_build.data["inputs"]["tokenizer"]["size"] == len(tokenizer)
    ids = pq.read_table(tiny_build.parquet).column("input_ids").to_pylist()
    assert max(max(row) for row in ids) < len(tokenizer)


def test_verify_refuses_an_id_equal_to_the_size_and_accepts_one_below(tiny_build, tokenizer, tmp_path):
    size = len(tokenizer)
    parquet, _ = with_id(tiny_build, tmp_path, size - 1, "below")
    result = cli("verify", parquet)
    assert result.exit_code == 0, result.output
    parquet, _ = with_id(tiny_build, tmp_path, size, "at")
    result = cli("verify", parquet)
    assert result.exit_code == 1
    assert (f"{parquet}: row 0: token {TOKEN} has id {size}, outside 0..{size - 1} (the tokenizer's size, "
            "inputs.tokenizer.size in the manifest)") in result.output
    failed = [line for line in result.output.splitlines() if line.startswith("FAILED")]
    assert "has id" in failed[0] and all("not checked: the rows could not be read" in line for line in failed[1:])


def test_verify_refuses_a_negative_id_without_a_size(tiny_build, tmp_path):
    parquet, manifest = with_id(tiny_build, tmp_path, -1)
    data = json.loads(manifest.read_text())
    del data["inputs"]["tokenizer"]["size"]  # a manifest written before the size was recorded
    manifest.write_text(json.dumps(data))
    result = cli("verify", parquet)
    assert result.exit_code == 1 and f"row 0: token {TOKEN} has id -1, negative" in result.output


@pytest.mark.parametrize("command, status", [("show", 1), ("report", 1), ("diff", 2)])
def test_views_refuse_an_id_the_tokenizer_has_not_in_one_line(tiny_build, tokenizer, tmp_path, command, status):
    size = len(tokenizer)
    parquet, _ = with_id(tiny_build, tmp_path, 2**31 - 1)
    args = {"show": [parquet], "report": [parquet, "-o", tmp_path / "r.html"],
            "diff": [tiny_build.parquet, parquet]}[command]
    result = cli(command, *args)
    assert result.exit_code == status and result.output.count("\n") == 1, result.output
    assert (f"{parquet}: row 0: token {TOKEN} has id {2**31 - 1}, outside 0..{size - 1} (the {size:,} ids of the "
            "tokenizer it is decoded with)") in result.output
