"""The trainers' own reading code, transcribed in our words (no trainer is installed here), line for
line in behaviour, to check position by position what each would train on. Each function cites the
file and commit it transcribes. A "trained pair" is (row, i): token i of native row `row` is a label
that the trainer weights with a non-zero loss, predicted from the tokens before it.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.parquet as pq

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"
SLIME = "THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515"
TRL = "huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8"


# --- Megatron-Bridge: src/megatron/bridge/data/packing/parquet.py and gpt_sft.py (BRIDGE) ----------

BRIDGE_REQUIRED_COLUMNS = {"input_ids", "seq_start_id", "loss_mask"}  # parquet.py L49


def bridge_schema_check(path) -> int:
    """parquet.py _load_dataset L224-255: names only; a missing column or no rows is an error."""
    schema, metadata = pq.read_schema(path), pq.read_metadata(path)
    missing = BRIDGE_REQUIRED_COLUMNS - set(schema.names)
    if missing:
        raise ValueError(f"missing required columns: {missing}")
    if metadata.num_rows == 0:
        raise ValueError("Packed Parquet dataset is empty")
    return metadata.num_rows


def bridge_validate_row(idx, input_ids, loss_mask, seq_start_id) -> None:
    """parquet.py validate_row L261-291."""
    if len(loss_mask) != len(input_ids):
        raise ValueError(f"Row {idx}: loss_mask length != input_ids length")
    if not seq_start_id or seq_start_id[0] != 0:
        raise ValueError(f"Row {idx}: seq_start_id must start with 0")
    for i, start in enumerate(seq_start_id):
        if start >= len(input_ids):
            raise ValueError(f"Row {idx}: seq_start_id[{i}]={start} >= len(input_ids)")
        if i > 0 and start < seq_start_id[i - 1]:
            raise ValueError(f"Row {idx}: seq_start_id is not non-decreasing at index {i}")


def bridge_getitem(path, idx) -> dict:
    """parquet.py __getitem__ L404-461 (no samples_mapping, idx >= 0): the row group holding idx,
    its three columns as Python lists, seq_boundaries = seq_start_id + [len(input_ids)]."""
    parquet = pq.ParquetFile(path)
    offsets = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)])
    group = int(np.searchsorted(offsets, idx, side="right") - 1)
    table = parquet.read_row_group(group, columns=["input_ids", "seq_start_id", "loss_mask"])
    row = idx - offsets[group]
    input_ids = table.column("input_ids")[row].as_py()
    seq_start_id = table.column("seq_start_id")[row].as_py()
    loss_mask = table.column("loss_mask")[row].as_py()
    return {"input_ids": input_ids, "seq_boundaries": seq_start_id + [len(input_ids)], "loss_mask": loss_mask}


def bridge_build_loss_mask(item) -> np.ndarray:
    """gpt_sft.py _build_loss_mask L129-137, answer_only_loss=True (the builder's default)."""
    b = item["seq_boundaries"]
    return np.concatenate([item["loss_mask"][b[i]:b[i + 1] - 1] for i in range(len(b) - 1)])


def bridge_collate(batch, max_seq_length, eos_id, pad_to_max_length=False) -> dict:
    """gpt_sft.py collate_fn L151-292 (return_cu_seqlen, pad_seq_to_mult 1): per segment inputs
    ids[b:e-1], labels ids[b+1:e], the mask from _build_loss_mask; padded with EOS (ids, labels) and
    0 (mask) to max_seq_length with pad_to_max_length (L191-192), else to a multiple of 16
    (L193-198, datasets/gpt_sft.py L95 pad_seq_length_to_mult), asserting the runtime length fits."""
    def cut(item, lo, hi):
        b = item["seq_boundaries"]
        return np.concatenate([item["input_ids"][b[i] + lo:b[i + 1] + hi] for i in range(len(b) - 1)])
    tokens = [cut(item, 0, -1) for item in batch]
    labels = [cut(item, 1, 0) for item in batch]
    masks = [bridge_build_loss_mask(item) for item in batch]
    longest = max(len(t) for t in tokens)
    max_length = max_seq_length if pad_to_max_length else min(max_seq_length, -(-longest // 16) * 16)
    assert max_length <= max_seq_length and all(len(t) <= max_length for t in tokens)
    pad = lambda rows, value: np.array([np.pad(r, (0, max_length - len(r)), constant_values=value) for r in rows])
    return {"tokens": pad(tokens, eos_id), "labels": pad(labels, eos_id), "loss_mask": pad(masks, 0)}


def bridge_trained_pairs(path, row_tokens, eos_id, pad_to_max_length=False) -> set[tuple[int, int]]:
    """Every (row, native position of the label) the collated batches weight, one row per batch
    (micro_batch_size 1, as Bridge's packed SFT requires); the label's native position is recovered
    from the segment layout of the row."""
    trained = set()
    for row in range(bridge_schema_check(path)):
        item = bridge_getitem(path, row)
        bridge_validate_row(row, item["input_ids"], item["loss_mask"], item["seq_boundaries"][:-1])
        batch = bridge_collate([item], row_tokens, eos_id, pad_to_max_length)
        b = item["seq_boundaries"]
        label_positions = np.concatenate([np.arange(b[i] + 1, b[i + 1]) for i in range(len(b) - 1)])
        weighted = np.flatnonzero(batch["loss_mask"][0][:len(label_positions)])
        assert (batch["labels"][0][weighted] == np.asarray(item["input_ids"])[label_positions[weighted]]).all()
        trained |= {(row, int(p)) for p in label_positions[weighted]}
    return trained


# --- slime: slime/utils/data.py, slime/rollout/data_source.py, slime/ray/rollout.py,
#     slime/backends/megatron_utils/loss.py (SLIME) ------------------------------------------------

@dataclass
class SlimeSample:
    """slime/utils/types.py Sample: the fields the SFT path reads and writes."""
    prompt: Any = ""
    label: Any = None
    metadata: dict = field(default_factory=dict)
    multimodal_inputs: Any = None
    group_index: int | None = None
    index: int | None = None
    tokens: list = field(default_factory=list)
    response_length: int = 0
    reward: Any = None
    loss_mask: list | None = None
    remove_sample: bool = False


def slime_read_file(path):
    """data.py read_file L24-74, a .parquet path: ParquetFile.iter_batches, each batch to_pylist."""
    parquet = pq.ParquetFile(path)
    for batch in parquet.iter_batches():
        yield from batch.to_pylist()


class SlimeDataset:
    """data.py Dataset.__init__ L214-285 without a chat template, multimodal keys, tools or a label
    key: the prompt is data[prompt_key] as it is (a str stays a str), metadata = data[metadata_key] or {}."""

    def __init__(self, path, prompt_key="messages", metadata_key="metadata"):
        self.samples = [SlimeSample(prompt=data.get(prompt_key), metadata=data.get(metadata_key) or {})
                        for data in slime_read_file(path)]


class SlimeDataSource:
    """rollout/data_source.py RolloutDataSource.get_samples L90-118: the next n prompts, each as a
    group of n_samples_per_prompt deep copies with group_index and index set."""

    def __init__(self, dataset, n_samples_per_prompt=1):
        self.dataset, self.n, self.offset, self.group_index, self.index = dataset, n_samples_per_prompt, 0, 0, 0

    def get_samples(self, num_samples):
        prompts = self.dataset.samples[self.offset:self.offset + num_samples]
        self.offset += num_samples
        groups = []
        for prompt in prompts:
            group = []
            for _ in range(self.n):
                sample = copy.deepcopy(prompt)
                sample.group_index, sample.index = self.group_index, self.index
                self.index += 1
                group.append(sample)
            self.group_index += 1
            groups.append(group)
        return groups


def slime_trained_tokens(samples) -> list[list[int]]:
    """ray/rollout.py _convert_samples_to_train_data (flatten, assert len(loss_mask) == response_length)
    then loss.py get_responses L139-144 (cp_size 1): of a sample of L tokens and response R, the
    logits at L-R-1 .. L-2 score tokens[L-R:], weighted by loss_mask. Per sample, the positions of
    its tokens that carry a non-zero weight."""
    flat = list(itertools.chain.from_iterable(samples))
    trained = []
    for sample in flat:
        length, response = len(sample.tokens), sample.response_length
        assert len(sample.loss_mask) == response, "loss mask length != response length"
        assert 1 <= response <= length - 1, "the logits slice would start before the sample"
        trained.append([length - response + k for k, w in enumerate(sample.loss_mask) if w])
    return trained


# --- TRL: trl/trainer/sft_trainer.py DataCollatorForLanguageModeling (TRL); transformers 5.24.0
#     loss/loss_utils.py ForCausalLMLoss ----------------------------------------------------------

def trl_position_ids(batch_seq_lengths) -> list[np.ndarray]:
    """get_position_ids_from_packed_seq_lengths L510-534: 0.. restarting at every segment."""
    example_lengths = [sum(s) for s in batch_seq_lengths]
    flat = np.array([n for s in batch_seq_lengths for n in s])
    positions = np.ones(sum(example_lengths), dtype=np.int64)
    positions[0] = 0
    positions[np.cumsum(flat[:-1])] = -(flat[:-1] - 1)
    positions = np.cumsum(positions)
    return np.split(positions, np.cumsum(example_lengths)[:-1])


def trl_collate(examples) -> dict:
    """torch_call L462-507, padding_free=True, no pad_to_multiple_of: one flattened row; labels set
    to -100 where position_ids == 0."""
    position_ids = trl_position_ids([e["seq_lengths"] for e in examples])
    input_ids = np.concatenate([np.asarray(e["input_ids"]) for e in examples])
    labels = np.concatenate([np.asarray(e.get("labels", e["input_ids"])) for e in examples])
    position_ids = np.concatenate(position_ids)
    assert len(position_ids) == len(labels)
    labels = labels.copy()
    labels[position_ids == 0] = -100
    return {"input_ids": input_ids[None], "labels": labels[None], "position_ids": position_ids[None]}


def causal_lm_trained(labels) -> np.ndarray:
    """ForCausalLMLoss: labels padded by one -100 on the right, shift_labels = labels[..., 1:] scored
    against logits[..., :-1]; -100 ignored. The flat positions whose label is scored."""
    shifted = np.append(labels[0], -100)[1:]
    return np.flatnonzero(shifted != -100) + 1
