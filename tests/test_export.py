"""databuild export: each format read by a transcription of its trainer's own reading code
(tests/support/trainer_readers.py) must train exactly the native targets, minus those the manifest counts
as unrepresentable; on the tiny build, on the Phi-3 path, and on a hand-made padded row file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import trainer_readers as readers
from conftest import REPO, TINY, write_config, verify_cli
from databuild.cli import main
from databuild.exports import make_format
from databuild.exports.stream import write_export
from databuild.integrations import miles as rollout
from databuild.rowfile.hashes import ParquetSummary, hash_parquet
from databuild.rowfile.write import SCHEMA, WRITER_OPTIONS

# Beside the repository (../shared) as the team's machines have it; a worktree elsewhere names it.
PHI3 = Path(os.environ.get("DATABUILD_PHI3_DIR", REPO.parent / "shared" / "reference-tokenizers" / "phi-3-mini"))
PHI3_SHA256 = {"tokenizer.json": "9e2ae3d66819f163cdcfedba5078f3a3af8118c2712491ed60912f77886bda6f",
               "tokenizer_config.json": "e7571cb644e0bbba12e73a1a0e11b9897fbf62ed0fe183d5c75d47eb86fa24e9"}
FORMATS = ("megatron-bridge", "miles", "hf")
EOS = 0  # the pad id Bridge's collate uses; it never reaches a weighted position


def native_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def segment_starts(row: dict) -> list[int]:
    """Real segment starts: a final segment with conversation id "" is padding."""
    starts = row["seq_start_id"]
    return starts[:-1] if row["conversation_ids"][-1] == "" else starts


def native_targets(rows: list[dict]) -> set[tuple[int, int]]:
    return {(r, i) for r, row in enumerate(rows) for i, m in enumerate(row["loss_mask"]) if m}


def at_starts(rows: list[dict], row_start_only: bool = False) -> set[tuple[int, int]]:
    return {(r, s) for r, row in enumerate(rows) for s in (segment_starts(row)[:1] if row_start_only
                                                                else segment_starts(row))}


def pieces(meta: dict) -> list[tuple[int, int]]:
    """[b, e) of each real segment of a row, from its metadata."""
    starts = segment_starts(meta)
    end = meta["seq_start_id"][-1] if meta["conversation_ids"][-1] == "" else len(meta["input_ids"])
    return list(zip(starts, starts[1:] + [end]))


def miles_trained(path: Path, per_segment: bool) -> set[tuple[int, int]]:
    """slime reads the export, our rollout fills the Samples, slime's loss slices them."""
    source = readers.SlimeDataSource(readers.SlimeDataset(path))
    args = Namespace(rollout_batch_size=len(source.dataset.samples), rollout_global_dataset=True)
    fill = rollout.generate_rollout_per_segment if per_segment else rollout.generate_rollout
    trained = set()
    for group in fill(args, 0, source):
        meta, row = group[0].metadata, group[0].index
        spans = iter(pieces(meta) if per_segment else [(0, pieces(meta)[-1][1])])
        for sample, positions in zip(group, readers.slime_trained_tokens([group])):
            begin = next(b for b, e in spans if meta["input_ids"][b:e] == sample.tokens)
            trained |= {(row, begin + p) for p in positions}
    return trained


def trained_pairs(fmt: str, out: Path, row_tokens: int, per_segment: bool = False) -> set[tuple[int, int]]:
    if fmt == "megatron-bridge":
        return readers.bridge_trained_pairs(out, row_tokens, EOS)
    if fmt == "miles":
        return miles_trained(out, per_segment)
    rows = pq.read_table(out).to_pylist()
    trained = set()
    for r, example in enumerate(rows):  # one row per batch, as the recipe trains; rows concatenated flatten the same
        batch = readers.trl_collate([example])
        trained |= {(r, int(p)) for p in readers.causal_lm_trained(batch["labels"])}
    return trained


def expected_pairs(fmt: str, rows: list[dict], per_segment: bool = False) -> tuple[set, set]:
    """(what must be trained, what the format cannot represent)."""
    lost = at_starts(rows, row_start_only=(fmt == "miles" and not per_segment))
    targets = native_targets(rows)
    return targets - lost, targets & lost


