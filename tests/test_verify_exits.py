"""verify checks every expectation it is given, on a native row file and on each export, or refuses the
option (exit 2); its exit codes are data/README's table ("verify"), each one reached here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import TINY, verify_cli

EXPORTS = ("hf", "megatron-bridge", "miles")
WRONG = "f" * 64


@pytest.fixture(scope="module")
def exported(tiny_build, tmp_path_factory):
    """The tiny build and an export of it in each format, in one directory: {kind: path}."""
    import databuild

    out = tmp_path_factory.mktemp("exported")
    for path in (tiny_build.parquet, tiny_build.manifest):
        shutil.copyfile(path, out / path.name)
    files = {"native": out / tiny_build.parquet.name}
    for fmt in EXPORTS:
        files[fmt] = databuild.export(files["native"], fmt, out / fmt / f"{fmt}.parquet").path
    return files


@pytest.fixture
def copied(exported, tmp_path):
    """A private copy of `exported`, for tests that damage a file."""
    shutil.copytree(exported["native"].parent, tmp_path / "x")
    return {kind: tmp_path / "x" / path.relative_to(exported["native"].parent) for kind, path in exported.items()}


def recipe(tmp_path: Path, output: dict, **changed) -> Path:
    """A recipe's workload.dataset block pinning `output`'s figures, some of them changed."""
    values = {**{k: output[k] for k in ("rows_sha256", "parquet_sha256", "parquet_bytes", "rows", "row_tokens",
                                        "padding_tokens")}, **changed}
    path = tmp_path / "recipe.yaml"
    path.write_text("workload:\n  dataset:\n    rows_sha256: " + values.pop("rows_sha256") + "\n    build:\n"
                    + "".join(f"      {k}: {v}\n" for k, v in values.items()))
    return path


# --- the exit codes, one by one -----------------------------------------------------------------------

def test_exit_0_every_check_holds(exported):
    for kind in ("native", *EXPORTS):
        result = verify_cli(exported[kind])
        assert result.exit_code == 0 and result.output.startswith("verified "), (kind, result.output)


def test_exit_1_a_difference(copied, tiny_build, tmp_path):
    assert verify_cli(copied["native"], "--rows-sha256", WRONG).exit_code == 1
    copied["native"].with_name(f"{TINY}.manifest.json").unlink()
    result = verify_cli(copied["native"])
    assert result.exit_code == 1 and "no manifest beside it" in result.output


@pytest.mark.parametrize("kind", ["native", *EXPORTS])
def test_exit_3_a_missing_file(copied, kind):
    """Missing with its manifest beside it, and missing with nothing beside it: unreadable both times."""
    copied[kind].unlink()
    result = verify_cli(copied[kind])
    assert result.exit_code == 3 and f"{copied[kind]}: no such file" in result.output, result.output
    for manifest in copied[kind].parent.glob("*.manifest.json"):
        manifest.unlink()
    result = verify_cli(copied[kind])
    assert result.exit_code == 3 and f"{copied[kind]}: no such file" in result.output, result.output


@pytest.mark.parametrize("kind", ["native", *EXPORTS])
@pytest.mark.parametrize("cut", [100, -100], ids=["truncated", "footer lost"])
def test_exit_3_an_unreadable_file(copied, kind, cut):
    data = copied[kind].read_bytes()
    copied[kind].write_bytes(data[:cut])
    result = verify_cli(copied[kind])
    assert result.exit_code == 3 and "not readable as parquet" in result.output, result.output


def test_exit_2_an_option_that_does_not_apply(exported):
    result = verify_cli(exported["native"], "--from", exported["hf"])
    assert result.exit_code == 2 and "no export manifest describes this file" in result.output
    result = verify_cli(exported["native"], "--no-such-option")
    assert result.exit_code == 2


# --- every expectation on every kind of file ------------------------------------------------------------

def options(tmp_path: Path, output: dict, field: str, right: bool) -> list[str]:
    value = {"rows_sha256": output["rows_sha256"], "parquet_sha256": output["parquet_sha256"],
             "segments_sha256": output["segments_sha256"]}
    if field == "recipe":
        return ["--recipe", recipe(tmp_path, output, **({} if right else {"parquet_sha256": WRONG}))]
    return [f"--{field.replace('_', '-')}", value[field] if right else WRONG]


FIELDS = ("rows_sha256", "parquet_sha256", "segments_sha256", "recipe")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("kind", ["native", *EXPORTS])
def test_every_option_with_a_wrong_value_fails_on_every_kind(exported, tiny_build, tmp_path, kind, field):
    """On an export, the hashes pin the native file: checked there with --from, refused without it."""
    output = tiny_build.data["output"]
    native = [] if kind == "native" else ["--from", exported["native"]]
    wrong = verify_cli(exported[kind], *native, *options(tmp_path, output, field, right=False))
    assert wrong.exit_code == 1 and "FAILED" in wrong.output and f"expected {WRONG}" in wrong.output, wrong.output
    assert "verified" not in wrong.output
    right = verify_cli(exported[kind], *native, *options(tmp_path, output, field, right=True))
    assert right.exit_code == 0, right.output
    if kind != "native":
        refused = verify_cli(exported[kind], *options(tmp_path, output, field, right=True))
        assert refused.exit_code == 2 and "add --from NATIVE.parquet" in refused.output, refused.output
        assert refused.output.count("\n") == 1


@pytest.mark.parametrize("kind", ["native", *EXPORTS])
@pytest.mark.parametrize("changed", [{"parquet_sha256": WRONG}, {"parquet_bytes": 12345}],
                         ids=["parquet_sha256", "parquet_bytes"])
def test_a_recipe_with_the_right_rows_and_a_wrong_file_hash_or_size_fails(exported, tiny_build, tmp_path, kind,
                                                                           changed):
    """The recipe's build.parquet_sha256 and parquet_bytes are checked, not only its rows_sha256."""
    native = [] if kind == "native" else ["--from", exported["native"]]
    result = verify_cli(exported[kind], *native, "--recipe", recipe(tmp_path, tiny_build.data["output"], **changed))
    [(field, value)] = changed.items()
    assert result.exit_code == 1 and f"{field}: expected {value}, found" in result.output, result.output


def test_the_python_api_checks_the_same(exported, tiny_build):
    import databuild

    with pytest.raises(databuild.BuildError, match="rows_sha256 pin the native row file"):
        databuild.verify(exported["hf"], rows_sha256=WRONG)
    with pytest.raises(databuild.BuildError, match=f"rows_sha256: expected {WRONG}"):
        databuild.verify(exported["hf"], rows_sha256=WRONG, source=exported["native"])
    rows_sha256 = tiny_build.data["output"]["rows_sha256"]
    assert databuild.verify(exported["miles"], rows_sha256=rows_sha256, source=exported["native"]).failures == []


def test_a_manifest_of_another_export_given_with_an_option(exported, tmp_path):
    """--manifest names the export's manifest; the expectations still go to the --from file."""
    manifest = json.loads(exported["hf"].with_name("hf.manifest.json").read_text())
    assert manifest["source"]["file"] == f"{TINY}.parquet"
    result = verify_cli(exported["hf"], "--manifest", exported["hf"].with_name("hf.manifest.json"),
                        "--segments-sha256", WRONG, "--from", exported["native"])
    assert result.exit_code == 1 and f"segments_sha256: expected {WRONG}" in result.output
