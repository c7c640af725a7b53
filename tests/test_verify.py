"""databuild verify fails closed: each kind of damage is injected and must be caught and named."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import TINY, REPO, verify_cli
from databuild.cli import main
from databuild.rowfile.hashes import hash_parquet
from databuild.rowfile.write import WRITER_OPTIONS

SEED_RECIPE = REPO.parent / "shared" / "seed" / "muse-spark-open-b200-recipe.txt"
GOLDEN = json.loads((REPO / "tests" / "golden" / f"{TINY}.json").read_text())  # inspected values of the tiny build


def recomputed(parquet: Path) -> dict:
    """A row file's figures as data/README.md ("Hashes") defines them: pyarrow to read the file, numpy
    and hashlib alone to hash it, no databuild code."""
    columns = pq.read_table(parquet).to_pydict()
    rows, segments, digests, supervised = hashlib.sha256(), hashlib.sha256(), [], 0
    for ids, mask, starts, conversations in zip(columns["input_ids"], columns["loss_mask"],
                                                columns["seq_start_id"], columns["conversation_ids"]):
        row = np.asarray(ids, dtype="<i4").tobytes() + np.asarray(mask, dtype=np.uint8).tobytes()
        rows.update(row)
        digests.append(hashlib.sha256(row).hexdigest()[:16])
        supervised += sum(mask)
        segments.update(np.array([len(conversations)], "<u4").tobytes() + np.asarray(starts, "<i4").tobytes())
        for conversation in conversations:
            segments.update(np.array([len(conversation.encode())], "<u4").tobytes() + conversation.encode())
    data = parquet.read_bytes()
    return {"rows_sha256": rows.hexdigest(), "segments_sha256": segments.hexdigest(), "row_digests": digests,
            "parquet_sha256": hashlib.sha256(data).hexdigest(), "parquet_bytes": len(data),
            "rows": len(columns["input_ids"]), "supervised_tokens": supervised}


@pytest.fixture
def copy(tiny_build, tmp_path):
    """A private copy of the tiny build: (parquet, manifest)."""
    parquet = tmp_path / f"{TINY}.parquet"
    shutil.copyfile(tiny_build.parquet, parquet)
    shutil.copyfile(tiny_build.manifest, tmp_path / f"{TINY}.manifest.json")
    return parquet, tmp_path / f"{TINY}.manifest.json"


def rewrite(parquet: Path, change) -> None:
    """Rewrite the file validly (same writer settings) with change applied to its rows."""
    rows = pq.read_table(parquet).to_pylist()
    rows = change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(parquet)), parquet, **WRITER_OPTIONS)


def test_hash_command_and_the_manifest_give_the_figures_recomputed_by_hand(copy):
    parquet, manifest = copy
    expected = recomputed(parquet)
    # the recomputation itself, against the golden values inspected when they were recorded
    assert (expected["rows_sha256"], expected["segments_sha256"], expected["rows"], expected["supervised_tokens"]) == (
        GOLDEN["rows_sha256"], GOLDEN["segments_sha256"], GOLDEN["rows"], GOLDEN["supervised_tokens"])
    expected |= {"row_tokens": 512, "padding_tokens": 0}  # fixed512: concat rows, never padded
    output = json.loads(manifest.read_text())["output"]
    result = CliRunner().invoke(main, ["hash", str(parquet)])
    assert result.exit_code == 0
    for key in ("rows_sha256", "segments_sha256", "parquet_sha256", "parquet_bytes", "rows", "row_tokens",
                "padding_tokens"):
        assert output[key] == expected[key], key
        assert f"{key:<23}{expected[key]}" in result.output
    ratio = GOLDEN["supervised_tokens"] / (40 * 512)
    assert output["supervised_token_ratio"] == ratio and f"{ratio!r}" in result.output


def test_moved_boundaries_change_segments_sha256_only(copy):
    """A segment start moved by one token: rows_sha256 cannot see it, segments_sha256 must."""
    parquet, manifest = copy
    output = json.loads(manifest.read_text())["output"]
    rewrite(parquet, lambda rows: [{**rows[0], "seq_start_id": [0, rows[0]["seq_start_id"][1] + 1,
                                                                *rows[0]["seq_start_id"][2:]]}] + rows[1:])
    assert verify_cli(parquet, "--rows-sha256", output["rows_sha256"]).exit_code == 0
    result = verify_cli(parquet, "--segments-sha256", output["segments_sha256"])
    assert result.exit_code == 1 and "FAILED segments_sha256: expected" in result.output
    assert "FAILED segments_sha256" in verify_cli(parquet).output


def test_intact_file_verifies(copy):
    result = verify_cli(copy[0])
    assert result.exit_code == 0 and "verified" in result.output


@pytest.mark.parametrize("where", [0.0, 0.3, 0.6, 0.999])
def test_a_flipped_bit_anywhere(copy, where):
    parquet, _ = copy
    data = bytearray(parquet.read_bytes())
    data[int(where * (len(data) - 1))] ^= 0x10
    parquet.write_bytes(bytes(data))
    result = verify_cli(parquet)
    assert result.exit_code in (1, 3)
    assert "FAILED parquet_sha256: expected" in result.output


@pytest.mark.parametrize("damage, message", [
    (lambda rows: [{**rows[0], "input_ids": [rows[0]["input_ids"][0] ^ 1] + rows[0]["input_ids"][1:]}] + rows[1:],
     "first differing row 0"),
    (lambda rows: rows[:7] + [{**rows[7], "loss_mask": [1 - rows[7]["loss_mask"][0]] + rows[7]["loss_mask"][1:]}]
     + rows[8:], "first differing row 7"),
    (lambda rows: rows[:3] + [rows[4], rows[3]] + rows[5:], "first differing row 3: it holds expected row 4"),
    (lambda rows: rows[:-1], "missing rows: expected 40, found 39"),
    (lambda rows: rows + rows[:1], "extra rows: expected 40, found 41"),
])
def test_valid_rewrites_are_caught_with_the_row(copy, damage, message):
    parquet, _ = copy
    rewrite(parquet, damage)
    result = verify_cli(parquet)
    assert result.exit_code == 1
    assert "FAILED rows_sha256: expected" in result.output and message in result.output


@pytest.mark.parametrize("cut", ["truncated", "footer lost"])
def test_truncated_or_footless_file_is_unreadable(copy, cut):
    parquet, _ = copy
    data = parquet.read_bytes()
    parquet.write_bytes(data[: len(data) // 2] if cut == "truncated" else data[:-8])
    result = verify_cli(parquet)
    assert result.exit_code == 3 and "not readable as parquet" in result.output


@pytest.mark.parametrize("change, message", [
    (lambda t: t.set_column(0, pa.field("input_ids", pa.list_(pa.int64())), t.column(0).cast(pa.list_(pa.int64()))),
     "int64>, expected list<item: int32>"),
    (lambda t: t.drop_columns(["seq_start_id"]), "missing column 'seq_start_id'"),
    (lambda t: pa.Table.from_pylist([{**r, "input_ids": r["input_ids"][:-1], "loss_mask": r["loss_mask"][:-1]}
                                     if i == 5 else r for i, r in enumerate(t.to_pylist())], schema=t.schema),
     "row 5 has a length other than 512 tokens"),
    (lambda t: pa.Table.from_pylist([{**r, "seq_start_id": [3] + r["seq_start_id"][1:]} if i == 2 else r
                                     for i, r in enumerate(t.to_pylist())], schema=t.schema),
     "row 2: seq_start_id must start at 0"),
    (lambda t: pa.Table.from_pylist([{**r, "loss_mask": r["loss_mask"][:-1] + [2]} if i == 6 else r
                                     for i, r in enumerate(t.to_pylist())], schema=t.schema),
     "row 6: loss_mask holds a value other than 0 or 1"),
    (lambda t: pa.Table.from_pylist([{**r, "loss_mask": [-1] + r["loss_mask"][1:]} if i == 9 else r
                                     for i, r in enumerate(t.to_pylist())], schema=t.schema),
     "row 9: loss_mask holds a value other than 0 or 1"),
])
def test_wrong_schema_or_shape(copy, change, message):
    parquet, _ = copy
    pq.write_table(change(pq.read_table(parquet)), parquet, **WRITER_OPTIONS)
    result = verify_cli(parquet)
    assert result.exit_code == 1 and message in result.output


@pytest.mark.parametrize("starts", [[0, 300, 200], [0, 100, 100], [0, 100, 512], [0, 600, 700]],
                         ids=["decreasing", "repeated", "at the row's end", "past the row's end"])
def test_segment_starts_that_do_not_increase_inside_the_row_are_refused(copy, starts):
    """Boundaries a trainer would slice by: each must lie inside the row, after the one before."""
    parquet, manifest = copy
    rewrite(parquet, _with_row(4, seq_start_id=starts, conversation_ids=["a", "b", "c"]))
    output = json.loads(manifest.read_text())["output"]
    result = verify_cli(parquet, "--rows-sha256", output["rows_sha256"])  # the tokens are untouched
    assert result.exit_code == 1
    assert "row 4: seq_start_id must start at 0 and increase within the row" in result.output


def test_a_manifest_of_another_build(copy, tmp_path):
    parquet, manifest = copy
    other = json.loads(manifest.read_text())
    other["output"]["rows_sha256"] = "0" * 64
    other["output"]["rows"] = 41
    manifest.write_text(json.dumps(other))
    result = verify_cli(parquet)
    assert result.exit_code == 1
    assert f"FAILED rows_sha256: expected {'0' * 64}" in result.output and "FAILED rows: expected 41, found 40" in result.output


def test_leftover_incomplete_build(copy):
    parquet, _ = copy
    parquet.with_name(parquet.name + ".partial").write_bytes(b"PAR1")
    result = verify_cli(parquet)
    assert result.exit_code == 1 and "an incomplete build was left behind" in result.output


def test_no_manifest_means_incomplete(copy):
    parquet, manifest = copy
    manifest.unlink()
    result = verify_cli(parquet)
    assert result.exit_code == 1 and "no manifest beside it" in result.output


def test_explicit_hashes(copy):
    parquet, manifest = copy
    output = json.loads(manifest.read_text())["output"]
    assert verify_cli(parquet, "--rows-sha256", output["rows_sha256"]).exit_code == 0
    result = verify_cli(parquet, "--parquet-sha256", "f" * 64)
    assert result.exit_code == 1 and f"expected {'f' * 64}" in result.output


def test_version_differences_warn_without_failing(copy):
    parquet, manifest = copy
    data = json.loads(manifest.read_text())
    data["versions"]["pyarrow"] = "1.0.0"
    manifest.write_text(json.dumps(data))
    result = verify_cli(parquet)
    assert result.exit_code == 0 and "warning: built with pyarrow 1.0.0" in result.output


def test_streaming_hash_equals_the_build_hash(tiny_build):
    """The row digests the build wrote as it went, those verify reads back, and those recomputed by hand agree."""
    summary = hash_parquet(tiny_build.parquet)
    expected = recomputed(tiny_build.parquet)
    assert summary.rows_sha256 == tiny_build.data["output"]["rows_sha256"] == expected["rows_sha256"]
    assert list(summary.row_digests) == tiny_build.data["row_digests"] == expected["row_digests"]
    assert len(set(expected["row_digests"])) == 40


@pytest.mark.parametrize("change, message", [
    (lambda m: {"format": m["format"]}, "the manifest has no output.parquet_sha256"),
    (lambda m: {**m, "output": {k: v for k, v in m["output"].items() if k != "rows_sha256"}},
     "the manifest has no output.rows_sha256"),
    (lambda m: {**m, "output": "done"}, "manifest field output is str 'done', expected dict"),
    (lambda m: {**m, "versions": "latest"}, "manifest field versions is str 'latest', expected dict"),
])
def test_a_manifest_that_pins_too_little_is_refused(copy, change, message):
    parquet, manifest = copy
    manifest.write_text(json.dumps(change(json.loads(manifest.read_text()))))
    result = verify_cli(parquet)
    assert result.exit_code == 1 and message in result.output and "verified" not in result.output


def _with_row(row: int, **values):
    return lambda rows: [{**r, **values} if i == row else r for i, r in enumerate(rows)]


@pytest.mark.parametrize("change, message", [
    (_with_row(3, loss_mask=[None] + [0] * 511), "row 3: column 'loss_mask' holds a null value"),
    (_with_row(0, input_ids=None), "row 0: column 'input_ids' is null"),
    (_with_row(7, conversation_ids=[None]), "row 7: column 'conversation_ids' holds a null, or an empty id before"),
    (_with_row(7, seq_start_id=[0, 9], conversation_ids=["", "x"]),
     "row 7: column 'conversation_ids' holds a null, or an empty id before its last segment"),
    (_with_row(7, seq_start_id=[0, 9], conversation_ids=["x", ""]),
     "row 7: its padding segment (conversation id \"\") holds a target"),
])
def test_nulls_and_empty_ids_are_refused_before_hashing(copy, change, message):
    """numpy reads a null as NaN, which hashes and compares like a number: refused before."""
    parquet, manifest = copy
    rewrite(parquet, change)
    output = json.loads(manifest.read_text())["output"]
    result = verify_cli(parquet, "--rows-sha256", output["rows_sha256"])
    assert result.exit_code == 1 and message in result.output


def test_an_extra_column_is_refused(copy):
    parquet, manifest = copy
    table = pq.read_table(parquet)
    pq.write_table(table.append_column("note", pa.array(["x"] * table.num_rows)), parquet, **WRITER_OPTIONS)
    output = json.loads(manifest.read_text())["output"]
    result = verify_cli(parquet, "--rows-sha256", output["rows_sha256"])
    assert result.exit_code == 1 and "unexpected column 'note'" in result.output


@pytest.mark.parametrize("shown, verified", [("0.65", True), ("0.6491", True), ("0.60", False), ("0.6", False),
                                             ("1", False), ("0.649", True), ("0.648", False)])
def test_a_recipe_ratio_is_checked_to_the_decimals_it_shows_and_at_least_two(copy, tmp_path, shown, verified):
    parquet, manifest = copy
    assert round(GOLDEN["supervised_tokens"] / (40 * 512), 4) == 0.6491  # 13,294 targets in 40 rows of 512
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"workload:\n  dataset:\n    build:\n      supervised_token_ratio: {shown}  # as published\n")
    result = verify_cli(parquet, "--recipe", recipe)
    assert (result.exit_code == 0) == verified, result.output


def test_a_recipe_ratio_that_is_not_a_number_is_one_line(copy, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  dataset:\n    build:\n      supervised_token_ratio: high\n")
    result = verify_cli(copy[0], "--recipe", recipe)
    assert result.exit_code == 1 and "supervised_token_ratio: 'high' is not a number" in result.output


def test_an_expectation_verify_cannot_check_fails_closed(copy):
    """A figure verify does not compute, or cannot read, is a failure, never silently skipped."""
    from databuild.verification import Expectation, Expected, verify

    parquet, _ = copy
    report = verify(parquet, Expected([Expectation("rows_sha512", "00", "a newer recipe")]))
    assert report.failures == ["rows_sha512: expected 00 (a newer recipe), not checked: verify computes no such figure"]
    parquet.write_bytes(parquet.read_bytes()[:100])  # no footer: the rows cannot be read
    report = verify(parquet, Expected([Expectation("rows_sha256", "ab", "--rows-sha256")]))
    assert "rows_sha256: expected ab (--rows-sha256), not checked: the rows could not be read" in report.failures


def test_the_readme_recomputation_gives_the_pinned_figures(tiny_build, tmp_path, monkeypatch):
    """data/README.md promises the figures with numpy and hashlib alone: its snippet, run as printed
    (from a directory holding the build under build/), prints the inspected values."""
    import contextlib
    import io
    import re

    snippet = re.search(r"With numpy and hashlib alone.*?```python\n(.*?)```",
                        (REPO / "data" / "README.md").read_text(), re.S).group(1)
    (tmp_path / "build").mkdir()
    shutil.copyfile(tiny_build.parquet, tmp_path / "build" / tiny_build.parquet.name)
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet, {})
    figures = dict(line.split(" ", 1) for line in printed.getvalue().splitlines())
    assert figures == {"rows_sha256": GOLDEN["rows_sha256"], "segments_sha256": GOLDEN["segments_sha256"],
                       "supervised_token_ratio": repr(GOLDEN["supervised_tokens"] / (40 * 512)),
                       "parquet_sha256": hashlib.sha256(tiny_build.parquet.read_bytes()).hexdigest()}


def test_rows_of_another_length_in_a_later_row_group_are_refused(copy):
    """The row length is the file's first row's, in every row group: each group is read alone."""
    parquet, _ = copy
    rows = pq.read_table(parquet).to_pylist()
    rows[20:] = [{**r, "input_ids": r["input_ids"][:-1], "loss_mask": r["loss_mask"][:-1]} for r in rows[20:]]
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(parquet)), parquet, row_group_size=20,
                   **WRITER_OPTIONS)
    assert pq.ParquetFile(parquet).num_row_groups == 2
    result = verify_cli(parquet)
    assert result.exit_code == 1 and "row 20 has a length other than 512 tokens" in result.output
