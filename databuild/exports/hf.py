"""hf: a parquet that `datasets` loads, in TRL's padding-free layout (input_ids, labels, seq_lengths).

The convention (huggingface/trl, trl/trainer/sft_trainer.py, DataCollatorForLanguageModeling with
padding_free=True; transformers' ForCausalLMLoss): labels are token-aligned and the model shifts,
so labels[i] = input_ids[i] where token i is a target and -100 elsewhere; seq_lengths are the
row's segment lengths, from which the collator restarts position_ids at every segment and sets the
label of each segment's first token to -100. The file's labels are -100 there already, so any
trainer that reads `labels` (a plain transformers loop, or another collator) trains exactly what
TRL trains, never a segment's first token from the previous conversation's last: a native target
there is lost, counted as `target_at_segment_start`. Padding segments are dropped (padding-free
needs none): a padded row ends where its padding began and its seq_lengths add up to its length.

Beside the rows go TRL's configuration (huggingface/trl@f2cd5771, checked in tests/support/trainer_configs.py):
`OUT.trl.yaml`, the SFTConfig arguments, and `OUT.trl.py`, a minimal train script with them. They
set `padding_free=True` (the collator flattens a batch and restarts positions from seq_lengths;
without it the collator builds one attention mask per row and ignores seq_lengths, so conversations
in a row attend to each other, sft_trainer.py:462-507), `skip_prepare_dataset` (the rows are
tokenized and labelled already) and `max_length=None` (required with padding_free and no packing,
:1244-1249).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from .recipe_text import absolute, yaml_text
from ..rowfile.read import RowBlock
from .rows import list_array
from .stream import SEGMENT_START_WHY, Format, export_stem

TRL = "huggingface/trl@f2cd5771"

IGNORE = -100
SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32())),
                    ("seq_lengths", pa.list_(pa.int32()))])


class HfFormat(Format):
    name = "hf"
    schema = SCHEMA
    convention = ("TRL padding-free: labels[i] = input_ids[i] where token i is a target, -100 elsewhere "
                  "and at every segment's first token (the model shifts); seq_lengths = segment lengths")
    why = {"target_at_segment_start": f"{SEGMENT_START_WHY} (TRL restarts position_ids there and labels it -100)"}

    def convert(self, block: RowBlock) -> pa.Table:
        self.count("target_at_segment_start", block.targets_at_segment_starts())
        kept = block.kept()
        self.padding_dropped += int(kept.size - np.count_nonzero(kept))
        targets = (block.loss_mask == 1) & ~block.segment_starts
        labels = np.where(targets, block.input_ids, IGNORE).astype(np.int32)
        return pa.Table.from_arrays([
            list_array(block.input_ids, kept, pa.int32()),
            list_array(labels, kept, pa.int32()),
            pa.array([block.segment_lengths(r) for r in range(block.rows)], type=pa.list_(pa.int32())),
        ], schema=SCHEMA)

    def trainer_config(self, out: Path, row_tokens: int, rows: int, validation: Path | None = None) -> dict[str, str]:
        stem, arguments = export_stem(out), sft_arguments(validation is not None)
        evaluation = "" if validation is None else (
            f"\nEVAL_ROWS = {absolute(validation)!r}  # the build's validation split, exported beside it")
        eval_dataset = "" if validation is None else (
            '\n                     eval_dataset=load_dataset("parquet", data_files=EVAL_ROWS, split="train"),')
        header = [f"TRL ({TRL}) SFTConfig arguments that read {absolute(out)} ({rows} rows of at most",
                  f"{row_tokens} tokens), written by `databuild export --to hf`: SFTConfig(**these, output_dir=...)."]
        script = (f'''"""Train a causal LM on {absolute(out)} with TRL's SFTTrainer ({TRL}).
Written by `databuild export --to hf`. The model's tokenizer must be the one the rows were built with.

    python {stem}.trl.py MODEL OUTPUT_DIR [--SFTCONFIG_ARGUMENT VALUE ...]   # e.g. --num_train_epochs 1
"""

import sys

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser
from transformers.utils import is_flash_attn_2_available, is_torch_bf16_gpu_available
from trl import SFTConfig, SFTTrainer

ROWS = {absolute(out)!r}
ARGUMENTS = {arguments!r}{evaluation}

model_name, output_dir = sys.argv[1], sys.argv[2]
# Padding-free batches are one flattened sequence with position_ids restarting at every conversation and
# no attention mask. FlashAttention reads the conversations' bounds from them; so does sdpa in
# transformers 5 (masking_utils.find_packed_sequence_indices: a block-diagonal mask when there is no
# attention mask and no cache), the kernel used where flash-attn is not installed.
attention = "flash_attention_2" if is_flash_attn_2_available() else "sdpa"
# TRL's default is bf16=True, which stops at start-up on a machine without bf16 (a CPU, an older GPU).
bf16 = is_torch_bf16_gpu_available()
print(f"attention {{attention}}, bf16 {{bf16}}", flush=True)
parser = HfArgumentParser(SFTConfig)  # SFTConfig's own arguments after OUTPUT_DIR replace these defaults
parser.set_defaults(**ARGUMENTS, bf16=bf16)
(config,) = parser.parse_args_into_dataclasses(["--output_dir", output_dir, *sys.argv[3:]])
model = AutoModelForCausalLM.from_pretrained(model_name, attn_implementation=attention)
# TRL then warns that "a batch size of 1 annihilate[s] the benefits of padding-free training" (sft_trainer.py,
# for per_device_train_batch_size 1 without packing): its benefit is no padding between conversations, and
# each row here is already {row_tokens} tokens of conversations packed without padding; one row a device is the
# step the build was made for.
trainer = SFTTrainer(model=model, args=config,
                     train_dataset=load_dataset("parquet", data_files=ROWS, split="train"),{eval_dataset}
                     processing_class=AutoTokenizer.from_pretrained(model_name))
trainer.train()
''')
        return {f"{stem}.trl.yaml": yaml_text(header, arguments), f"{stem}.trl.py": script}


def sft_arguments(evaluate: bool = False) -> dict:
    """SFTConfig's arguments for the export; with a validation split, its eval_dataset evaluated once an
    epoch, a row at a time (padding-free, as training)."""
    return {"padding_free": True, "packing": False, "max_length": None,
            "dataset_kwargs": {"skip_prepare_dataset": True}, "per_device_train_batch_size": 1,
            **({"eval_strategy": "epoch", "per_device_eval_batch_size": 1} if evaluate else {})}
