"""Pack stage: one token stream cut into fixed rows.

Conversations follow each other in permutation order with exactly one separator token between
consecutive ones: the inserted separator is never a target; a conversation whose render already
ends with the separator token supplies it itself (and keeps its own mask there). The separator
belongs to the conversation before it. A conversation that renders to no token at all is left out
(no separator, no segment) and counted. The stream is cut into consecutive rows of exactly
`row_tokens` tokens (no padding; a conversation longer than a row continues in the next); a row
with no target token is skipped and counted. Each row's segments (seq_start_id) are the places
where a conversation, or the continuation of one, starts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

from ..encode.encoder import TokenizedConversation


@dataclass(frozen=True)
class Row:
    input_ids: np.ndarray  # int32, row_tokens long
    loss_mask: np.ndarray  # int8
    seq_start_id: np.ndarray  # int32, starts with 0, increasing
    conversation_ids: tuple[str, ...]  # one per segment: whose tokens start at seq_start_id[k]
    sources: tuple[str, ...]  # the source of each segment's conversation
    continues: bool  # its first segment's conversation began in an earlier row (kept or skipped)


@dataclass
class PackStats:
    conversations_read: int = 0
    empty_renders: int = 0  # conversations the template rendered to no token: left out
    empty_assistant_turns: int = 0  # in the conversations read
    separators_inserted: int = 0
    rows_kept: int = 0
    rows_skipped_unsupervised: int = 0
    tokens_kept: int = 0
    supervised_tokens_kept: int = 0
    conversations_by_source: Counter = field(default_factory=Counter)  # with tokens in kept rows
    tokens_by_source: Counter = field(default_factory=Counter)  # tokens in kept rows
    continued_rows: list[int] = field(default_factory=list)  # kept rows whose Row.continues
    _last_counted: int = -1

    def count_kept(self, row: Row, positions: np.ndarray) -> None:
        if row.continues:
            self.continued_rows.append(self.rows_kept)
        self.rows_kept += 1
        self.tokens_kept += len(row.input_ids)
        self.supervised_tokens_kept += int(row.loss_mask.sum(dtype=np.int64))
        lengths = np.diff(np.append(row.seq_start_id, len(row.input_ids)))
        for source, length, position in zip(row.sources, lengths, positions):
            self.tokens_by_source[source] += int(length)
            if position > self._last_counted:  # a conversation spanning rows counts once
                self.conversations_by_source[source] += 1
                self._last_counted = int(position)


class _Segments:
    """Segment starts (stream offsets) with their conversation's id, source and stream position."""

    def __init__(self):
        self.starts: list[int] = []
        self.ids: list[str] = []
        self.sources: list[str] = []
        self.positions: list[int] = []

    def add(self, start: int, conversation: TokenizedConversation) -> None:
        self.starts.append(start)
        self.ids.append(conversation.id)
        self.sources.append(conversation.source)
        self.positions.append(conversation.position)

    def row(self, low: int, high: int) -> tuple[list[int], slice]:
        """Segments of stream range [low, high): the one covering low, then those starting inside."""
        first = int(np.searchsorted(self.starts, low, side="right")) - 1
        last = int(np.searchsorted(self.starts, high, side="left"))
        starts = [0] + [s - low for s in self.starts[first + 1:last]]
        return starts, slice(first, last)

    def drop_before(self, offset: int) -> None:
        """Forget segments that end before offset, rebasing the rest so offset becomes 0."""
        keep = max(int(np.searchsorted(self.starts, offset, side="right")) - 1, 0)
        for name in ("ids", "sources", "positions"):
            setattr(self, name, getattr(self, name)[keep:])
        self.starts = [s - offset for s in self.starts[keep:]]


def pack_rows(conversations: Iterable[TokenizedConversation], row_tokens: int, separator_id: int,
              stats: PackStats) -> Iterator[Row]:
    """Rows with at least one target token, in stream order; the caller stops when it has enough."""
    separator_ids = np.array([separator_id], dtype=np.int32)
    separator_mask = np.zeros(1, dtype=np.int8)
    pieces_ids: list[np.ndarray] = []
    pieces_mask: list[np.ndarray] = []
    pending = 0  # tokens buffered, all of them after the last emitted row
    segments = _Segments()
    previous_last: int | None = None
    for conversation in conversations:
        if not len(conversation.input_ids):
            stats.empty_renders += 1
            continue
        stats.conversations_read += 1
        stats.empty_assistant_turns += conversation.empty_assistant_turns
        if previous_last is not None and previous_last != separator_id:
            pieces_ids.append(separator_ids)
            pieces_mask.append(separator_mask)
            pending += 1
            stats.separators_inserted += 1
        segments.add(pending, conversation)
        pieces_ids.append(conversation.input_ids)
        pieces_mask.append(conversation.loss_mask)
        pending += len(conversation.input_ids)
        previous_last = int(conversation.input_ids[-1])
        if pending < row_tokens:
            continue
        ids, mask = np.concatenate(pieces_ids), np.concatenate(pieces_mask)
        full = pending // row_tokens * row_tokens
        for low in range(0, full, row_tokens):
            row_mask = mask[low:low + row_tokens]
            if not row_mask.any():
                stats.rows_skipped_unsupervised += 1
                continue
            starts, which = segments.row(low, low + row_tokens)
            row = Row(ids[low:low + row_tokens], row_mask, np.asarray(starts, dtype=np.int32),
                      tuple(segments.ids[which]), tuple(segments.sources[which]), segments.starts[which.start] < low)
            stats.count_kept(row, np.asarray(segments.positions[which]))
            yield row
        pieces_ids, pieces_mask = [ids[full:]], [mask[full:]]
        pending -= full
        segments.drop_before(full)
