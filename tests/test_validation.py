"""The validation split: a share or count of each source's conversations, chosen by sha256 of the
split's seed and the conversation id alone (recomputed here with hashlib and numpy), built into its
own file with its own hashes, manifest and funnel, disjoint from the training file by id and by
content, verified, recorded in the recipe."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import REPO, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError
from test_build import run_cli
from test_dedup import hashlib_key
from test_mixture import SHARDS, build, entry, fixture_rows, mixture, split_fixture, write_copy


def numpy_held_out(ids: list[str], seed: int, share: float | None = None, count: int | None = None) -> list[int]:
    u = np.array([int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:8], "big") for i in ids],
                 dtype=np.uint64)
    if count is not None:
        return sorted(np.argsort(u, kind="stable")[:count].tolist())
    return np.flatnonzero(u < np.uint64(int(share * 2**64))).tolist()


def ids_of(directory) -> list[str]:
    return [r["id"] for path in sorted((directory / "data").glob("*.parquet")) for r in pq.read_table(path).to_pylist()]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Two sources (the fixture's halves); the second also holds a copy of a conversation of the
    first under a new id, and a conversation of the first under the same id, which must not train
    when their twin is held out."""
    tmp = tmp_path_factory.mktemp("split")
    first, _ = split_fixture(tmp)
    second_rows = fixture_rows(SHARDS[1])
    first_rows = fixture_rows(SHARDS[0])
    held_first = numpy_held_out(ids_of(first), 7, share=0.2)
    twin_content, twin_id = first_rows[held_first[0]], first_rows[held_first[1]]
    second_rows += [{**twin_content, "id": "copy-of-a-held-out-one"},
                    {**second_rows[0], "id": twin_id["id"]}]
    second = write_copy(tmp / "second", {"train-00000-of-00001.parquet": second_rows})
    config = mixture(tmp, entry(first, repo="org/first"), entry(second, repo="org/second"), rows="all",
                     validation={"share": 0.2, "seed": 7})
    return tmp, config, first, second, build(config, tmp / "out")


def test_the_held_out_conversations_are_those_numpy_recomputes(split):
    tmp, _, first, second, result = split
    validation = result.parquet.with_name(result.data["validation"]["file"])
    assert validation.is_file() and validation.name == f"{result.data['name']}.validation.parquet"
    manifest = result.data["validation"]
    again = make(load_config(split[1]), tmp / "out", progress=False)
    assert again.built is None and again.data["validation"] == manifest  # both files up to date: nothing rebuilt
    held = {f"first:{i}" for i in numpy_held_out(ids_of(first), 7, share=0.2)} | \
        {f"second:{i}" for i in numpy_held_out(ids_of(second), 7, share=0.2)}
    from databuild.publish.manifest_read import read_manifest

    vmanifest = read_manifest(validation.with_name(manifest["manifest"]))
    selected = [s["selected"] for s in vmanifest["inputs"]["sources"]]
    assert sum(selected) == len(held) and vmanifest["build"]["validation"]["split"] == "validation"
    assert vmanifest["build"]["validation"]["seed"] == 7 and vmanifest["build"]["rows"] == "all"
    first_ids, second_ids = ids_of(first), ids_of(second)
    expected_ids = {first_ids[i] for i in numpy_held_out(first_ids, 7, share=0.2)} | \
        {second_ids[i] for i in numpy_held_out(second_ids, 7, share=0.2)}
    in_rows = {c for row in pq.read_table(validation).column("conversation_ids").to_pylist() for c in row}
    assert in_rows <= expected_ids and len(in_rows) > len(expected_ids) // 2


