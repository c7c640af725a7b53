"""The trainer configuration each export writes beside itself, put through a transcription of that
trainer's own configuration checks and argument parser (tests/support/trainer_configs.py): it passes, it
names the export's own files and sizes, nothing in it is skipped or unknown, and the rows read with
exactly those settings train the native targets (tests/support/trainer_readers.py). Dropping any one of the
settings makes the trainer refuse, write where it should not, or read the rows otherwise."""

from __future__ import annotations

import ast
import copy
import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ruamel.yaml import YAML

import databuild
import trainer_configs as configs
import trainer_readers as readers
from databuild.exports import make_format
from databuild.exports.check import verify_export
from databuild.exports.stream import write_export
from databuild.integrations import miles as rollout
from test_export import EOS, expected_pairs, native_rows, padded_file


@pytest.fixture(scope="module")
def exported(tiny_build, tmp_path_factory):
    out = tmp_path_factory.mktemp("configured")
    return {fmt: databuild.export(tiny_build.parquet, fmt, out / fmt / "tiny.parquet").path
            for fmt in ("megatron-bridge", "miles", "hf")}


def load_yaml(path: Path) -> dict:
    return YAML(typ="safe", pure=True).load(path.read_text())


def targets(tiny_build) -> set:
    return expected_pairs("hf", native_rows(tiny_build.parquet))[0]


# --- Megatron-Bridge ---------------------------------------------------------------------------

def launch_bridge(overrides: dict, **recipe_model):
    """A recipe as Bridge ships them (TP 2 with sequence parallelism, as the seed recipe runs)."""
    model = {"tensor_model_parallel_size": 2, "sequence_parallel": True, **recipe_model}
    return configs.bridge_launch(overrides, configs.bridge_recipe(**model))


def test_bridge_overrides_launch_and_train_the_native_targets(tiny_build, exported):
    out = exported["megatron-bridge"]
    overrides = load_yaml(out.with_name("tiny.bridge.yaml"))
    cfg, split, skipped = launch_bridge(overrides)
    assert skipped == [] and split.writes == []  # every key exists; nothing packed, created or appended
    assert split.file == str(out.resolve()) and split.max_seq_length == 512 and split.answer_only_loss
    specs = cfg.dataset.offline_packing_specs
    assert specs.packed_metadata_path == str(out.resolve().with_name("tiny.metadata.jsonl"))
    assert (cfg.model.seq_length, cfg.dataset.seq_length, cfg.train.micro_batch_size) == (512, 512, 1)
    assert specs.pad_seq_to_mult == 1  # the export's segments are not padded to a multiple
    assert split.pad_to_max_length and split.metadata is None  # metadata is read only with pad_cu_seqlens
    trained = readers.bridge_trained_pairs(out, split.max_seq_length, EOS, split.pad_to_max_length)
    assert trained == expected_pairs("megatron-bridge", native_rows(tiny_build.parquet))[0]


def python_settings(path: Path) -> tuple[dict, dict]:
    """The GPTSFTDatasetConfig(...) keywords (PackedSequenceSpecs(...) nested) and the cfg.X.Y = V
    assignments of the written Python file, read with ast (no Bridge to import)."""
    tree = ast.parse(path.read_text())

    def call(node: ast.Call) -> dict:
        return {k.arg: call(k.value) if isinstance(k.value, ast.Call) else ast.literal_eval(k.value)
                for k in node.keywords}

    dataset = next(call(n) for n in ast.walk(tree) if isinstance(n, ast.Call)
                   and getattr(n.func, "id", "") == "GPTSFTDatasetConfig")
    assigned: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute) \
                and isinstance(node.value, ast.Constant):
            assigned.setdefault(node.targets[0].value.attr, {})[node.targets[0].attr] = node.value.value
    return dataset, assigned


def test_bridge_python_call_is_the_same_configuration(exported):
    out = exported["megatron-bridge"]
    dataset, assigned = python_settings(out.with_name("tiny.bridge.py"))
    specs = configs.BridgeSpecs(**dataset.pop("offline_packing_specs"))  # an unknown keyword is a TypeError
    cfg = configs.BridgeContainer(configs.BridgeSFTDataset(**dataset, offline_packing_specs=specs),
                                  configs.BridgeModel(**assigned["model"]), configs.BridgeTrain(**assigned["train"]))
    configs.bridge_container_validate(cfg)
    assert configs.bridge_build(cfg.dataset).writes == []
    via_yaml = launch_bridge(load_yaml(out.with_name("tiny.bridge.yaml")))[0]
    # The call builds the dataset config whole; the overrides merge into a recipe's (its seed stays).
    assert {k: getattr(cfg.dataset, k) for k in dataset} == {k: getattr(via_yaml.dataset, k) for k in dataset}
    assert cfg.dataset.offline_packing_specs == via_yaml.dataset.offline_packing_specs and cfg.train == via_yaml.train
    assert {k: getattr(cfg.model, k) for k in assigned["model"]} == {k: getattr(via_yaml.model, k)
                                                                    for k in assigned["model"]}


