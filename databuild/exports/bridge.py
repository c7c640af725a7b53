"""megatron-bridge: rows for Megatron-Bridge's packed-parquet dataset (GPTSFTPackedParquetDataset).

Bridge's convention (NVIDIA-NeMo/Megatron-Bridge, src/megatron/bridge/data/packing/): its writer
(algorithms.py, fill_packing_strategy) stores each sequence's token-aligned mask rolled left by one,
and its collate (gpt_sft.py, collate_fn with _build_loss_mask, answer_only_loss=True) trains, for
each segment [b, e) of seq_start_id + [len(input_ids)], inputs ids[b:e-1] on labels ids[b+1:e]
weighted by loss_mask[b:e-1]. So the stored loss_mask[j] says whether ids[j+1] is a target:
stored[j] = native[j+1] inside a segment, 0 on its last token (never read). A native target on a
segment's first token has no position to be labelled from: counted as `target_at_segment_start`.

Padding segments are dropped (the row ends where its padding began): Bridge pads at collate time.
Beside the rows go the packing metadata Bridge reads when `pad_cu_seqlens` is on (`OUT.metadata.jsonl`,
named after the export: one JSON array with one entry of the fields create_packing_strategy writes)
and the configuration that reads them, checked in tests/support/trainer_configs.py against Bridge's own
validation (NVIDIA-NeMo/Megatron-Bridge@067f987d): `OUT.bridge.yaml`, overrides merged into a
finetuning recipe's ConfigContainer (an example finetune script's `--config-file`, or
`process_config_with_overrides`), and `OUT.bridge.py`, the same settings as Python constructor calls.
What they settle and why:
- `dataset_root` (one source is required, builders/gpt_sft.py:138-141) is OUT's directory, and
  every path Bridge would otherwise derive under it (`packed/<tokenizer>_pad_seq_to_mult..._sft_<hash>/`,
  :802-885) is given: the train file, the metadata file. The hf_* sources of a recipe are cleared
  (:142-155); `do_validation` and `do_test` are off, or rank 0 packs `dataset_root/validation.jsonl`
  and appends to the metadata file (:622-635).
- `enable_offline_packing` with `offline_packing_specs` (:194-199, training/config.py:1276-1281),
  `packed_sequence_size` = `seq_length` = `model.seq_length` = row_tokens (config.py:1642-1648), and
  `micro_batch_size` 1 (config.py:1600-1617).
- `pad_seq_to_mult` 1, so `context_parallel_size` 1 and no sequence parallelism: the segments are not
  padded to a multiple (recipe_runner.py:430-468 raises it to lcm(2*CP, CP*TP with SP) otherwise,
  and collate then cuts each segment's trailing EOS tokens from its logical length, gpt_sft.py:226-233).
- `dataset_kwargs.pad_to_max_length` true: every batch `row_tokens` wide, as pipeline and expert
  parallelism need (config.py:1347-1352) and `pad_cu_seqlens` requires (packing/gpt_sft.py:79-81).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from .recipe_text import absolute, comment, python_call, yaml_text
from ..rowfile.read import RowBlock
from .rows import list_array
from .stream import SEGMENT_START_WHY, Format, export_stem

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987d"
SPECS_CLASS = "megatron.bridge.data.packing.PackedSequenceSpecs"

SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
                    ("seq_start_id", pa.list_(pa.int32()))])


def bridge_mask(block: RowBlock) -> np.ndarray:
    """The stored mask: each target moved onto the token before it, within its segment."""
    starts = block.segment_starts
    stored = np.zeros_like(block.loss_mask)
    stored[:, :-1] = block.loss_mask[:, 1:] * ~starts[:, 1:]
    return stored


class BridgeFormat(Format):
    name = "megatron-bridge"
    schema = SCHEMA
    convention = ("Megatron-Bridge stored convention: loss_mask[j] = 1 means ids[j+1] is a target "
                  "(rolled left by one within each segment; 0 on a segment's last token)")
    why = {"target_at_segment_start": f"{SEGMENT_START_WHY} (its cu_seqlens)"}

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

    def sidecars(self, out: Path, row_tokens: int, rows: int) -> dict[str, bytes]:
        entry = {
            "dataset_max_seqlen": self.max_segment,
            "max_samples_per_bin": self.max_segments,
            "packing_factor": round(self.segments / rows, 2) if rows else 0.0,
            "packing_efficiency": round(self.tokens / rows / row_tokens * 100, 2) if rows else 0.0,
            "pack_size": row_tokens,
            "min_packed_seqlen": self.min_row or 0,
        }
        return {metadata_name(out): (json.dumps([entry]) + "\n").encode()}

    def trainer_config(self, out: Path, row_tokens: int, rows: int, validation: Path | None = None) -> dict[str, str]:
        specs = {
            "packed_sequence_size": row_tokens,
            "packed_train_data_path": absolute(out),
            **({"packed_val_data_path": absolute(validation)} if validation is not None else {}),
            "packed_metadata_path": absolute(Path(out).with_name(metadata_name(out))),
            "pad_seq_to_mult": 1,
            "pad_cu_seqlens": False,
        }
        dataset = {
            "seq_length": row_tokens,
            "dataset_root": absolute(Path(out).parent),
            "enable_offline_packing": True,
            "offline_packing_specs": specs,
            "dataset_kwargs": {"pad_to_max_length": True},
            "do_validation": validation is not None,
            "do_test": False,
        }
        model = {"seq_length": row_tokens, "context_parallel_size": 1, "sequence_parallel": False}
        header = [f"Megatron-Bridge ({BRIDGE}) settings that read {absolute(out)} as packed SFT rows",
                  f"({rows} rows of at most {row_tokens} tokens), written by `databuild export --to megatron-bridge`.",
                  "The export supports neither context parallelism nor sequence parallelism (pad_seq_to_mult 1);",
                  "pad_cu_seqlens (for CUDA graphs) may be set true: the metadata file is there for it."]
        # `_target_` builds the specs whole, also over a recipe whose packing is off (specs None):
        # omegaconf_utils.py _apply_overrides L478-489 instantiates a mapping that names its class.
        overrides = {"dataset": {**dataset, "offline_packing_specs": {"_target_": SPECS_CLASS, **specs},
                                 **CLEARED_SOURCES},
                     "model": model, "train": {"micro_batch_size": 1}}
        call = python_call("GPTSFTDatasetConfig", {**dataset, "offline_packing_specs": ("PackedSequenceSpecs", specs)}, 4)
        python = (comment(header) + "from megatron.bridge.data.builders import GPTSFTDatasetConfig\n"
                  "from megatron.bridge.data.packing import PackedSequenceSpecs\n\n\n"
                  "def use_databuild_export(cfg):\n"
                  '    """Point a finetuning ConfigContainer at the export; returns it."""\n'
                  f"    cfg.dataset = {call}\n"
                  + "".join(f"    cfg.model.{key} = {value!r}\n" for key, value in model.items())
                  + "    cfg.train.micro_batch_size = 1\n    return cfg\n")
        stem = export_stem(out)
        return {f"{stem}.bridge.yaml": yaml_text(header, overrides), f"{stem}.bridge.py": python}


# A recipe's own dataset source, cleared when the overrides are merged into it: exactly one source
# may be set, and dataset_root admits none of the Hugging Face split settings (gpt_sft.py:136-155).
CLEARED_SOURCES = {"hf_dataset": None, "hf_validation_dataset": None, "hf_test_dataset": None,
                   "hf_output_root": None, "hf_validation_proportion": None, "hf_rewrite": False}


def metadata_name(out: Path) -> str:
    return f"{export_stem(out)}.metadata.jsonl"
