"""Preference rows in TRL's tokenized convention: a prompt shared by the pair, then each completion, with
a target mask TRL's collator does not have (huggingface/trl@f2cd5771, trl/trainer/dpo_trainer.py:
DataCollatorForPreference.torch_call L152-210 sets completion_mask to 1 on every token of `chosen_ids` /
`rejected_ids` and 0 on `prompt_ids`; _compute_loss L1343-1350 sums log p(token) over exactly those
tokens; kto_trainer.py's DataCollatorForUnpairedPreference L165-210 does the same for `completion_ids`).

A native completion is the tokens after the prompt with a target mask by the SFT rule. It becomes:
- its untrained tokens before the first target (the assistant header after the generation prompt)
  move to the end of the prompt when the pair's completions begin with the same ones (TRL has one
  prompt for both); when they differ they stay in the completions, untrained in the mask;
- the tokens from there to its last target: TRL's completion, and `*_target_mask` (1 = target) beside
  it, all ones unless the completion holds untrained tokens between targets (a tool result, a user
  turn: a multi-turn completion), which the export's collator (trl_preference.py) keeps untrained;
- its untrained tokens after the last target (what the template writes after the end of turn) are
  left out and counted: no target follows them, so no trained log-probability depends on them.
Where every mask is all ones, TRL's own collator trains exactly the targets too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import BuildError

# The native preference row file's columns (rowfile/preference.py, data/README.md "The preference row file").
ID, PROMPT, LABEL = "id", "prompt_input_ids", "label"
SIDES = {"chosen": ("chosen_input_ids", "chosen_loss_mask"), "rejected": ("rejected_input_ids", "rejected_loss_mask"),
         "completion": ("completion_input_ids", "completion_loss_mask")}

IDS, MASK = pa.list_(pa.int32()), pa.list_(pa.int8())
DPO_SCHEMA = pa.schema([("id", pa.string()), ("prompt_ids", IDS), ("chosen_ids", IDS), ("rejected_ids", IDS),
                        ("chosen_target_mask", MASK), ("rejected_target_mask", MASK)])
KTO_SCHEMA = pa.schema([("id", pa.string()), ("prompt_ids", IDS), ("completion_ids", IDS), ("label", pa.bool_()),
                        ("completion_target_mask", MASK)])


@dataclass(frozen=True)
class Cut:
    """One native completion and where its targets lie: [lead, end) holds them all."""
    ids: np.ndarray
    mask: np.ndarray
    lead: int  # untrained tokens before the first target
    end: int  # one past the last target; ids[end:] is the untrained tail, left out

    @property
    def head(self) -> np.ndarray:
        return self.ids[:self.lead]

    @property
    def tail(self) -> int:
        return len(self.ids) - self.end


def cut(ids: np.ndarray, mask: np.ndarray, where: str) -> Cut:
    """`ids` and where its targets (`mask`) begin and end; `where` names the row, id and side for a refusal."""
    targets = np.flatnonzero(mask)
    if not targets.size:
        raise BuildError(f"{where}: refused: the completion has no target, so TRL would train nothing on it "
                         "(a pair the build should have dropped)")
    return Cut(ids, mask, int(targets[0]), int(targets[-1]) + 1)


def _rows(table: pa.Table, *names: str) -> list[list[np.ndarray]]:
    """Each named list column as a list of numpy rows (one flatten per column, slices after)."""
    columns = []
    for name in names:
        array = table.column(name).combine_chunks()
        offsets, values = array.offsets.to_numpy(), array.flatten().to_numpy(zero_copy_only=False)
        columns.append([values[a:b] for a, b in zip(offsets[:-1], offsets[1:])])
    return columns


def _lists(rows: list[np.ndarray], kind: pa.ListType) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
    value = kind.value_type.to_pandas_dtype()
    values = np.concatenate(rows).astype(value) if rows else np.zeros(0, value)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=kind.value_type))


def _completions(prompt: np.ndarray, cuts: list[Cut]) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], int]:
    """(prompt ids, each completion's ids and target mask, tail tokens left out) for the completions of
    one prompt: their common untrained head moves to the prompt when they all begin with the same one."""
    shared = all(np.array_equal(c.head, cuts[0].head) for c in cuts)
    starts = [c.lead if shared else 0 for c in cuts]
    return (np.concatenate([prompt, cuts[0].head]) if shared else prompt,
            [c.ids[s:c.end] for c, s in zip(cuts, starts)], [c.mask[s:c.end] for c, s in zip(cuts, starts)],
            sum(c.tail for c in cuts))


def dpo_table(table: pa.Table, first_row: int, source: str) -> tuple[pa.Table, int]:
    """Native pairs (rows first_row.. of `source`) in DPOTrainer's columns; and the untrained tail
    tokens left out."""
    ids = table.column(ID).to_pylist()
    prompts, *sides = _rows(table, PROMPT, *SIDES["chosen"], *SIDES["rejected"])
    out: dict[str, list[np.ndarray]] = {name: [] for name in DPO_SCHEMA.names[1:]}
    tail = 0
    for r, name in enumerate(ids):
        where = f"{source}: row {first_row + r} (id {name})"
        cuts = [cut(sides[0][r], sides[1][r], f"{where}, chosen"), cut(sides[2][r], sides[3][r], f"{where}, rejected")]
        prompt, completions, masks, dropped = _completions(prompts[r], cuts)
        for column, value in zip(out, (prompt, *completions, *masks)):
            out[column].append(value)
        tail += dropped
    arrays = [_lists(out[field.name], field.type) for field in list(DPO_SCHEMA)[1:]]
    return pa.Table.from_arrays([pa.array(ids, pa.string()), *arrays], schema=DPO_SCHEMA), tail


def kto_table(table: pa.Table, first_row: int, source: str) -> tuple[pa.Table, int]:
    """Native unpaired rows in KTOTrainer's columns; and the untrained tail tokens left out."""
    ids = table.column(ID).to_pylist()
    prompts, completions, masks = _rows(table, PROMPT, *SIDES["completion"])
    out: dict[str, list[np.ndarray]] = {"prompt_ids": [], "completion_ids": [], "completion_target_mask": []}
    tail = 0
    for r, name in enumerate(ids):
        one = cut(completions[r], masks[r], f"{source}: row {first_row + r} (id {name}), completion")
        prompt, (completion,), (mask,), dropped = _completions(prompts[r], [one])
        for column, value in zip(out, (prompt, completion, mask)):
            out[column].append(value)
        tail += dropped
    return pa.Table.from_arrays([pa.array(ids, pa.string()), _lists(out["prompt_ids"], IDS),
                                 _lists(out["completion_ids"], IDS), table.column(LABEL).combine_chunks().cast(pa.bool_()),
                                 _lists(out["completion_target_mask"], MASK)], schema=KTO_SCHEMA), tail
