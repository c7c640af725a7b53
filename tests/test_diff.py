"""databuild diff: a difference planted per cause, each named on the output's first line.

A is the session's tiny build; each B differs from it in one thing: another tokenizer file, another
template, another kwarg, another library version in the manifest, another seed, another packing, one
changed conversation in the source, one flipped mask bit, a reordered pair of rows. Builds are shared
by the module (about 2 s each).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import databuild
from conftest import SOURCE_DIR, TINY, TINY_CONFIG, TOKENIZER_DIR, write_config
from databuild.cli import main
from databuild.rowfile.row_digests import digest_rows, from_hex
from databuild.rowfile.write import WRITER_OPTIONS

CHANGED = "tiny-0061"  # the conversation planted with another word; the third of row 0 in the tiny build


def diff_cli(*args):
    result = CliRunner().invoke(main, ["diff", *map(str, args)])
    assert "Traceback" not in result.output
    return result


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _make(directory: Path, **changes) -> Path:
    from databuild.build import make
    from databuild.config import load_config

    directory.mkdir(parents=True, exist_ok=True)
    config = load_config(write_config(directory / "config.yaml", **changes))
    return make(config, directory / "out", progress=False).parquet


def _copy(parquet: Path, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / parquet.name
    shutil.copyfile(parquet, copy)
    shutil.copyfile(parquet.with_name(f"{TINY}.manifest.json"), directory / f"{TINY}.manifest.json")
    return copy


def _tokenizer_copy(directory: Path, file: str, change) -> dict:
    """The fixture tokenizer copied with one file changed; the tokenizer block pinning the copy."""
    shutil.copytree(TOKENIZER_DIR, directory)
    path = directory / file
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")
    pins = {name: _sha(directory / name) for name in ("tokenizer.json", "chat_template.jinja", "tokenizer_config.json")}
    return {"dir": str(directory), "sha256": pins}


def _without_first_merge(text: str) -> str:
    data = json.loads(text)
    data["model"]["merges"] = data["model"]["merges"][1:]
    return json.dumps(data)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Cause -> B, each a row file beside its manifest (built from a changed config, or a copy of A changed)."""
    root = tmp_path_factory.mktemp("planted")
    builds = {
        "seed": _make(root / "seed", seed=7),
        "packing": _make(root / "packing", packing="bfd"),
        "kwarg": _make(root / "kwarg", template_kwargs={"reasoning_effort": "low"}),
        "template": _make(root / "template", tokenizer=_tokenizer_copy(
            root / "template-tokenizer", "chat_template.jinja", lambda t: t.replace("Muse Spark,", "Muse Spark Open,"))),
        "tokenizer file": _make(root / "tokenizer", tokenizer=_tokenizer_copy(
            root / "tokenizer-tokenizer", "tokenizer.json", _without_first_merge)),
    }
    source = root / "source-data"
    shutil.copytree(SOURCE_DIR, source)
    shard = source / "data" / "train-00000-of-00002.parquet"
    rows = pq.read_table(shard).to_pylist()
    for row in rows:
        if row["id"] == CHANGED:
            row["messages"][0]["content"] = row["messages"][0]["content"].replace("surprising", "astonishing")
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(shard)), shard)
    builds["source"] = _make(root / "source", source={"dir": str(source)})
    return builds


def _rewritten(tiny_build, directory: Path, change, manifest: bool = True) -> Path:
    """A copy of A, its rows rewritten by `change` (the manifest copied as it was, or left out)."""
    parquet = _copy(tiny_build.parquet, directory)
    if not manifest:
        parquet.with_name(f"{TINY}.manifest.json").unlink()
    rows = change(pq.read_table(parquet).to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(parquet)), parquet, **WRITER_OPTIONS)
    return parquet


@pytest.fixture(scope="module")
def copies(tiny_build, tmp_path_factory):
    """Copies of A changed after the build: its manifest (a library version), its rows (a mask bit, an order)."""
    root = tmp_path_factory.mktemp("copies")
    version = _copy(tiny_build.parquet, root / "version")
    manifest = version.with_name(f"{TINY}.manifest.json")
    data = json.loads(manifest.read_text())
    data["versions"]["transformers"] = "9.9.9"
    manifest.write_text(json.dumps(data))
    return {"version": version,
            "mask": _rewritten(tiny_build, root / "mask", lambda r: r[:7] + [_flip_first_mask_bit(r[7])] + r[8:]),
            "order": _rewritten(tiny_build, root / "order", lambda r: r[:3] + [r[4], r[3]] + r[5:])}


def _flip_first_mask_bit(row: dict) -> dict:
    """The row with the mask bit of its first token flipped."""
    return {**row, "loss_mask": [1 - row["loss_mask"][0]] + row["loss_mask"][1:]}