def without(overrides: dict, dotted: str) -> dict:
    changed = copy.deepcopy(overrides)
    *parents, key = dotted.split(".")
    node = changed
    for parent in parents:
        node = node[parent]
    del node[key]
    return changed


@pytest.mark.parametrize("dropped, complaint", [
    ("dataset.hf_dataset", "Exactly one text-only SFT source"),
    ("dataset.hf_validation_proportion", "require hf_dataset, not dataset_root"),
    ("dataset.dataset_root", "Exactly one text-only SFT source"),
])
def test_bridge_refuses_without_each_source_setting(exported, dropped, complaint):
    overrides = load_yaml(exported["megatron-bridge"].with_name("tiny.bridge.yaml"))
    with pytest.raises(ValueError, match=complaint):
        launch_bridge(without(overrides, dropped))


def test_bridge_overrides_fit_a_recipe_with_packing_off(exported):
    overrides = load_yaml(exported["megatron-bridge"].with_name("tiny.bridge.yaml"))
    recipe = configs.bridge_recipe(tensor_model_parallel_size=2, sequence_parallel=True)
    recipe.dataset.enable_offline_packing, recipe.dataset.offline_packing_specs = False, None
    cfg, split, skipped = configs.bridge_launch(overrides, recipe)
    assert not skipped and not split.writes and cfg.dataset.offline_packing_specs.packed_sequence_size == 512


def test_bridge_refuses_without_the_micro_batch_or_packing_switch(exported):
    overrides = load_yaml(exported["megatron-bridge"].with_name("tiny.bridge.yaml"))
    recipe = configs.bridge_recipe()
    recipe.train.micro_batch_size = 2
    with pytest.raises(ValueError, match="Micro batch size should be 1"):
        configs.bridge_launch(without(overrides, "train"), recipe)
    recipe = configs.bridge_recipe()  # a recipe with packing off
    recipe.dataset.enable_offline_packing, recipe.dataset.offline_packing_specs = False, None
    with pytest.raises(ValueError, match="enable_offline_packing must be True when offline_packing_specs is set"):
        configs.bridge_launch(without(overrides, "dataset.enable_offline_packing"), recipe)


def test_bridge_without_its_paths_or_split_switches_writes_beside_the_export(exported):
    overrides = load_yaml(exported["megatron-bridge"].with_name("tiny.bridge.yaml"))
    _, split, _ = launch_bridge(without(overrides, "dataset.offline_packing_specs.packed_metadata_path"))
    assert any("/packed/" in w for w in split.writes)  # a pack directory made under dataset_root
    _, split, _ = launch_bridge(without(overrides, "dataset.do_validation"))
    assert any("validation.jsonl" in w for w in split.writes)  # validation packed, the metadata file appended
    with pytest.raises(ValueError, match="not a packed dataset"):
        configs.bridge_build(configs.BridgeSFTDataset(seq_length=512, dataset_root="/x"))


def test_bridge_parallelism_the_export_does_not_support(exported):
    """Without the model overrides a recipe's sequence parallelism (or CP) raises pad_seq_to_mult,
    and Bridge's collate would then cut each segment's trailing EOS tokens from its logical length."""
    overrides = load_yaml(exported["megatron-bridge"].with_name("tiny.bridge.yaml"))
    cfg, _, _ = launch_bridge(without(without(overrides, "model.sequence_parallel"), "model.context_parallel_size"))
    assert cfg.dataset.offline_packing_specs.pad_seq_to_mult == 2
    cfg, _, _ = launch_bridge(without(without(overrides, "model.sequence_parallel"), "model.context_parallel_size"),
                              context_parallel_size=2, calculate_per_token_loss=True, sequence_parallel=False)
    assert cfg.dataset.offline_packing_specs.pad_seq_to_mult == 4


def test_bridge_pad_cu_seqlens_reads_the_exports_own_metadata(tiny_build, exported):
    out = exported["megatron-bridge"]
    overrides = load_yaml(out.with_name("tiny.bridge.yaml"))
    overrides["dataset"]["offline_packing_specs"]["pad_cu_seqlens"] = True
    _, split, _ = launch_bridge(overrides)
    # packing/gpt_sft.py L264, L319-320: the fields collate reads from every entry
    (entry,) = split.metadata
    rows = native_rows(tiny_build.parquet)
    assert entry["max_samples_per_bin"] == max(len(r["seq_start_id"]) for r in rows)
    assert entry["pack_size"] == 512 and {"dataset_max_seqlen", "min_packed_seqlen"} <= set(entry)
    overrides["dataset"]["dataset_kwargs"]["pad_to_max_length"] = False
    recipe = configs.bridge_recipe(tensor_model_parallel_size=2, sequence_parallel=True)
    recipe.dataset.dataset_kwargs = {}
    with pytest.raises(ValueError, match="pad_cu_seqlens=True requires dataset pad_to_max_length=True"):
        configs.bridge_launch(overrides, recipe)