def test_training_shares_no_id_and_no_conversation_with_validation(split):
    _, _, first, second, result = split
    validation = result.parquet.with_name(result.data["validation"]["file"])
    train_ids = {c for row in pq.read_table(result.parquet).column("conversation_ids").to_pylist() for c in row}
    val_ids = {c for row in pq.read_table(validation).column("conversation_ids").to_pylist() for c in row}
    assert train_ids and not train_ids & val_ids
    assert "copy-of-a-held-out-one" not in train_ids
    funnel = result.data["counts"]["funnel"]
    dropped = [s["dropped"].get("validation", 0) for s in funnel["sources"]]
    # recomputed: each source loses its held-out rows and every row with a held-out id or conversation
    # (hashlib's key of data/README.md): the copy, the id twin, and the fixture's own repeats of one
    rows = [[(r["id"], hashlib_key(r["messages"], None)) for r in pq.read_table(p).to_pylist()]
            for p in (d / "data" / "train-00000-of-00001.parquet" for d in (first, second))]
    held = [set(numpy_held_out([i for i, _ in source], 7, share=0.2)) for source in rows]
    held_ids = {source[k][0] for source, ks in zip(rows, held) for k in ks}
    held_keys = {source[k][1] for source, ks in zip(rows, held) for k in ks}
    expected = [sum(1 for k, (i, key) in enumerate(source) if k in ks or i in held_ids or key in held_keys)
                for source, ks in zip(rows, held)]
    assert expected[1] >= len(held[1]) + 1  # the copy at least
    assert dropped == expected
    assert result.data["counts"]["validation_held_out"]["by_source"] == dropped


def test_both_files_verify_and_the_recipe_records_the_split(split, tmp_path):
    tmp, config, _, _, result = split
    validation = result.parquet.with_name(result.data["validation"]["file"])
    for path in (result.parquet, validation):
        done = run_cli("verify", str(path))
        assert done.returncode == 0, done.stdout + done.stderr
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  dataset: {}\n")
    done = run_cli("make", str(config), "--out", str(tmp / "out"), "--recipe", str(recipe))
    assert done.returncode == 0, done.stderr
    assert "validation" in done.stdout
    text = recipe.read_text()
    assert result.data["validation"]["rows_sha256"] in text and "validation:" in text


def test_the_split_does_not_depend_on_the_training_settings(split, tmp_path):
    tmp, _, first, second, result = split
    other = build(mixture(tmp_path, entry(first, repo="org/first", take=0.5), entry(second, repo="org/second"),
                          rows=5, seed=3, validation={"share": 0.2, "seed": 7}), tmp_path / "out")
    assert other.data["validation"]["rows_sha256"] != "" and \
        other.data["validation"]["file"] == result.data["validation"]["file"]
    held = [s["selected_sha256"] for s in pq_manifest(other)["inputs"]["sources"]]
    assert held == [s["selected_sha256"] for s in pq_manifest(result)["inputs"]["sources"]]


def pq_manifest(result):
    from databuild.publish.manifest_read import read_manifest

    return read_manifest(result.parquet.with_name(result.data["validation"]["manifest"]))


@pytest.mark.parametrize("value, message", [
    ({"share": 1.5}, "validation.share' = 1.5: a fraction in \\(0, 1\\)"),
    ({"share": 0.1, "count": 3}, "give either 'share'"),
    ({"count": 0}, "validation.count' = 0: must be positive"),
    ({"ratio": 0.1}, "unknown key 'ratio'"),
])
def test_bad_validation_keys_are_named(tmp_path, value, message):
    with pytest.raises(BuildError, match=message):
        load_config(write_config(tmp_path / "c.yaml", validation=value))


def test_verify_of_the_training_file_fails_when_its_validation_file_differs(split, tmp_path):
    import shutil

    _, _, _, _, result = split
    validation = result.parquet.with_name(result.data["validation"]["file"])
    held_manifest = validation.with_name(result.data["validation"]["manifest"])
    for path in (result.parquet, result.manifest, validation, held_manifest):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(result.parquet, tmp_path / validation.name)  # another file under the validation file's name
    done = run_cli("verify", str(tmp_path / result.parquet.name))
    assert done.returncode == 1 and f"validation file {validation.name}: rows_sha256" in done.stdout + done.stderr
    (tmp_path / validation.name).unlink()
    done = run_cli("verify", str(tmp_path / result.parquet.name))
    assert done.returncode == 1 and "the validation file" in done.stdout + done.stderr


def test_the_report_shows_both_splits_funnels_and_diff_names_the_split(split, tmp_path):
    from databuild.views.report import render_report

    tmp, _, first, second, result = split
    page = render_report(result.parquet)
    assert "Where the source rows went" in page
    assert f"Validation split ({result.data['validation']['file']}): where the source rows went" in page
    other = build(mixture(tmp_path, entry(first, repo="org/first"), entry(second, repo="org/second"), rows="all",
                          validation={"share": 0.3, "seed": 7}), tmp_path / "out")
    done = run_cli("diff", str(result.manifest), str(other.manifest))
    assert done.returncode == 1 and "validation" in done.stdout, done.stdout + done.stderr