@pytest.mark.parametrize("cause, first_line", [
    ("seed", "differ: seed 42 → 7; rows: 40 of 40 differ"),
    ("packing", "differ: packing"),
    ("kwarg", "differ: template kwarg reasoning_effort xhigh → low; rows: 40 of 40 differ, in ids, masks"),
    ("template", "differ: chat template; rows: 40 of 40 differ"),
    ("tokenizer file", "differ: tokenizer file tokenizer.json; rows:"),
    ("source", "differ: source file data/train-00000-of-00002.parquet; rows:"),
])
def test_a_planted_difference_is_named_first(tiny_build, planted, cause, first_line):
    result = diff_cli(tiny_build.parquet, planted[cause])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith(first_line), result.output


def test_the_pins_are_listed_side_by_side(tiny_build, planted):
    lines = diff_cli(tiny_build.parquet, planted["template"]).output.splitlines()
    old, new = (_sha(d / "chat_template.jinja")[:33] + "…"
                for d in (TOKENIZER_DIR, planted["template"].parents[2] / "template-tokenizer"))
    rows = [line.split() for line in lines]
    assert lines[3] == "made from: 2 differences"
    assert ["inputs.tokenizer.sha256.chat_template.jinja", old, new] in rows
    assert ["build.chat_template.sha256.default", old, new] in rows


def test_a_changed_source_conversation_is_found_and_decoded(tiny_build, planted):
    output = diff_cli(tiny_build.parquet, planted["source"]).output
    assert f"first differing row 0, conversation {CHANGED}, token " in output
    a, b = output.split("--- A row 0, ")[1].split("--- B row 0, ")
    assert f"⟦{CHANGED}⟧" in a and f"⟦{CHANGED}⟧" in b
    assert "▶ surprising" in a and "▶ astonishing" in b  # the first differing token, in each file's words
    # only this conversation's tokens differ: the rest of the stream shifts by the length difference
    assert "conversations: " in output and " ids differ (" in output
    cut = [line for line in output.splitlines() if "differ only where a row boundary cuts them" in line]
    assert not any(CHANGED in line for line in cut)  # its own tokens changed: not a moved cut


