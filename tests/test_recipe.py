"""Writing a build's results into a recipe's workload.dataset block, touching nothing else."""

from __future__ import annotations

import difflib
import shutil

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from conftest import FIXTURES, TINY
from databuild.cli import main
from databuild.errors import BuildError
from databuild.recipe import update_recipe

SEED = FIXTURES / "recipe" / "attune-tp2-pp16-ep8.yaml"  # the seed recipe's YAML, as published
WRITABLE = {"rows_sha256", "name", "tokenizer", "loss_mask", "rows", "row_tokens", "padding_tokens", "seed",
            "template_kwargs", "supervised_token_ratio", "parquet_sha256", "parquet_bytes"}


def changed_keys(before: str, after: str) -> set[str]:
    """The keys of the lines a diff touches, continuation lines counted under the key above them."""
    old, new = before.splitlines(), after.splitlines()
    keys = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for lines, start, end in ((old, i1, i2), (new, j1, j2)):
            for k in range(start, end):
                line = k
                while ":" not in lines[line].split(" #")[0] or lines[line].lstrip().startswith(("-", "#")):
                    line -= 1  # a folded continuation: charge it to its key
                keys.add(lines[line].split(":")[0].strip())
    return keys


def test_make_writes_only_the_dataset_block(tiny_build, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    shutil.copyfile(SEED, recipe)
    result = CliRunner().invoke(main, ["make", TINY, "--out", str(tiny_build.parquet.parent), "--recipe", str(recipe)])
    assert result.exit_code == 0, result.output
    before, after = SEED.read_text(), recipe.read_text()
    touched = changed_keys(before, after)
    assert touched and touched <= WRITABLE, touched
    assert before.splitlines()[:3] == after.splitlines()[:3]  # the comments on top stay
    dataset = YAML(typ="safe").load(after)["workload"]["dataset"]
    output = tiny_build.data["output"]
    assert dataset["rows_sha256"] == output["rows_sha256"]
    build = dataset["build"]
    assert (build["name"], build["rows"], build["row_tokens"], build["parquet_bytes"]) == (
        TINY, 40, 512, output["parquet_bytes"])
    assert build["parquet_sha256"] == output["parquet_sha256"]
    assert build["supervised_token_ratio"] == round(output["supervised_token_ratio"], 2)
    assert build["tokenizer"].startswith("muse-tiny-tokenizer (revision 2222222222222222222222222222222222222222; "
                                         "tokenizer.json sha256 ")
    assert build["packing"].startswith("source conversations in a seeded global permutation")  # untouched
    assert max(len(line) for line in set(after.splitlines()) - set(before.splitlines())) <= 120  # folded

    again = CliRunner().invoke(main, ["make", TINY, "--out", str(tmp_path / "again"), "--recipe", str(recipe)])
    assert again.exit_code == 0 and "already up to date" in again.output
    assert recipe.read_text() == after

    verified = CliRunner().invoke(main, ["verify", str(tiny_build.parquet), "--recipe", str(recipe)])
    assert verified.exit_code == 0, verified.output


def test_the_seed_itself_does_not_verify_against_the_tiny_build(tiny_build):
    result = CliRunner().invoke(main, ["verify", str(tiny_build.parquet), "--recipe", str(SEED)])
    assert result.exit_code == 1
    assert "FAILED rows_sha256: expected 4003478c605da1a2a351a0ba38adba24bcef54355394cedf4a1d425ec049128f" in result.output
    assert "FAILED rows: expected 6400, found 40" in result.output


def test_a_recipe_without_a_dataset_block_is_refused(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: x\nworkload:\n  rows: 3\n")
    with pytest.raises(BuildError, match="no workload.dataset block"):
        update_recipe(recipe, tiny_build.manifest)
    assert recipe.read_text() == "model: x\nworkload:\n  rows: 3\n"


def test_missing_keys_are_added_inside_the_block(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# keep me\nworkload:\n  dataset:\n    name: x  # and me\n    build:\n      name: old\n"
                      "other: 1\n")
    assert update_recipe(recipe, tiny_build.manifest)
    text = recipe.read_text()
    assert text.startswith("# keep me\n") and "name: x  # and me" in text and text.endswith("other: 1\n")
    build = YAML(typ="safe").load(text)["workload"]["dataset"]["build"]
    assert build["name"] == TINY and build["rows"] == 40
