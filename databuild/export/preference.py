"""Preference rows in TRL's tokenized convention: a prompt shared by the pair, then each completion as
the tokens TRL trains, every one of them (huggingface/trl@f2cd5771, trl/trainer/dpo_trainer.py:
DataCollatorForPreference.torch_call L152-210 sets completion_mask to 1 on every token of
`chosen_ids` / `rejected_ids` and 0 on `prompt_ids`; _compute_loss L1343-1350 sums log p(token)
over exactly those tokens. kto_trainer.py's DataCollatorForUnpairedPreference L165-210 does the
same for `completion_ids`).

A native completion is the tokens after the prompt with a target mask by the SFT rule. It becomes:
- its untrained tokens before the first target (an assistant header the prompt's render stops short
  of) move to the end of the prompt: a pair's two completions must begin with the same ones, since
  TRL has one prompt for both;
- the tokens from its first target to its last, all targets: TRL's completion;
- its untrained tokens after the last target (what the template writes after the end of turn) are
  left out and counted: no target follows them, so no trained log-probability depends on them.
A completion with an untrained token between two targets (a tool result, a user turn: a multi-turn
completion) cannot be written so that TRL trains its targets alone, and is refused in one line naming
the row and id: TRL would train that token as if the model had written it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import BuildError

# The native preference row file's columns (databuild/rowfile, data/README.md "Preference rows").
ID, PROMPT, LABEL = "id", "prompt_input_ids", "label"
SIDES = {"chosen": ("chosen_input_ids", "chosen_loss_mask"), "rejected": ("rejected_input_ids", "rejected_loss_mask"),
         "completion": ("completion_input_ids", "completion_loss_mask")}

DPO_SCHEMA = pa.schema([("id", pa.string()), ("prompt_ids", pa.list_(pa.int32())),
                        ("chosen_ids", pa.list_(pa.int32())), ("rejected_ids", pa.list_(pa.int32()))])
KTO_SCHEMA = pa.schema([("id", pa.string()), ("prompt_ids", pa.list_(pa.int32())),
                        ("completion_ids", pa.list_(pa.int32())), ("label", pa.bool_())])


@dataclass(frozen=True)
class Cut:
    """One native completion cut at its targets: [lead, end) is what TRL trains."""
    ids: np.ndarray
    lead: int  # untrained tokens before the first target: they join the prompt
    end: int  # one past the last target; ids[end:] is the untrained tail, left out

    @property
    def head(self) -> np.ndarray:
        return self.ids[:self.lead]

    @property
    def trained(self) -> np.ndarray:
        return self.ids[self.lead:self.end]

    @property
    def tail(self) -> int:
        return len(self.ids) - self.end


def cut(ids: np.ndarray, mask: np.ndarray, where: str) -> Cut:
    """`ids` cut at its targets (`mask`); `where` names the row, id and side for a refusal."""
    targets = np.flatnonzero(mask)
    if not targets.size:
        raise BuildError(f"{where}: refused: the completion has no target, so TRL would train nothing on it "
                         "(a pair the build should have dropped)")
    lead, end = int(targets[0]), int(targets[-1]) + 1
    if targets.size != end - lead:
        gap = lead + int(np.flatnonzero(mask[lead:end] == 0)[0])
        raise BuildError(f"{where}: refused: token {gap} of the completion is not a target but lies between "
                         "targets (a tool result or another turn), and TRL trains every token of a completion "
                         "(trl/trainer/dpo_trainer.py DataCollatorForPreference); nothing was written")
    return Cut(ids, lead, end)


def _rows(table: pa.Table, *names: str) -> list[list[np.ndarray]]:
    """Each named list column as a list of numpy rows (one flatten per column, slices after)."""
    columns = []
    for name in names:
        array = table.column(name).combine_chunks()
        offsets, values = array.offsets.to_numpy(), array.flatten().to_numpy(zero_copy_only=False)
        columns.append([values[a:b] for a, b in zip(offsets[:-1], offsets[1:])])
    return columns


def _ids(rows: list[np.ndarray]) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32)
    values = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.int32()))


def dpo_table(table: pa.Table, first_row: int, source: str) -> tuple[pa.Table, int]:
    """Native pairs (rows first_row.. of `source`) in DPOTrainer's columns; and the untrained tail
    tokens left out."""
    ids = table.column(ID).to_pylist()
    prompts, chosen, chosen_mask, rejected, rejected_mask = _rows(table, PROMPT, *SIDES["chosen"], *SIDES["rejected"])
    out: dict[str, list[np.ndarray]] = {"prompt_ids": [], "chosen_ids": [], "rejected_ids": []}
    tail = 0
    for r, name in enumerate(ids):
        where = f"{source}: row {first_row + r} (id {name})"
        pair = cut(chosen[r], chosen_mask[r], f"{where}, chosen"), cut(rejected[r], rejected_mask[r], f"{where}, rejected")
        if not np.array_equal(pair[0].head, pair[1].head):
            raise BuildError(f"{where}: refused: the chosen and the rejected completion begin with different untrained "
                             f"tokens ({pair[0].lead} and {pair[1].lead} before their first targets), and TRL has one "
                             "prompt for both; nothing was written")
        out["prompt_ids"].append(np.concatenate([prompts[r], pair[0].head]))
        out["chosen_ids"].append(pair[0].trained)
        out["rejected_ids"].append(pair[1].trained)
        tail += pair[0].tail + pair[1].tail
    return pa.Table.from_arrays([pa.array(ids, pa.string()), *map(_ids, out.values())], schema=DPO_SCHEMA), tail


def kto_table(table: pa.Table, first_row: int, source: str) -> tuple[pa.Table, int]:
    """Native unpaired rows in KTOTrainer's columns; and the untrained tail tokens left out."""
    ids = table.column(ID).to_pylist()
    prompts, completions, masks = _rows(table, PROMPT, *SIDES["completion"])
    prompt_ids, completion_ids, tail = [], [], 0
    for r, name in enumerate(ids):
        one = cut(completions[r], masks[r], f"{source}: row {first_row + r} (id {name}), completion")
        prompt_ids.append(np.concatenate([prompts[r], one.head]))
        completion_ids.append(one.trained)
        tail += one.tail
    return pa.Table.from_arrays([pa.array(ids, pa.string()), _ids(prompt_ids), _ids(completion_ids),
                                 table.column(LABEL).combine_chunks().cast(pa.bool_())], schema=KTO_SCHEMA), tail
