"""Writing a build's results into a recipe's workload.dataset block, touching nothing else."""

from __future__ import annotations

import difflib
import hashlib
import shutil

import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from conftest import FIXTURES, TINY
from databuild.cli import main
from databuild.errors import BuildError
from databuild.publish.recipe import update_recipe

SEED = FIXTURES / "recipe" / "attune-tp2-pp16-ep8.yaml"  # the seed recipe's YAML, as published
WRITABLE = {"rows_sha256", "name", "tokenizer", "loss_mask", "rows", "row_tokens", "padding_tokens", "seed",
            "template_kwargs", "supervised_token_ratio", "parquet_sha256", "parquet_bytes", "packing_policy"}


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


def make_into(recipe, out, *flags):
    return CliRunner().invoke(main, ["make", TINY, "--out", str(out), "--recipe", str(recipe), *flags])


def written_block(tiny_build) -> dict[tuple[str, ...], object]:
    """What make writes into workload.dataset for the tiny build (data/README.md lists the keys), written
    out as inspected: the golden rows_sha256, the config's settings and tokenizer pins, the parquet's
    own bytes hashed here."""
    data = tiny_build.parquet.read_bytes()
    return {
        ("rows_sha256",): "2158c70f41fade925e6665e9ef0d2aaff68f934e0dd726c646763871797433e6",
        ("build", "name"): TINY,
        ("build", "tokenizer"): "muse-tiny-tokenizer (revision 2222222222222222222222222222222222222222; "
                                "tokenizer.json sha256 425577cab81b42b02577a51826022917dcfe02b6c7350dbe603cf04f54ad3d9f; "
                                "chat_template.jinja sha256 6a2828cdf297dd4ad3dec66ce938253926195d4352a4dbdb369e24b418deace7)",
        ("build", "loss_mask"): "muse_spark",
        ("build", "rows"): 40,
        ("build", "row_tokens"): 512,
        ("build", "padding_tokens"): 0,
        ("build", "seed"): 42,
        ("build", "supervised_token_ratio"): 0.65,  # 13,294 targets / (40 x 512) = 0.6491, at two decimals
        ("build", "parquet_sha256"): hashlib.sha256(data).hexdigest(),
        ("build", "parquet_bytes"): len(data),
        ("build", "template_kwargs"): "current_date 2026-10-01, reasoning_effort xhigh",
        ("build", "packing_policy"): "concat",
    }


def build_value(tiny_build, path):
    return written_block(tiny_build)[path]


def loaded_build(text):
    return YAML(typ="safe").load(text)["workload"]["dataset"]["build"]


