"""A build with a validation split exports both files: the validation file in the same layout beside
the export, and the trainer configuration reads it as its validation input (Megatron-Bridge's
packed_val_data_path with do_validation, TRL's eval_dataset); each trainer's reading code (transcribed,
tests/trainer_readers.py and trainer_configs.py) reads both."""

from __future__ import annotations

import ast

import pyarrow.parquet as pq
import pytest
from ruamel.yaml import YAML

import databuild
import trainer_configs as configs
import trainer_readers as readers
from conftest import write_config
from databuild.build import make
from databuild.config import load_config
from databuild.exports.check import export_manifest_of, verify_export
from test_export import EOS, expected_pairs, native_rows
from test_trainer_configs import launch_bridge


@pytest.fixture(scope="module")
def split_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("split-export")
    config = load_config(write_config(tmp / "c.yaml", validation={"share": 0.1, "seed": 1}))
    result = make(config, tmp / "build", progress=False)
    held = result.parquet.with_name(result.data["validation"]["file"])
    return tmp, result, held


def load_yaml(path):
    return YAML(typ="safe", pure=True).load(path.read_text())


def test_bridge_reads_both_files(split_build):
    tmp, result, held = split_build
    out = databuild.export(result.parquet, "megatron-bridge", tmp / "bridge" / "tiny.parquet").path
    validation = out.with_name("tiny.validation.parquet")
    assert validation.is_file() and out.with_name("tiny.validation.manifest.json").is_file()
    cfg, split, skipped = launch_bridge(load_yaml(out.with_name("tiny.bridge.yaml")))
    assert skipped == [] and split.writes == []  # both splits resolve to the exports: nothing packed
    assert cfg.dataset.do_validation and cfg.dataset.offline_packing_specs.packed_val_data_path == str(
        validation.resolve())
    for file, native in ((out, result.parquet), (validation, held)):
        trained = readers.bridge_trained_pairs(file, split.max_seq_length, EOS, split.pad_to_max_length)
        assert trained == expected_pairs("megatron-bridge", native_rows(native))[0]
    assert all(verify_export(f, export_manifest_of(f, None)).failures == [] for f in (out, validation))


def test_trl_evaluates_the_validation_file(split_build):
    tmp, result, held = split_build
    out = databuild.export(result.parquet, "hf", tmp / "hf" / "tiny.parquet").path
    validation = out.with_name("tiny.validation.parquet")
    arguments = load_yaml(out.with_name("tiny.trl.yaml"))
    config = configs.trl_config({**arguments, "output_dir": "run"})
    assert (config["eval_strategy"], config["per_device_eval_batch_size"]) == ("epoch", 1)
    script = ast.parse(out.with_name("tiny.trl.py").read_text())
    constants = {n.targets[0].id: ast.literal_eval(n.value) for n in script.body
                 if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                 and isinstance(n.value, ast.Constant)}
    assert constants["EVAL_ROWS"] == str(validation.resolve())
    trainer = next(n for n in ast.walk(script) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SFTTrainer")
    assert {k.arg for k in trainer.keywords} >= {"train_dataset", "eval_dataset"}
    for file, native in ((out, result.parquet), (validation, held)):
        rows = pq.read_table(file).to_pylist()
        trained = set()
        for k, row in enumerate(rows):  # one row per batch, as per_device_*_batch_size 1
            batch = readers.trl_collate([row])
            trained |= {(k, int(p)) for p in readers.causal_lm_trained(batch["labels"])}
        assert trained == expected_pairs("hf", native_rows(native))[0]
    assert verify_export(out, export_manifest_of(out, None)).failures == []