def check_export(native: Path, fmt: str, out: Path, row_tokens: int) -> dict:
    manifest = json.loads(out.with_name(out.name.removesuffix(".parquet") + ".manifest.json").read_text())
    rows = native_rows(native)
    for per_segment in ((False, True) if fmt == "miles" else (False,)):
        trained = trained_pairs(fmt, out, row_tokens, per_segment)
        expected, lost = expected_pairs(fmt, rows, per_segment)
        assert trained == expected, (fmt, per_segment, sorted(trained ^ expected)[:5])
        kind = "target_at_segment_start" if per_segment or fmt != "miles" else "target_at_row_start"
        assert manifest["counts"]["unrepresentable"][kind] == len(lost)
    return manifest


@pytest.fixture(scope="module")
def exports(tiny_build, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    import databuild

    return {fmt: databuild.export(tiny_build.parquet, fmt, out / fmt / "tiny.parquet") for fmt in FORMATS}


@pytest.mark.parametrize("command", ["show", "report", "diff", "hash"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_given_where_a_row_file_is_read_is_named_as_one(tiny_build, exports, tmp_path, command, fmt):
    """show, report, diff and hash read the build's row file; handed an export, they said only "schema:
    unexpected column 'labels'" (a newcomer's first try on issue 31's walk): the line says what the file is
    and which file to give instead."""
    out = exports[fmt].path
    args = {"show": [out], "report": [out, "-o", tmp_path / "r.html"], "diff": [tiny_build.parquet, out],
            "hash": [out]}[command]
    result = CliRunner().invoke(main, [command, *map(str, args)])
    assert result.exit_code == (2 if command == "diff" else 1) and result.output.count("\n") == 1, result.output
    assert f"{out}: an export (--to {fmt}) of {TINY}.parquet, not a row file: show, report, diff and hash read the " \
           "row file it was exported from (verify checks either)" in result.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_trainer_trains_exactly_the_native_targets(tiny_build, exports, fmt):
    manifest = check_export(tiny_build.parquet, fmt, exports[fmt].path, 512)
    assert manifest["source"]["rows_sha256"] == tiny_build.data["output"]["rows_sha256"]
    assert manifest["output"]["rows"] == 40
    # Every row of the tiny build that begins inside an assistant turn loses that one target.
    continued = sum(1 for row in native_rows(tiny_build.parquet) if row["loss_mask"][0])
    assert manifest["counts"]["unrepresentable"]["target_at_segment_start"] == continued > 0


@pytest.fixture(scope="module")
def phi3_build(tmp_path_factory):
    if not (PHI3 / "tokenizer.json").exists():
        pytest.skip("reference tokenizer phi-3-mini not beside the repo")
    from databuild.build import make
    from databuild.config import load_config

    tmp = tmp_path_factory.mktemp("phi3")
    config = write_config(tmp / "phi3.yaml", name="phi3-tiny-512", loss_mask="assistant", rows=20,
                          end_of_turn=["<|end|>"],  # Phi-3 closes turns with <|end|>, its EOS is <|endoftext|>
                          tokenizer={"repo": "microsoft/phi-3-mini", "dir": str(PHI3), "sha256": PHI3_SHA256})
    return make(load_config(config), tmp / "build", progress=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_trainer_on_the_phi3_path(phi3_build, tmp_path, fmt):
    import databuild

    result = databuild.export(phi3_build.parquet, fmt, tmp_path / "phi3.parquet")
    check_export(phi3_build.parquet, fmt, result.path, 512)


def padded_file(tiny_build, path: Path) -> tuple[Path, ParquetSummary]:
    """Three tiny rows; the second ends with a padding segment (id "", pad tokens, mask 0) from the
    middle of its last real segment, as a padding packer writes (DECISIONS 2)."""
    rows = native_rows(tiny_build.parquet)[:3]
    row = rows[1]
    cut = row["seq_start_id"][-1] + 7
    row["input_ids"] = row["input_ids"][:cut] + [EOS] * (512 - cut)
    row["loss_mask"] = row["loss_mask"][:cut] + [0] * (512 - cut)
    row["seq_start_id"] = row["seq_start_id"] + [cut]
    row["conversation_ids"] = row["conversation_ids"] + [""]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, **WRITER_OPTIONS)
    summary = hash_parquet(path)  # the row-file verifier accepts a final, target-free "" segment (issue 15)
    assert summary.padding_tokens == 512 - cut
    return path, summary


@pytest.mark.parametrize("fmt", FORMATS)
def test_padding_is_dropped_as_each_trainer_expects(tiny_build, tmp_path, fmt):
    native, summary = padded_file(tiny_build, tmp_path / "padded.parquet")
    cut = native_rows(native)[1]["seq_start_id"][-1]
    result = write_export(native, make_format(fmt), tmp_path / fmt / "out.parquet", summary)
    check_export(native, fmt, result.path, 512)
    exported = pq.read_table(result.path).to_pylist()
    if fmt == "miles":  # the file carries the row as it is; the rollout leaves the padding out
        assert exported[1]["metadata"]["conversation_ids"][-1] == ""
        source = readers.SlimeDataSource(readers.SlimeDataset(result.path))
        groups = rollout.generate_rollout(Namespace(rollout_batch_size=3, rollout_global_dataset=True), 0, source)
        assert [len(g[0].tokens) for g in groups] == [512, cut, 512]
        return
    assert result.data["counts"]["padding_tokens_dropped"] == 512 - cut
    assert [len(r["input_ids"]) for r in exported] == [512, cut, 512]
    if fmt == "hf":
        assert [sum(r["seq_lengths"]) for r in exported] == [512, cut, 512]
    else:
        metadata = json.loads(result.path.with_name("out.metadata.jsonl").read_text())
        assert metadata[0]["min_packed_seqlen"] == cut - len(exported[1]["seq_start_id"])


# A trainer's process, holding numpy and pyarrow but none of databuild's other dependencies: any import
# outside the standard library, numpy, pyarrow and databuild fails there, as it would on that machine.
TRAINER_PROCESS = """
import importlib.abc, json, sys
from argparse import Namespace

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if top not in sys.stdlib_module_names and top not in ("numpy", "pyarrow", "databuild", "trainer_readers"):
            raise ImportError(f"{name} is not installed in the trainer's environment")

sys.meta_path.insert(0, Absent())
sys.path.insert(0, sys.argv[2])
import trainer_readers as readers
from databuild.integrations import miles

source = readers.SlimeDataSource(readers.SlimeDataset(sys.argv[1]))
groups = miles.generate_rollout_per_segment(Namespace(rollout_batch_size=4, rollout_global_dataset=True), 0, source)
print(json.dumps({"samples": [[s.tokens, s.response_length, s.loss_mask] for g in groups for s in g],
                  "databuild": sorted(m for m in sys.modules if m.startswith("databuild"))}))
"""


def test_the_miles_rollout_runs_without_databuilds_dependencies(exports):
    """The rollout runs inside the trainer's environment: importing it pulls in the package's
    __init__, which must need nothing there but the standard library (numpy and pyarrow allowed)."""
    path = exports["miles"].path
    ran = subprocess.run([sys.executable, "-c", TRAINER_PROCESS, str(path), str(REPO / "tests" / "support")],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["databuild"] == ["databuild", "databuild.api", "databuild.errors", "databuild.integrations",
                                   "databuild.integrations.miles"]
    source = readers.SlimeDataSource(readers.SlimeDataset(path))  # the same rollout, in this process
    groups = rollout.generate_rollout_per_segment(Namespace(rollout_batch_size=4, rollout_global_dataset=True), 0,
                                                  source)
    assert result["samples"] == [[s.tokens, s.response_length, s.loss_mask] for g in groups for s in g]
    assert len(result["samples"]) > 4  # several segments a row


def test_the_api_names_stay_functions_when_their_modules_load():
    """databuild.verify and databuild.export are the API's functions, and stay so once the packages that do
    the work (databuild.verification, databuild.exports) load."""
    ran = subprocess.run([sys.executable, "-c", "import databuild, databuild.verification, databuild.exports.hf, inspect; "
                          "print(inspect.isfunction(databuild.verify), inspect.isfunction(databuild.export))"],
                         capture_output=True, text=True)
    assert ran.stdout.split() == ["True", "True"], ran.stderr


def test_same_input_same_bytes(tiny_build, exports, tmp_path):
    import databuild

    for fmt in FORMATS:
        again = databuild.export(tiny_build.parquet, fmt, tmp_path / fmt / "tiny.parquet")
        assert again.path.read_bytes() == exports[fmt].path.read_bytes()
        assert again.manifest.read_bytes() == exports[fmt].manifest.read_bytes()


@pytest.fixture
def copies(tiny_build, tmp_path):
    """A private export in each format with its manifest, sidecars and trainer configuration
    (exported here: the configuration names the export's own path)."""
    import databuild

    return {fmt: databuild.export(tiny_build.parquet, fmt, tmp_path / fmt / "tiny.parquet").path for fmt in FORMATS}


def rewrite(path: Path, change) -> None:
    table = pq.read_table(path)
    rows = change(table.to_pylist())
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path, **WRITER_OPTIONS)


def flip_mask(rows, column):
    row = rows[3]
    return rows[:3] + [{**row, column: [1 - row[column][0]] + row[column][1:]}] + rows[4:]


@pytest.mark.parametrize("fmt, damage, message", [
    ("megatron-bridge", lambda rows: flip_mask(rows, "loss_mask"), "first differing row 3"),
    ("hf", lambda rows: [{**rows[0], "input_ids": [rows[0]["input_ids"][0] + 1] + rows[0]["input_ids"][1:]}]
     + rows[1:], "first differing row 0"),
    ("hf", lambda rows: rows[:-1], "missing rows: expected 40, found 39"),
    ("miles", lambda rows: rows[:5] + [{**rows[5], "metadata": {**rows[5]["metadata"], "loss_mask": [
        1 - rows[5]["metadata"]["loss_mask"][0]] + rows[5]["metadata"]["loss_mask"][1:]}}] + rows[6:],
     "first differing row 5"),
])
def test_verify_catches_a_changed_export(copies, tiny_build, fmt, damage, message):
    out = copies[fmt]
    assert verify_cli(out, "--from", tiny_build.parquet).exit_code == 0
    rewrite(out, damage)
    result = verify_cli(out)
    assert result.exit_code == 1 and "FAILED sha256: expected" in result.output and message in result.output
    assert "differs from a fresh export" in verify_cli(out, "--from", tiny_build.parquet).output


def test_verify_catches_a_foreign_manifest(copies):
    hf, bridge = copies["hf"], copies["megatron-bridge"]
    shutil.copyfile(bridge.with_name("tiny.manifest.json"), hf.with_name("tiny.manifest.json"))
    result = verify_cli(hf)
    assert result.exit_code == 1 and "FAILED sha256" in result.output and "FAILED schema" in result.output
    hf.rename(hf.with_name("other.parquet"))
    shutil.copyfile(hf.with_name("tiny.manifest.json"), hf.with_name("other.manifest.json"))
    assert "a manifest of another export" in verify_cli(hf.with_name("other.parquet")).output


def test_verify_catches_a_changed_sidecar(copies):
    metadata = copies["megatron-bridge"].with_name("tiny.metadata.jsonl")
    metadata.write_text(metadata.read_text().replace('"max_samples_per_bin": ', '"max_samples_per_bin": 1'))
    assert "FAILED tiny.metadata.jsonl: expected sha256" in verify_cli(copies["megatron-bridge"]).output


def test_export_of_a_corrupt_file_is_refused_and_writes_nothing(tiny_build, tmp_path):
    native = tmp_path / f"{TINY}.parquet"
    shutil.copyfile(tiny_build.parquet, native)
    shutil.copyfile(tiny_build.manifest, tmp_path / f"{TINY}.manifest.json")
    data = bytearray(native.read_bytes())
    data[len(data) // 2] ^= 0x04
    native.write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["export", str(native), "--to", "hf", "-o", str(tmp_path / "out" / "x.parquet")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.count("\n") == 1 and f"{native}: refused, does not verify: " in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_explains_each_count_it_prints(tiny_build, tmp_path, fmt):
    result = CliRunner().invoke(main, ["export", str(tiny_build.parquet), "--to", fmt, "-o", str(tmp_path / "o.parquet")])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "o.manifest.json").read_text())
    counts = manifest["counts"]
    lost = {kind: n for kind, n in counts["unrepresentable"].items() if n}
    assert lost  # the tiny build has targets at row starts: the explanations are printed, not skipped
    lines = result.output.splitlines()
    assert f"  targets                {manifest['source']['targets']} in {tiny_build.parquet.name}; of them the trainer cannot train" in lines[3]
    explained = {line.split(":")[0].split()[1]: line for line in lines[4:4 + len(lost)]}
    assert explained.keys() == lost.keys()
    for kind, n in lost.items():
        assert explained[kind].startswith(f"    {n} {kind}: ") and "first token" in explained[kind]
    padding = lines[4 + len(lost)]
    assert padding.startswith(f"  padding dropped        {counts['padding_tokens_dropped']} tokens: ")
    assert ("keeps each row whole" if fmt == "miles" else "padding segment that ends a padded row") in padding


def test_export_help_shows_examples():
    result = CliRunner().invoke(main, ["export", "--help"])
    assert result.exit_code == 0 and "Examples:" in result.output and "--to hf" in result.output
