"""TRL itself (when torch and trl are installed; neither is in requirements.lock or CI) runs the
configuration an hf export writes, on a tiny randomly initialised Llama: SFTTrainer accepts the
arguments, its loss on a packed row equals an independent computation (each conversation alone,
its own positions, cross-entropy over the native targets that can be trained), and a few steps run;
sdpa, the attention the written script picks where flash-attn is not installed, keeps each segment
of a packed row to itself; the written script runs as it is on this machine.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from ruamel.yaml import YAML

import databuild
from conftest import TOKENIZER_DIR

torch = pytest.importorskip("torch", reason="torch is not installed (an optional test: pip install torch trl)")
trl = pytest.importorskip("trl", reason="trl is not installed (an optional test: pip install trl)")


def tiny_llama(vocab_size: int, dtype=torch.float64, **attention):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         initializer_range=1.0, use_cache=False,  # a cache would keep transformers from masking by position_ids
                         **attention)
    return LlamaForCausalLM(config).to(dtype).eval()


def conversations_alone(model, row: dict, native: dict) -> float:
    """Mean cross-entropy over the row's trainable native targets, each conversation run alone."""
    total, count, start = 0.0, 0, 0
    for length in row["seq_lengths"]:
        ids = torch.tensor(row["input_ids"][start:start + length])[None]
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=torch.arange(length)[None]).logits[0]
        mask = np.array(native["loss_mask"][start:start + length], dtype=bool)
        mask[0] = False  # nothing before a conversation's first token predicts it
        picked = np.flatnonzero(mask)
        losses = torch.nn.functional.cross_entropy(logits[picked - 1], ids[0, picked], reduction="sum")
        total, count, start = total + float(losses), count + len(picked), start + length
    return total / count


def test_trl_trains_the_export_as_written(tiny_build, tmp_path):
    from datasets import load_dataset
    from transformers import AutoTokenizer

    out = databuild.export(tiny_build.parquet, "hf", tmp_path / "hf" / "tiny.parquet").path
    arguments = YAML(typ="safe", pure=True).load(out.with_name("tiny.trl.yaml").read_text())
    dataset = load_dataset("parquet", data_files=str(out), split="train")
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    model = tiny_llama(max(max(r) for r in dataset["input_ids"]) + 1)
    config = trl.SFTConfig(output_dir=str(tmp_path / "run"), max_steps=3, learning_rate=1e-3, report_to=[],
                           save_strategy="no", use_cpu=True, seed=0, logging_steps=1, **arguments)
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    native = pq.read_table(tiny_build.parquet).to_pylist()
    packed = [r for r, lengths in enumerate(dataset["seq_lengths"]) if len(lengths) > 1][:3]
    for r in packed:
        batch = trainer.data_collator([dataset[r]])
        assert batch["position_ids"][0].tolist() == [p for n in dataset[r]["seq_lengths"] for p in range(n)]
        with torch.no_grad():
            loss = trainer.compute_loss(model, batch)
        assert float(loss) == pytest.approx(conversations_alone(model, dataset[r], native[r]), rel=1e-6)  # TRL's loss is float32
        whole = torch.tensor(dataset[r]["input_ids"])[None]  # the row as one sequence: the test can tell
        with torch.no_grad():
            attending = model(input_ids=whole, labels=torch.tensor(dataset[r]["labels"])[None]).loss
        assert abs(float(attending) - float(loss)) > 1e-5 * float(loss)  # ten times the tolerance above
        with torch.no_grad():  # a loop of one's own that leaves the cache on: transformers masks nothing
            cached = model(input_ids=whole, position_ids=batch["position_ids"], use_cache=True,
                           labels=torch.tensor(dataset[r]["labels"])[None]).loss
        assert abs(float(cached) - float(loss)) > 1e-5 * float(loss)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(np.isfinite(losses))


def test_sdpa_keeps_each_segment_to_itself(tiny_build, tmp_path):
    """transformers 5's sdpa, given position_ids and no attention mask (as TRL's padding-free collator
    gives them), attends within each segment: every segment's logits in a packed row are its logits
    run alone. In float64, so that any attention across segments would stand far above rounding."""
    out = databuild.export(tiny_build.parquet, "hf", tmp_path / "tiny.parquet").path
    rows = [r for r in pq.read_table(out).to_pylist() if len(r["seq_lengths"]) > 2][:3]
    model = tiny_llama(max(max(r["input_ids"]) for r in rows) + 1, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    for row in rows:
        ids = torch.tensor(row["input_ids"])[None]
        positions = torch.tensor([p for n in row["seq_lengths"] for p in range(n)])[None]
        with torch.no_grad():
            packed = model(input_ids=ids, position_ids=positions).logits[0]
            attending = model(input_ids=ids).logits[0]  # one sequence: later segments see the earlier ones
        start = 0
        for number, length in enumerate(row["seq_lengths"]):
            with torch.no_grad():
                alone = model(input_ids=ids[:, start:start + length]).logits[0]
            assert float((packed[start:start + length] - alone).abs().max()) < 1e-9  # rounding: about 1e-14
            if number:  # the test can tell: without the positions the segment's logits move by far more
                assert float((attending[start:start + length] - alone).abs().max()) > 1e-2
            start += length


def test_the_trl_script_runs_here_as_written(tiny_build, tmp_path):
    """The export's train script, on a model saved here: it picks flash-attn only where it is installed
    and bf16 only where the machine has it (on CI's CPU: sdpa, no bf16; TRL's own bf16=True default
    stops there at start-up), and trains; SFTConfig's arguments after OUTPUT_DIR replace its defaults."""
    from transformers import AutoTokenizer
    from transformers.utils import is_flash_attn_2_available, is_torch_bf16_gpu_available

    out = databuild.export(tiny_build.parquet, "hf", tmp_path / "hf" / "tiny.parquet").path
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    model_dir = tmp_path / "model"
    tiny_llama(len(tokenizer), torch.float32).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    ran = subprocess.run([sys.executable, str(out.with_name("tiny.trl.py")), str(model_dir), str(tmp_path / "run"),
                          "--max_steps", "2", "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1"],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    expected = f"attention {'flash_attention_2' if is_flash_attn_2_available() else 'sdpa'}, " \
               f"bf16 {is_torch_bf16_gpu_available()}"
    assert ran.stdout.splitlines()[0] == expected
    assert "'train_loss'" in ran.stdout + ran.stderr
