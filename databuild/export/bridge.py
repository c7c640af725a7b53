"""megatron-bridge: rows for Megatron-Bridge's packed-parquet dataset (GPTSFTPackedParquetDataset).

Bridge's convention (NVIDIA-NeMo/Megatron-Bridge, src/megatron/bridge/data/packing/): its writer
(algorithms.py, fill_packing_strategy) stores each sequence's token-aligned mask rolled left by one,
and its collate (gpt_sft.py, collate_fn with _build_loss_mask, answer_only_loss=True) trains, for
each segment [b, e) of seq_start_id + [len(input_ids)], inputs ids[b:e-1] on labels ids[b+1:e]
weighted by loss_mask[b:e-1]. So the stored loss_mask[j] says whether ids[j+1] is a target:
stored[j] = native[j+1] inside a segment, 0 on its last token (never read). A native target on a
segment's first token has no position to be labelled from: counted as `target_at_segment_start`.

Padding segments are dropped (the row ends where its padding began): Bridge pads at collate time.
Beside the rows goes the packing metadata Bridge reads when `pad_cu_seqlens` is on:
`{row_tokens}_metadata.jsonl`, the name its builder looks for in the pack directory, holding one
JSON array with one entry of the fields create_packing_strategy writes.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from .rows import RowBlock, list_array
from .stream import Format

SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
                    ("seq_start_id", pa.list_(pa.int32()))])


def bridge_mask(block: RowBlock) -> np.ndarray:
    """The stored mask: each target moved onto the token before it, within its segment."""
    starts = block.segment_starts()
    stored = np.zeros_like(block.loss_mask)
    stored[:, :-1] = block.loss_mask[:, 1:] * ~starts[:, 1:]
    return stored


class BridgeFormat(Format):
    name = "megatron-bridge"
    schema = SCHEMA
    convention = ("Megatron-Bridge stored convention: loss_mask[j] = 1 means ids[j+1] is a target "
                  "(rolled left by one within each segment; 0 on a segment's last token)")

    def __init__(self) -> None:
        super().__init__()
        self.max_segment = 0
        self.max_segments = 0
        self.min_row = None
        self.segments = 0
        self.tokens = 0

    def convert(self, block: RowBlock) -> pa.Table:
        self.count("target_at_segment_start", block.targets_at_segment_starts())
        kept = block.kept()
        self.padding_dropped += int(kept.size - np.count_nonzero(kept))
        for row in range(block.rows):
            lengths = block.segment_lengths(row)
            # Bridge's own figures count a segment's tokens minus the one that only serves as a label.
            self.max_segment = max(self.max_segment, int(lengths.max()) - 1)
            self.max_segments = max(self.max_segments, len(lengths))
            runtime = int(lengths.sum()) - len(lengths)
            self.min_row = runtime if self.min_row is None else min(self.min_row, runtime)
            self.segments += len(lengths)
            self.tokens += runtime
        return pa.Table.from_arrays([
            list_array(block.input_ids, kept, pa.int32()),
            list_array(bridge_mask(block), kept, pa.int8()),
            pa.array([block.real_starts(r) for r in range(block.rows)], type=pa.list_(pa.int32())),
        ], schema=SCHEMA)

    def sidecars(self, row_tokens: int, rows: int) -> dict[str, bytes]:
        entry = {
            "dataset_max_seqlen": self.max_segment,
            "max_samples_per_bin": self.max_segments,
            "packing_factor": round(self.segments / rows, 2) if rows else 0.0,
            "packing_efficiency": round(self.tokens / rows / row_tokens * 100, 2) if rows else 0.0,
            "pack_size": row_tokens,
            "min_packed_seqlen": self.min_row or 0,
        }
        return {f"{row_tokens}_metadata.jsonl": (json.dumps([entry]) + "\n").encode()}
