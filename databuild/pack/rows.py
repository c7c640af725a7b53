"""What every packing policy takes and counts: its settings (`Packing`) and the tallies the manifest
reports (`PackStats`); the rows it yields are records.row.Row."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..records.row import PADDING_ID, Row

@dataclass(frozen=True)
class Packing:
    """What a policy needs: the row length, the separator, and for padding policies the pad token,
    the window and what to do with a conversation longer than a row."""
    policy: str
    row_tokens: int
    separator: str
    separator_id: int
    pad: str | None = None
    pad_id: int | None = None
    pad_from: str | None = None  # where the pad token came from: "config", "tokenizer" or "separator"
    window: int | None = None
    overlong: str | None = None

    def record(self) -> dict:
        """The manifest's `build.packing`: everything that decides the rows beyond the stream."""
        if self.policy == "concat":
            return {"policy": self.policy}
        return {"policy": self.policy, "window": self.window, "overlong": self.overlong,
                "pad": {"token": self.pad, "id": self.pad_id, "from": self.pad_from}}


@dataclass
class PackStats:
    conversations_read: int = 0  # conversations handed to the policy (an expanded one once, not per sample)
    empty_assistant_turns: int = 0  # in the conversations passed to the policy
    unclosed_turns: int = 0  # in them: turns the render ends in before any stop token
    prompt_tokens_differ: int = 0  # in them: turns whose prompt, tokenized alone, is not a prefix of the row
    separators_inserted: int = 0
    rows_kept: int = 0
    rows_skipped_unsupervised: int = 0
    tokens_kept: int = 0
    supervised_tokens_kept: int = 0
    padding_tokens: int = 0  # tokens of padding segments in kept rows
    overlong: Counter = field(default_factory=Counter)  # conversations longer than a row, by what was done
    conversations_by_source: Counter = field(default_factory=Counter)  # with tokens in kept rows, each once
    history_expanded: Counter = field(default_factory=Counter)  # by source: conversations expanded (history)
    expanded_samples: Counter = field(default_factory=Counter)  # by source: the samples they gave
    turns_not_trained: int = 0  # in the conversations passed to the policy: turns train_turns leaves out
    samples_not_written: int = 0  # expanded samples left out, their turn not trained (train_turns)
    tokens_by_source: Counter = field(default_factory=Counter)  # tokens in kept rows, padding excluded
    continued_rows: list[int] = field(default_factory=list)  # kept rows whose Row.continues
    repeated_ids: int = 0  # conversations in kept rows whose id one before them there has (data/README)
    ids_kept: set[str] = field(default_factory=set)  # the ids in kept rows, for repeated_ids
    # For the funnel (publish/funnel.py), each conversation's source row (Origin.index) by its stream position
    # (one per conversation of the stream, each repeat of an upsampled row its own), recorded as the packer
    # meets it, so the funnel counts them by source without drawing the permutation again: the conversations
    # left out as empty renders or dropped as overlong, and those with a token in a kept row, or in a row
    # skipped without a target.
    empty_render_rows: list[int] = field(default_factory=list)
    overlong_dropped_rows: dict[int, int] = field(default_factory=dict)
    kept_rows: dict[int, int] = field(default_factory=dict)
    skipped_rows: dict[int, int] = field(default_factory=dict)

    @property
    def empty_renders(self) -> int:
        """Conversations the template rendered to no token: left out of the stream."""
        return len(self.empty_render_rows)

    def count_skipped(self, row: Row) -> None:
        """Tally a row skipped for having no target."""
        self.rows_skipped_unsupervised += 1
        self.skipped_rows.update((o.position, o.index) for o in row.origins if o.position >= 0)

    def count_kept(self, row: Row) -> None:
        """Tally a kept row. A conversation counts once, by its stream position, in the first kept row that
        holds it: one spanning rows, or expanded into samples by the history policy, is one; each repeat of
        an upsampled row is one of its own (its stream position)."""
        if row.continues:
            self.continued_rows.append(self.rows_kept)
        self.rows_kept += 1
        self.tokens_kept += len(row.input_ids)
        self.supervised_tokens_kept += int(np.count_nonzero(row.loss_mask))  # a mask is 0 or 1 (verify checks)
        # a row's few segments: their lengths in Python, cheaper than numpy's calls on arrays this small
        starts = row.seq_start_id.tolist()
        lengths = [end - start for start, end in zip(starts, starts[1:] + [len(row.input_ids)])]
        for origin, length in zip(row.origins, lengths):
            if origin.id == PADDING_ID:
                self.padding_tokens += length
                continue
            self.tokens_by_source[origin.source] += length
            if origin.position not in self.kept_rows:
                self.kept_rows[origin.position] = origin.index
                self.conversations_by_source[origin.source] += 1
                self.repeated_ids += origin.id in self.ids_kept
                self.ids_kept.add(origin.id)