def test_two_exports_into_one_directory_keep_their_own_files(tiny_build, tmp_path):
    first = databuild.export(tiny_build.parquet, "megatron-bridge", tmp_path / "a.parquet")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    (tmp_path / "native").mkdir()
    native, summary = padded_file(tiny_build, tmp_path / "native" / "padded.parquet")
    second = write_export(native, make_format("megatron-bridge"), tmp_path / "b.parquet", summary)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before
    assert [s["file"] for s in first.data["sidecars"]] == ["a.metadata.jsonl"]
    assert [s["file"] for s in second.data["sidecars"]] == ["b.metadata.jsonl"]
    for result in (first, second):
        assert not verify_export(result.path, result.data).failures
        overrides = load_yaml(result.path.with_name(result.path.stem + ".bridge.yaml"))
        _, split, skipped = launch_bridge(overrides)
        assert split.file == str(result.path.resolve()) and not skipped and not split.writes


# --- miles and slime ---------------------------------------------------------------------------

def fragment_argv(path: Path, **env: str) -> list[str]:
    """The flags as bash expands the written array."""
    script = 'source "$1" && printf "%s\\0" "${DATABUILD_ARGS[@]}"'
    done = subprocess.run(["bash", "-c", script, "bash", str(path)], capture_output=True, check=True,
                          env={"PATH": os.environ["PATH"], **env})
    return done.stdout.decode().split("\0")[:-1]


TRAINERS = {"slime": (configs.SLIME_FLAGS, configs.slime_validate),
            "miles": (configs.MILES_FLAGS, configs.miles_validate)}


@pytest.mark.parametrize("trainer", TRAINERS)
def test_miles_and_slime_parse_the_flags_and_train_the_native_targets(tiny_build, exported, trainer):
    flags, validate = TRAINERS[trainer]
    out = exported["miles"]
    args = configs.parse_flags(flags, fragment_argv(out.with_name("tiny.miles.sh")))
    validate(args)
    configs.sft_launch_requirements(args, out.resolve())
    assert (args.rollout_batch_size, args.global_batch_size, args.max_tokens_per_gpu) == (40, 40, 512)
    assert args.use_dynamic_batch_size and args.calculate_per_token_loss and not args.compute_advantages_and_returns
    source = configs.miles_loader(Path(args.prompt_data), args)
    trained = set()
    for group in rollout.generate_rollout(args, 0, source):  # one Sample per row, its index the row
        (sample,) = group
        trained |= {(sample.index, p) for p in readers.slime_trained_tokens([group])[0]}
    assert trained == expected_pairs("miles", native_rows(tiny_build.parquet))[0]
    chosen = configs.parse_flags(flags, fragment_argv(out.with_name("tiny.miles.sh"), DATABUILD_ROWS_PER_STEP="8"))
    assert chosen.rollout_batch_size == chosen.global_batch_size == 8


def test_flags_the_parsers_do_not_have_are_refused(exported):
    argv = fragment_argv(exported["miles"].with_name("tiny.miles.sh"))
    with pytest.raises(ValueError, match="unknown arguments"):  # what data/README once said to pass
        configs.parse_flags(configs.MILES_FLAGS, argv + ["--rollout-global-dataset"])
    per_segment = argv + ["--use-dynamic-global-batch-size"]
    configs.miles_validate(configs.parse_flags(configs.MILES_FLAGS, per_segment))
    with pytest.raises(ValueError, match="unknown arguments"):  # slime has no dynamic global batch
        configs.parse_flags(configs.SLIME_FLAGS, per_segment)
    with pytest.raises(ValueError, match="max_tokens_per_gpu must be set"):
        i = argv.index("--max-tokens-per-gpu")
        configs.slime_validate(configs.parse_flags(configs.SLIME_FLAGS, argv[:i] + argv[i + 2:]))
    with pytest.raises(ValueError, match="num_rollout is not set"):
        i = argv.index("--num-epoch")
        configs.miles_validate(configs.parse_flags(configs.MILES_FLAGS, argv[:i] + argv[i + 2:]))


# --- TRL ---------------------------------------------------------------------------------------

