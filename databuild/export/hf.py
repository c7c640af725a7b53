"""hf: a parquet that `datasets` loads, in TRL's padding-free layout (input_ids, labels, seq_lengths).

The convention (huggingface/trl, trl/trainer/sft_trainer.py, DataCollatorForLanguageModeling with
padding_free=True; transformers' ForCausalLMLoss): labels are token-aligned and the model shifts,
so labels[i] = input_ids[i] where token i is a target and -100 elsewhere; seq_lengths are the
row's segment lengths, from which the collator restarts position_ids at every segment and sets the
label of each segment's first token to -100. A native target there is lost: counted as
`target_at_segment_start`. Padding segments are dropped (padding-free needs none): a padded row
ends where its padding began and its seq_lengths add up to its length.

Use with SFTConfig(padding_free=True, packing=False, max_length=None) or
dataset_kwargs={"skip_prepare_dataset": True}.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .rows import RowBlock, list_array
from .stream import Format

IGNORE = -100
SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32())),
                    ("seq_lengths", pa.list_(pa.int32()))])


class HfFormat(Format):
    name = "hf"
    schema = SCHEMA
    convention = ("TRL padding-free: labels[i] = input_ids[i] where token i is a target, -100 elsewhere "
                  "(the model shifts); seq_lengths = segment lengths")

    def convert(self, block: RowBlock) -> pa.Table:
        self.count("target_at_segment_start", block.targets_at_segment_starts())
        kept = block.kept()
        self.padding_dropped += int(kept.size - np.count_nonzero(kept))
        labels = np.where(block.loss_mask == 1, block.input_ids, IGNORE).astype(np.int32)
        return pa.Table.from_arrays([
            list_array(block.input_ids, kept, pa.int32()),
            list_array(labels, kept, pa.int32()),
            pa.array([block.segment_lengths(r) for r in range(block.rows)], type=pa.list_(pa.int32())),
        ], schema=SCHEMA)