def test_both_files_are_the_same_bytes_whatever_the_workers_and_batches(split, tmp_path, sixteen_cores):
    tmp, config, _, _, result = split
    again = make(load_config(config), tmp_path / "again", workers=2, batch_size=5, window=16, force=True,
                 progress=False)
    assert again.parquet.read_bytes() == result.parquet.read_bytes()
    assert again.manifest.read_bytes() == result.manifest.read_bytes()
    name = result.data["validation"]["file"]
    assert (tmp_path / "again" / name).read_bytes() == result.parquet.with_name(name).read_bytes()


def test_show_says_which_split_a_file_is(split):
    _, _, _, _, result = split
    held = result.parquet.with_name(result.data["validation"]["file"])
    for path, name in ((result.parquet, "train"), (held, "validation")):
        done = run_cli("show", str(path), "--row", "0")
        assert done.returncode == 0, done.stderr
        assert f"controls: the {name} split of a validation split (share 0.2 of each source, seed 7); rows: all" \
            in done.stdout


def test_a_manifest_whose_validation_record_is_damaged_is_refused_in_one_line(split, tmp_path):
    import json

    _, _, _, _, result = split
    manifest = json.loads(result.manifest.read_text())
    manifest["validation"]["file"] = 7
    (tmp_path / result.manifest.name).write_text(json.dumps(manifest))
    from databuild.publish.manifest_read import read_manifest

    with pytest.raises(BuildError, match="manifest field validation.file is int 7, expected str"):
        read_manifest(tmp_path / result.manifest.name)


def test_a_json_lines_source_is_split_as_parquet_is(tmp_path):
    """The split's ids read from JSON Lines as the reader reads them, the ids written and, in a file whose rows
    have none, `{repo}/{file}#{row}`: it read every file as parquet, a traceback on JSON (issue 31's walk)."""
    import json

    rows = fixture_rows(SHARDS[0])[:120]
    root = tmp_path / "json"
    (root / "data").mkdir(parents=True)
    (root / "data" / "train-00000-of-00002.jsonl").write_text(
        "".join(json.dumps({"id": r["id"], "messages": r["messages"]}) + "\n" for r in rows[:80]))
    (root / "data" / "train-00001-of-00002.jsonl").write_text(
        "".join(json.dumps({"messages": r["messages"]}) + "\n" for r in rows[80:]))
    config = mixture(tmp_path, entry(root, repo="org/json", format="messages"), rows="all",
                     validation={"share": 0.2, "seed": 7})
    result = build(config, tmp_path / "out")
    ids = [r["id"] for r in rows[:80]] + [f"org/json/data/train-00001-of-00002.jsonl#{k}" for k in range(40)]
    expected = {ids[i] for i in numpy_held_out(ids, 7, share=0.2)}
    validation = result.parquet.with_name(result.data["validation"]["file"])
    in_validation = {c for row in pq.read_table(validation).column("conversation_ids").to_pylist() for c in row} - {""}
    in_training = {c for row in pq.read_table(result.parquet).column("conversation_ids").to_pylist() for c in row}
    assert in_validation <= expected and len(in_validation) > len(expected) // 2
    assert any("#" in c for c in in_validation) and not in_training & expected


def test_show_marks_a_validation_file_from_the_record(split, tmp_path):
    """The validation file is its config's split (NAME.validation): show finds the config by NAME and compares
    the split's own build with the manifest; it looked for a config 'NAME.validation' and, given the config,
    refused its source's selection, so the marks fell back to the text's markup."""
    import shutil

    _, config, _, _, result = split
    held = result.parquet.with_name(result.data["validation"]["file"])
    (tmp_path / "configs").mkdir()
    shutil.copyfile(config, tmp_path / "configs" / f"{result.data['name']}.yaml")
    for args, cwd in ((["--config", str(config)], REPO), ([], tmp_path)):
        done = run_cli("show", str(held), "--row", "0", *args, cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert f"marks: from the record (config {result.data['name']}'s source re-rendered)" in \
            done.stdout, done.stdout[:600]