def script_arguments(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", "") == "ARGUMENTS")


def test_trl_arguments_pass_sft_trainer_and_train_the_native_targets(tiny_build, exported):
    out = exported["hf"]
    arguments = load_yaml(out.with_name("tiny.trl.yaml"))
    assert script_arguments(out.with_name("tiny.trl.py")) == arguments
    # the warning TRL prints for a batch of one row is answered where the user reads the script (issue 31's walk)
    assert "TRL then warns that \"a batch size of 1 annihilate[s] the benefits of padding-free training\"" in \
        out.with_name("tiny.trl.py").read_text() and arguments["per_device_train_batch_size"] == 1
    config = configs.trl_config({**arguments, "output_dir": "run"})
    columns = pq.read_schema(out).names
    plan = configs.trl_trainer_checks(config, columns)
    assert plan == {"padding_free": True, "skip_prepare": True, "completion_only_loss": False,
                    "columns": ["input_ids", "labels", "seq_lengths"]}
    rows = pq.read_table(out).to_pylist()
    size = config["per_device_train_batch_size"]
    trained = set()
    for first in range(0, len(rows), size):
        batch = readers.trl_collate(rows[first:first + size])
        flat = readers.causal_lm_trained(batch["labels"])
        ends = [sum(len(r["input_ids"]) for r in rows[first:first + k]) for k in range(size + 1)]
        trained |= {(first + k, int(p) - ends[k]) for p in flat for k in range(size) if ends[k] <= p < ends[k + 1]}
    assert trained == targets(tiny_build)


def test_hf_labels_need_no_trainer_masking(tiny_build, exported):
    """Every segment's first label is -100 in the file: TRL's collator changes nothing, and a plain
    causal-LM loss over `labels` trains exactly the native targets that can be trained."""
    rows = pq.read_table(exported["hf"]).to_pylist()
    plain = set()
    for r, row in enumerate(rows):
        assert readers.trl_collate([row])["labels"][0].tolist() == row["labels"]
        starts = [sum(row["seq_lengths"][:k]) for k in range(len(row["seq_lengths"]))]
        assert all(row["labels"][s] == -100 for s in starts)
        plain |= {(r, int(p)) for p in readers.causal_lm_trained([row["labels"]])}
    assert plain == targets(tiny_build)
    manifest = json.loads(exported["hf"].with_name("tiny.manifest.json").read_text())
    lost = expected_pairs("hf", native_rows(tiny_build.parquet))[1]
    assert manifest["counts"]["unrepresentable"]["target_at_segment_start"] == len(lost) > 0


@pytest.mark.parametrize("change, complaint", [
    ({"max_length": 1024}, "max_length` is not enforced"),
    ({"padding_fre": True}, "unexpected keyword"),
])
def test_trl_refuses_a_changed_configuration(exported, change, complaint):
    arguments = {**load_yaml(exported["hf"].with_name("tiny.trl.yaml")), **change}
    with pytest.raises(ValueError, match=complaint):
        configs.trl_trainer_checks(configs.trl_config(arguments), pq.read_schema(exported["hf"]).names)


def test_trl_without_padding_free_reads_rows_whole(exported):
    """skip_prepare_dataset alone: the collator is not padding-free, builds one attention mask per
    row and never reads seq_lengths, so a row's conversations attend to each other."""
    arguments = load_yaml(exported["hf"].with_name("tiny.trl.yaml"))
    arguments["padding_free"] = False
    plan = configs.trl_trainer_checks(configs.trl_config(arguments), pq.read_schema(exported["hf"]).names)
    assert not plan["padding_free"]


# --- every format -----------------------------------------------------------------------------

def test_configuration_names_the_exports_own_place_and_verify_checks_it(exported, tmp_path):
    for fmt, out in exported.items():
        manifest = json.loads(out.with_name("tiny.manifest.json").read_text())
        assert manifest["trainer_config"] and not verify_export(out, manifest).failures
        for name in manifest["trainer_config"]:
            assert str(out.resolve()) in out.with_name(name).read_text()
        moved = tmp_path / fmt
        moved.mkdir()
        for path in out.parent.iterdir():
            (moved / path.name).write_bytes(path.read_bytes())
        failures = verify_export(moved / out.name, manifest).failures
        assert failures and all("differs from the configuration the export writes" in f for f in failures)


def test_an_export_name_must_end_in_parquet(tiny_build, tmp_path):
    with pytest.raises(databuild.BuildError, match="ends in .parquet"):
        databuild.export(tiny_build.parquet, "miles", tmp_path / "rows.pq")


def test_data_readme_shows_each_configuration_verbatim():
    """data/README.md, "Trainers": the files each format writes for the tiny build exported to
    /data/exports/<format>/tiny.parquet, as they are."""
    readme = (Path(__file__).parents[1] / "data" / "README.md").read_text()
    for fmt, folder in (("megatron-bridge", "bridge"), ("miles", "miles"), ("hf", "hf")):
        written = make_format(fmt).trainer_config(Path(f"/data/exports/{folder}/tiny.parquet"), 512, 40)
        for name, text in written.items():
            assert f"`{name.replace('tiny', 'OUT')}`:\n\n```" in readme and text in readme, name