def test_make_writes_only_the_dataset_block(tiny_build, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    shutil.copyfile(SEED, recipe)
    result = make_into(recipe, tiny_build.parquet.parent, "--repin")  # the seed pins another build's values
    assert result.exit_code == 0, result.output
    before, after = SEED.read_text(), recipe.read_text()
    touched = changed_keys(before, after)
    assert touched and touched <= WRITABLE, touched
    assert before.splitlines()[:3] == after.splitlines()[:3]  # the comments on top stay
    dataset = YAML(typ="safe").load(after)["workload"]["dataset"]
    expected = written_block(tiny_build)
    assert dataset["rows_sha256"] == expected["rows_sha256",]
    build = dataset["build"]
    for key in ("name", "rows", "row_tokens", "parquet_bytes", "parquet_sha256", "supervised_token_ratio", "tokenizer"):
        assert build[key] == expected["build", key], key
    assert build["packing"].startswith("source conversations in a seeded global permutation")  # untouched
    assert max(len(line) for line in set(after.splitlines()) - set(before.splitlines())) <= 120  # folded

    again = make_into(recipe, tmp_path / "again")  # equal values need no --repin
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
    recipe.write_text("# keep me\nworkload:\n  dataset:\n    name: x  # and me\n    build:\n"
                      f"      name: {TINY}\nother: 1\n")  # an equal value is left alone
    assert update_recipe(recipe, tiny_build.manifest)
    text = recipe.read_text()
    assert text.startswith("# keep me\n") and "name: x  # and me" in text and text.endswith("other: 1\n")
    build = YAML(typ="safe").load(text)["workload"]["dataset"]["build"]
    assert build["name"] == TINY and build["rows"] == 40


@pytest.mark.parametrize("pin, path, shown", [
    ("    rows_sha256: '" + "0" * 64 + "'\n    build:\n      seed: 42\n", ("rows_sha256",), repr("0" * 64)),
    ("    build:\n      rows: 41\n", ("build", "rows"), "41"),
    ("    build:\n      name: some-other-config\n", ("build", "name"), "'some-other-config'"),
], ids=["rows_sha256", "build.rows", "build.name"])
def test_a_differing_pinned_value_is_refused_and_the_build_stays_published(tiny_build, tmp_path, pin, path, shown):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("workload:\n  dataset:\n" + pin)
    before = recipe.read_bytes()
    result = make_into(recipe, tmp_path / "out")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert (f"workload.dataset.{'.'.join(path)} is {shown} in the recipe but {build_value(tiny_build, path)!r} "
            "in this build (1 differing key in all)") in result.stderr
    assert "pass --repin to overwrite" in result.stderr
    assert recipe.read_bytes() == before
    assert (tmp_path / "out" / f"{TINY}.parquet").is_file() and (tmp_path / "out" / f"{TINY}.manifest.json").is_file()

    repinned = make_into(recipe, tmp_path / "out", "--repin")
    assert repinned.exit_code == 0 and "(updated)" in repinned.output, repinned.output
    dataset = YAML(typ="safe").load(recipe.read_text())["workload"]["dataset"]
    assert dataset["rows_sha256"] == build_value(tiny_build, ("rows_sha256",))
    assert (dataset["build"]["name"], dataset["build"]["rows"]) == (TINY, 40)


def test_the_seed_is_left_unchanged_without_repin(tiny_build, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    shutil.copyfile(SEED, recipe)
    result = make_into(recipe, tmp_path / "out")
    assert result.exit_code == 1 and recipe.read_bytes() == SEED.read_bytes()
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: {recipe}: workload.dataset.rows_sha256 is "
        "'4003478c605da1a2a351a0ba38adba24bcef54355394cedf4a1d425ec049128f' in the recipe but "
        f"'{build_value(tiny_build, ('rows_sha256',))}' in this build (8 differing keys in all)")


def test_a_same_line_comment_stays_on_a_rewritten_value(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("workload:\n  dataset:\n    build:\n      rows: 41  # keep in sync\n      seed: 7 # why\n"
                      "      tokenizer: old  # from the hub\n      parquet_bytes: 1\n")
    assert update_recipe(recipe, tiny_build.manifest, repin=True)
    text = recipe.read_text()
    assert "      rows: 40  # keep in sync\n      seed: 42 # why\n" in text
    tokenizer = build_value(tiny_build, ("build", "tokenizer"))
    assert len(tokenizer) > 120 and loaded_build(text)["tokenizer"] == tokenizer  # folded over lines ...
    assert text.count("  # from the hub\n") == 1  # ... and the comment after its last line


def test_comment_lines_are_never_removed(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    before = ("workload:\n  dataset:\n    build:\n      rows: 41\n        # counted after the skips\n"
              "      seed: 7\n      parquet_bytes: 1\n        # the last one\n    # the block ends here\nother: 1\n")
    recipe.write_text(before)
    assert update_recipe(recipe, tiny_build.manifest, repin=True)
    after = recipe.read_text()
    comments = [line for line in before.splitlines() if line.lstrip().startswith("#")]
    assert [line for line in after.splitlines() if line.lstrip().startswith("#")] == comments
    build = loaded_build(after)
    assert (build["rows"], build["seed"]) == (40, 42)
    assert build["parquet_bytes"] == build_value(tiny_build, ("build", "parquet_bytes"))


def test_the_newline_style_is_kept(tiny_build, tmp_path):
    lf = "# top\nworkload:\n  dataset:\n    name: x\n    build:\n      rows: 41  # c\n      loss_mask: muse_spark\n"
    crlf, unix = tmp_path / "crlf.yaml", tmp_path / "lf.yaml"
    crlf.write_bytes(lf.replace("\n", "\r\n").encode())
    unix.write_bytes(lf.encode())
    assert update_recipe(crlf, tiny_build.manifest, repin=True) and update_recipe(unix, tiny_build.manifest, repin=True)
    written = crlf.read_bytes()
    assert written.count(b"\n") == written.count(b"\r\n") > lf.count("\n")  # folded lines too
    assert written == unix.read_bytes().replace(b"\n", b"\r\n")

    unterminated = tmp_path / "unterminated.yaml"  # no line break after the last line: none is added
    unterminated.write_bytes(lf.rstrip("\n").encode())
    assert update_recipe(unterminated, tiny_build.manifest, repin=True)
    assert unterminated.read_bytes() == unix.read_bytes().rstrip(b"\n")


def test_a_symlinked_recipe_is_written_through_to_its_target(tiny_build, tmp_path):
    target = tmp_path / "recipes" / "r.yaml"
    target.parent.mkdir()
    target.write_text("workload:\n  dataset:\n    build:\n      seed: 42\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert update_recipe(link, tiny_build.manifest)
    assert link.is_symlink() and link.resolve() == target
    assert loaded_build(target.read_text())["rows"] == 40
    # no partial left; the recipe's lock file stays beside its target
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".r.yaml.lock", "link.yaml", "r.yaml", "recipes"]


@pytest.mark.parametrize("before", [
    "workload:\n  dataset:\n    name: x\n    build: {}  # filled in by databuild\nother: 1\n",
    "workload:\n  dataset: {}\nother: 1\n",
    "workload:\n  dataset:\n    name: x\n    build:  # filled in by databuild\nother: 1\n",
    "workload:\n  dataset:\n    name: x\n    build:\n      # filled in by databuild\nother: 1\n",
], ids=["build", "dataset", "build with nothing after it", "build with only a comment under it"])
def test_an_empty_block_is_written_as_a_block_mapping(tiny_build, tmp_path, before):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(before)
    assert update_recipe(recipe, tiny_build.manifest)
    after = recipe.read_text()
    assert "{}" not in after and after.endswith("\nother: 1\n")
    assert after.count("# filled in by databuild") == before.count("# filled in by databuild")  # the comment stays
    dataset = YAML(typ="safe").load(after)["workload"]["dataset"]
    written = {("rows_sha256",): dataset["rows_sha256"], **{("build", k): v for k, v in dataset["build"].items()}}
    assert written == written_block(tiny_build)
    assert not update_recipe(recipe, tiny_build.manifest)


def test_an_empty_value_counts_as_not_there_yet(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("workload:\n  dataset:\n    rows_sha256: ~\n    build:\n      rows:  # to fill\n      seed:\n")
    assert update_recipe(recipe, tiny_build.manifest)
    text = recipe.read_text()
    assert f"    rows_sha256: {build_value(tiny_build, ('rows_sha256',))}\n" in text
    assert "      rows: 40  # to fill\n      seed: 42\n" in text


def test_a_recipe_that_is_not_utf8_is_one_line(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"# caf\xe9\nworkload:\n  dataset:\n    rows_sha256: x\n")
    for result in (make_into(recipe, tmp_path / "out"),
                   CliRunner().invoke(main, ["verify", str(tiny_build.parquet), "--recipe", str(recipe)])):
        assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"error: {recipe}: not UTF-8") and "Traceback" not in result.stderr


def test_a_block_sequence_at_its_key_s_indent_is_edited(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    before = ("workload:\n  dataset:\n    build:\n      seed: 42\n      sources:\n      - a\n      - b: 1\n"
              "    notes:\n    - one\nother:\n- 1\n")
    recipe.write_text(before)
    assert update_recipe(recipe, tiny_build.manifest)
    document = YAML(typ="safe").load(recipe.read_text())
    assert document["workload"]["dataset"]["build"]["sources"] == ["a", {"b": 1}]
    assert document["workload"]["dataset"]["notes"] == ["one"] and document["other"] == [1]
    assert document["workload"]["dataset"]["build"]["rows"] == 40


def test_a_layout_the_writer_cannot_edit_is_refused_without_calling_it_invalid(tiny_build, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"workload:\n  dataset:\n    build: {{name: {TINY}, seed: 42}}\n")
    refusal = "workload.dataset.build is a flow mapping, not a layout the writer can edit in place"
    with pytest.raises(BuildError, match=refusal) as refused:
        update_recipe(recipe, tiny_build.manifest)
    assert "not valid YAML" not in str(refused.value)
    assert recipe.read_text() == f"workload:\n  dataset:\n    build: {{name: {TINY}, seed: 42}}\n"