def test_a_library_version_in_the_manifest(tiny_build, copies):
    result = diff_cli(tiny_build.parquet, copies["version"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == "differ: library version transformers 5.24.0 → 9.9.9; rows identical" \
        .replace("5.24.0", json.loads(tiny_build.manifest.read_text())["versions"]["transformers"])


def test_a_flipped_mask_bit(tiny_build, copies):
    result = diff_cli(tiny_build.parquet, copies["mask"])
    first = result.output.splitlines()[0]
    assert result.exit_code == 1
    assert first == ("differ: the rows only (same pins): 1 of 40 differ, in masks; B's rows do not match its own "
                     "manifest from row 7 (changed after its build?)")
    assert "first differing row 7, conversation " in result.output
    assert "conversations: 1 of 76 ids differ (1 in both with other tokens or targets, 0 in A only, 0 in B only)" \
        in result.output
    a, b = result.output.split("--- A row 7, ")[1].split("--- B row 7, ")
    # the flipped bit is token 0 of row 7: a target in A, not in B; the text around it the same
    assert "first differing row 7, conversation tiny-0214, token 0:" in result.output
    assert a.splitlines()[1] == "    token 0: id 789 ' star', a target"
    assert b.splitlines()[1] == "    token 0: id 789 ' star', not a target"
    assert a.splitlines()[2].startswith("    ▶[[ star charts") and b.splitlines()[2].startswith("    ▶ star[[ charts")


def test_a_reordered_pair_of_rows(tiny_build, copies):
    result = diff_cli(tiny_build.parquet, copies["order"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == "differ: the rows only (same pins): 2 of 40 differ, in order; " \
        "B's rows do not match its own manifest from row 3 (changed after its build?)"
    assert "order: 2 rows of B stand elsewhere in A: B row 3 is A row 4, B row 4 is A row 3" in result.output
    assert "--- A row" not in result.output  # nothing to decode: every row is A's


def test_identical_builds_exit_0(tiny_build, tmp_path):
    copy = _copy(tiny_build.parquet, tmp_path)
    result = diff_cli(tiny_build.parquet, copy)
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "identical: same pins, same rows, same file bytes"


def test_a_config_is_compared_by_its_pins_without_building(tiny_build, tmp_path):
    assert diff_cli(tiny_build.parquet, write_config(tmp_path / "same.yaml")).exit_code == 0
    other = write_config(tmp_path / "other.yaml", seed=7)
    result = diff_cli(other, tiny_build.parquet)
    assert result.exit_code == 1 and result.output.splitlines()[0] == "differ: seed 7 → 42"
    assert "config muse-spark-tiny-fixed512-v1 (its pinned inputs, resolved and hashed here; nothing built" \
        in result.output
    assert not list(tmp_path.glob("*.parquet")) and not (TINY_CONFIG.parent.parent / "build" / "nothing").exists()


def test_a_manifest_alone_compares_rows_by_their_digests(tiny_build, copies):
    result = diff_cli(tiny_build.manifest, copies["mask"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("differ: the rows only (same pins): 1 of 40 differ; ")
    assert "first differing row 7 (decoded only between two row files)" in result.output


@pytest.mark.parametrize("args, message", [
    (["missing.parquet", "missing.json"], "missing.parquet: no such file"),
    (["no-such-config", "no-such-config"], "no config named 'no-such-config'"),
])
def test_usage_errors_exit_2_in_one_line(args, message):
    result = diff_cli(*args)
    assert result.exit_code == 2 and result.output == f"error: {message}" + result.output.split(message, 1)[1]
    assert len(result.output.splitlines()) == 1
    assert diff_cli("only-one").exit_code == 2


def test_the_python_api_returns_a_frozen_result(tiny_build, copies, planted):
    from databuild.publish.manifest_diff import Cause, Change

    result = databuild.diff(tiny_build.parquet, planted["kwarg"])
    assert result.causes == (Cause("template kwarg reasoning_effort", (
        Change("build.template_kwargs.reasoning_effort", "xhigh", "low"),)),)
    assert result.rows.kinds == ("ids", "masks") and result.first.row == 0
    result = databuild.diff(tiny_build.parquet, copies["mask"])
    assert not result.identical and result.changes == () and result.causes == ()
    assert result.rows.kinds == ("masks",) and result.rows.differing == (7,) and result.b.unfaithful == "from row 7"
    first = result.first
    assert first.row == 7 and first.a.loss_mask[first.token] != first.b.loss_mask[first.token]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rows = None


def test_row_digests_are_the_manifests(tiny_build):
    """diff's row digests are data/README's row_digests: those the build wrote."""
    digests = digest_rows(tiny_build.parquet)
    assert np.array_equal(digests.rows, from_hex(tiny_build.data["row_digests"]))
    assert len(set(digests.ids.tolist())) == 40


def test_verify_names_the_diff_command(tiny_build, copies):
    result = CliRunner().invoke(main, ["verify", str(copies["mask"])])
    assert result.exit_code == 1
    manifest = copies["mask"].with_name(f"{TINY}.manifest.json")
    assert result.output.splitlines()[-1] == f"to see why: databuild diff {manifest} {copies['mask']}"
    with pytest.raises(databuild.BuildError, match=r"more\); to see why: databuild diff \S+manifest.json \S+parquet$"):
        databuild.verify(copies["mask"])


def test_the_report_given_two_files_says_why_they_differ(tiny_build, copies, tmp_path):
    page = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["report", str(tiny_build.parquet), "-o", str(page),
                                       "--diff", str(copies["order"])])
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert f"<h2>Difference from {copies['order']}</h2><pre>differ: the rows only (same pins): 2 of 40 differ, in order" \
        in text


def test_a_config_against_a_file_without_manifest_has_nothing_to_compare(tiny_build, tmp_path):
    shutil.copyfile(tiny_build.parquet, tmp_path / "alone.parquet")
    result = diff_cli(TINY_CONFIG, tmp_path / "alone.parquet")
    assert result.exit_code == 2 and result.output.startswith("error: nothing to compare: ")


def test_moved_boundaries_are_segment_differences(tiny_build, tmp_path):
    """Row 0's second segment starts one token later: the tokens and targets are the same."""
    starts = pq.read_table(tiny_build.parquet).column("seq_start_id")[0].as_py()
    moved = _rewritten(tiny_build, tmp_path,
                       lambda r: [{**r[0], "seq_start_id": [0, starts[1] + 1, *starts[2:]]}] + r[1:])
    result = diff_cli(tiny_build.parquet, moved)
    assert result.output.splitlines()[0].startswith("differ: the rows only (same pins): 1 of 40 differ, in segment "
                                                    "boundaries; B's rows do not match its own manifest in its "
                                                    "segment boundaries (segments_sha256)")
    assert f"first differing row 0, conversation tiny-0293 in A, tiny-0261 in B, token {starts[1]}:" in result.output


def test_missing_rows_and_no_manifest(tiny_build, tmp_path):
    shorter = _rewritten(tiny_build, tmp_path, lambda r: r[:-2], manifest=False)
    result = diff_cli(tiny_build.parquet, shorter)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == \
        "differ: rows: 2 of 40 differ, in row count (no manifest for B: pins not compared)"
    assert "first differing row 38: A has more rows" in result.output
    # the conversation that row 37 ends with goes on in row 38 in A: B holds its beginning only
    last = pq.read_table(tiny_build.parquet).column("conversation_ids")[37].as_py()[-1]
    assert "conversations: 1 of " in result.output and "(1 in both with other tokens or targets" in result.output
    assert ("  of those in both, 1 differ only where a row boundary cuts them (one file holds a prefix or suffix of "
            f"the other's tokens, same targets): {last}\n") in result.output


def test_a_manifest_without_row_digests_compares_pins_not_zero_rows(tiny_build, tmp_path):
    """A manifest written before row digests has rows it does not list: it is compared by its pins, never
    as a build of no rows ("40 of 40 differ, in row count")."""
    old = json.loads(tiny_build.manifest.read_text())
    del old["row_digests"]
    (tmp_path / "old.manifest.json").write_text(json.dumps(old))
    result = diff_cli(tmp_path / "old.manifest.json", tiny_build.manifest)
    assert result.exit_code == 0, result.output
    assert "row count" not in result.output
