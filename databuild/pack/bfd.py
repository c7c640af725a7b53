"""Packing policy `bfd`: whole conversations assigned to rows by best-fit decreasing, rows padded.

The rule, precisely enough to re-implement (tests/test_pack_bfd.py does, without databuild):

1. Items. Each conversation of the stream (those that render to no token already left out) becomes
   one item: its tokens, then the separator (mask 0), unless its tokens already end with the separator. An item longer than `row_tokens` is overlong:
   `drop` leaves it out, `truncate` keeps its first `row_tokens` tokens (the rest, separator
   included, is lost), `error` stops the build naming it.
2. Windows. The stream is taken `window` conversations at a time (overlong ones included in the
   count), in permutation order; the last window holds what is left. Each window is packed alone.
3. Best-fit decreasing. The window's items are taken longest first (equal lengths in stream
   order). Each goes into the open row with the least free space that still holds it; among rows
   with that same free space, the one that has had it longest. If no open row holds it, a new row
   is opened. (This is TRL's `pack_dataset(strategy="bfd")` rule on one `datasets.map` batch.)
4. Rows. Rows are emitted in the order they were opened, window after window. A row's segments
   are its items in the order they went in; a row with free space left ends with one more segment,
   conversation id "", holding `free` pad tokens, mask 0. A row with no target is skipped and counted.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict, deque
from typing import Iterable, Iterator

import numpy as np

from ..records.conversation import TokenizedConversation
from ..errors import BuildError
from ..records.row import PADDING, Row
from .rows import Packing, PackStats


OVERLONG_COUNTS = {"drop": "dropped", "truncate": "truncated"}


class OverlongConversation(BuildError):
    """A conversation longer than a row under `overlong: error`; the build names where it comes from."""

    def __init__(self, conversation: TokenizedConversation, length: int, row_tokens: int):
        super().__init__(f"{length} tokens with its separator, longer than a row ({row_tokens})")
        self.conversation = conversation


def _item(conversation: TokenizedConversation, packing: Packing,
          stats: PackStats) -> tuple[np.ndarray, np.ndarray] | None:
    ids, mask = conversation.input_ids, conversation.loss_mask
    if ids[-1] != packing.separator_id:  # never empty: the policy interface leaves empty renders out
        ids = np.append(ids, np.int32(packing.separator_id)).astype(np.int32, copy=False)
        mask = np.append(mask, np.int8(0)).astype(np.int8, copy=False)
        stats.separators_inserted += 1
    if len(ids) <= packing.row_tokens:
        return ids, mask
    if packing.overlong == "error":
        raise OverlongConversation(conversation, len(ids), packing.row_tokens)
    stats.overlong[OVERLONG_COUNTS[packing.overlong]] += 1
    if packing.overlong == "drop":
        stats.overlong_dropped_rows[conversation.origin.position] = conversation.origin.index
    return (ids[:packing.row_tokens], mask[:packing.row_tokens]) if packing.overlong == "truncate" else None


def best_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins (lists of item indices, in the order they went in) in the order they were opened."""
    bins: list[list[int]] = []
    free_values: list[int] = []  # the distinct free spaces > 0 of open bins, sorted
    with_free: dict[int, deque[int]] = defaultdict(deque)  # free space -> bins, in the order they got it
    for item in sorted(range(len(lengths)), key=lambda i: -lengths[i]):  # stable: ties in stream order
        length = lengths[item]
        at = bisect_left(free_values, length)
        if at < len(free_values):
            free = free_values[at]
            chosen = with_free[free].popleft()
            if not with_free[free]:
                del free_values[at]
        else:
            free, chosen = capacity, len(bins)
            bins.append([])
        bins[chosen].append(item)
        left = free - length
        if left:
            if not with_free[left]:
                insort(free_values, left)
            with_free[left].append(chosen)
    return bins


def _rows(window: list[tuple[TokenizedConversation, np.ndarray, np.ndarray]], packing: Packing,
          stats: PackStats) -> Iterator[Row]:
    row_tokens = packing.row_tokens
    for members in best_fit_decreasing([len(ids) for _, ids, _ in window], row_tokens):
        parts = [window[i] for i in members]
        lengths = [len(ids) for _, ids, _ in parts]
        used = sum(lengths)
        ids = [p[1] for p in parts]
        mask = [p[2] for p in parts]
        origins = tuple(c.origin for c, _, _ in parts)
        starts = np.cumsum([0] + lengths[:-1])
        if used < row_tokens:
            ids.append(np.full(row_tokens - used, packing.pad_id, dtype=np.int32))
            mask.append(np.zeros(row_tokens - used, dtype=np.int8))
            starts = np.append(starts, used)
            origins += (PADDING,)
        row_mask = np.concatenate(mask)
        row = Row(np.concatenate(ids), row_mask, starts.astype(np.int32), origins, False)
        if not row_mask.any():
            stats.count_skipped(row)
            continue
        stats.count_kept(row)
        yield row


def pack_rows(conversations: Iterable[TokenizedConversation], packing: Packing, stats: PackStats) -> Iterator[Row]:
    """Rows with at least one target token, window by window; the caller stops when it has enough."""
    window, taken = [], 0
    for conversation in conversations:
        taken += 1
        item = _item(conversation, packing, stats)
        if item is not None:
            window.append((conversation, *item))
        if taken == packing.window:
            yield from _rows(window, packing, stats)
            window, taken = [], 0
    yield from _rows(window, packing, stats)
