"""Packing policy `concat`: one token stream cut into fixed rows (the default).

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

from typing import Iterable, Iterator

import numpy as np

from ..records.conversation import TokenizedConversation
from ..records.origin import Origin
from .rows import Packing, PackStats
from ..records.row import Row



class _Segments:
    """Segment starts (stream offsets) with their conversation's origin."""

    def __init__(self):
        self.starts: list[int] = []
        self.origins: list[Origin] = []

    def add(self, start: int, conversation: TokenizedConversation) -> None:
        self.starts.append(start)
        self.origins.append(conversation.origin)

    def row(self, low: int, high: int) -> tuple[list[int], slice]:
        """Segments of stream range [low, high): the one covering low, then those starting inside."""
        first = int(np.searchsorted(self.starts, low, side="right")) - 1
        last = int(np.searchsorted(self.starts, high, side="left"))
        starts = [0] + [s - low for s in self.starts[first + 1:last]]
        return starts, slice(first, last)

    def drop_before(self, offset: int) -> None:
        """Forget segments that end before offset, rebasing the rest so offset becomes 0."""
        keep = max(int(np.searchsorted(self.starts, offset, side="right")) - 1, 0)
        self.origins = self.origins[keep:]
        self.starts = [s - offset for s in self.starts[keep:]]


def pack_rows(conversations: Iterable[TokenizedConversation], packing: Packing, stats: PackStats) -> Iterator[Row]:
    """Rows with at least one target token, in stream order; the caller stops when it has enough."""
    row_tokens, separator_id = packing.row_tokens, packing.separator_id
    separator_ids = np.array([separator_id], dtype=np.int32)
    separator_mask = np.zeros(1, dtype=np.int8)
    pieces_ids: list[np.ndarray] = []
    pieces_mask: list[np.ndarray] = []
    pending = 0  # tokens buffered, all of them after the last emitted row
    segments = _Segments()
    previous_last: int | None = None
    for conversation in conversations:
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
            starts, which = segments.row(low, low + row_tokens)
            row = Row(ids[low:low + row_tokens], row_mask, np.asarray(starts, dtype=np.int32),
                      tuple(segments.origins[which]), segments.starts[which.start] < low)
            if not row_mask.any():
                stats.count_skipped(row)
                continue
            stats.count_kept(row)
            yield row
        pieces_ids, pieces_mask = [ids[full:]], [mask[full:]]
        pending -= full
        segments.drop_before(full)
