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

Beside the rows go TRL's configuration (huggingface/trl@f2cd5771, checked in tests/trainer_configs.py):
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
from .rows import RowBlock, list_array
from .stream import Format, export_stem

TRL = "huggingface/trl@f2cd5771"

IGNORE = -100
SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32())),
                    ("seq_lengths", pa.list_(pa.int32()))])


class HfFormat(Format):
    name = "hf"
    schema = SCHEMA
    convention = ("TRL padding-free: labels[i] = input_ids[i] where token i is a target, -100 elsewhere "
                  "and at every segment's first token (the model shifts); seq_lengths = segment lengths")
    why = {"target_at_segment_start": "a target on a segment's first token: the trainer runs each segment as a sequence of its own, so no position of it comes before that token to predict it (TRL restarts position_ids there and labels it -100)"}

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

    def trainer_config(self, out: Path, row_tokens: int, rows: int) -> dict[str, str]:
        stem, arguments = export_stem(out), sft_arguments()
        header = [f"TRL ({TRL}) SFTConfig arguments that read {absolute(out)} ({rows} rows of at most",
                  f"{row_tokens} tokens), written by `databuild export --to hf`: SFTConfig(**these, output_dir=...)."]
        script = (f'''"""Train a causal LM on {absolute(out)} with TRL's SFTTrainer ({TRL}).
Written by `databuild export --to hf`. The model's tokenizer must be the one the rows were built with.

    python {stem}.trl.py MODEL OUTPUT_DIR
"""

import sys

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

ROWS = {absolute(out)!r}
ARGUMENTS = {arguments!r}

model_name, output_dir = sys.argv[1], sys.argv[2]
# Padding-free batches are one flattened sequence: an attention that reads position_ids (FlashAttention)
# keeps the conversations apart; TRL warns about any other (sft_trainer.py:1153-1162).
model = AutoModelForCausalLM.from_pretrained(model_name, attn_implementation="flash_attention_2")
trainer = SFTTrainer(model=model, args=SFTConfig(output_dir=output_dir, **ARGUMENTS),
                     train_dataset=load_dataset("parquet", data_files=ROWS, split="train"),
                     processing_class=AutoTokenizer.from_pretrained(model_name))
trainer.train()
''')
        return {f"{stem}.trl.yaml": yaml_text(header, arguments), f"{stem}.trl.py": script}


def sft_arguments() -> dict:
    return {"padding_free": True, "packing": False, "max_length": None,
            "dataset_kwargs": {"skip_prepare_dataset": True}, "per_device_train_batch_size": 1}
