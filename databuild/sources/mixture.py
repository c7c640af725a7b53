"""The mixed source: each configured source's selected rows (`take`), concatenated in config order,
and where each of them lands in the stream.

A source of n rows with `take` k (a count, or floor(fraction * n) on the decimal the config writes)
contributes, with q, r = divmod(k, n), every row q times and then the rows
`numpy.random.default_rng([seed, 1]).permutation(n)[:r]` once more, all sorted: which rows depends on
the build's seed and n alone (not on the other sources, their order, or the workers), a larger take
of the same source keeps every row of a smaller one, taking every row is the identity, and a take
above n upsamples as open-instruct's mixer does (whole repeats, then a seeded remainder). The one
global permutation (`permute.permutation`) then runs over the mixed rows, repeats included, so each
repeat has a stream position of its own, and a source split into two entries, in order, builds the
same stream as the whole.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import numpy as np

from ..errors import BuildError
from .permute import inverse_permutation, permutation

T = TypeVar("T")  # a tokenized conversation (records.conversation), read for its origin and part

MAX_TAKE = 2**32  # rows one take may select, repeats included (its row numbers are held in memory)
TAKE_STREAM = 1  # the selection's random stream is default_rng([seed, TAKE_STREAM]): not the permutation's


def take_count(take: int | float | None, rows: int, where: str) -> int:
    """Rows a source's `take` selects out of its `rows`, repeats included (a take above `rows` upsamples)."""
    if take is None:
        return rows
    if isinstance(take, float):
        count = math.floor(Fraction(repr(take)) * rows)  # exact on the decimal written: 0.29 of 100 is 29
    else:
        count = take
    if count == 0:
        raise BuildError(f"{where}: key 'take' = {take!r}: selects no row of the source's {rows}")
    if count > MAX_TAKE:
        raise BuildError(f"{where}: key 'take' = {take!r}: selects {count:,} rows of the source's {rows:,}, more than "
                         f"the {MAX_TAKE:,} a take may select")
    return count


def take_rows(rows: int, count: int, seed: int) -> np.ndarray:
    """The selected rows of a source (int64, ascending, within the source; a row repeated as often as
    the take selects it)."""
    if count == rows:
        return np.arange(rows, dtype=np.int64)
    repeats, remainder = divmod(count, rows)
    chosen = np.random.default_rng([seed, TAKE_STREAM]).permutation(rows)[:remainder]
    return np.sort(np.concatenate([np.tile(np.arange(rows), repeats), chosen])).astype(np.int64)


def selection_sha256(selected: np.ndarray) -> str:
    """sha256 of the selected rows as little-endian int64: the manifest's pin of a take."""
    return hashlib.sha256(selected.astype("<i8").tobytes()).hexdigest()


def mixed_rows(firsts: Sequence[int], selections: Sequence[np.ndarray]) -> np.ndarray:
    """The mixed source: mixed row m is row mixed_rows[m] of the files of every source (int64)."""
    parts = [first + selected for first, selected in zip(firsts, selections)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Placement:
    """Where the stream holds the rows of every source's files: `rows[j]` (ascending, a row repeated
    as often as its take selects it) at stream position `positions[j]`."""
    rows: np.ndarray  # int64, rows of every source's files
    positions: np.ndarray  # int64, a permutation of range(len(rows))

    @classmethod
    def one_each(cls, positions_of: np.ndarray) -> Placement:
        """From each row's one position, -1 for a row the stream does not hold."""
        rows = np.flatnonzero(np.asarray(positions_of) >= 0).astype(np.int64)
        return cls(rows, np.asarray(positions_of, dtype=np.int64)[rows])

    @property
    def size(self) -> int:
        return len(self.rows)

    def within(self, first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows counted from `first`, their positions) of the stream's entries among rows [first, first + count)."""
        low, high = np.searchsorted(self.rows, [first, first + count], side="left")
        return self.rows[low:high] - first, self.positions[low:high]


def placement(firsts: Sequence[int], selections: Sequence[np.ndarray], seed: int) -> Placement:
    """Each selected row of every source's files, with its place in the stream."""
    taken = mixed_rows(firsts, selections)
    return Placement(taken, inverse_permutation(permutation(len(taken), seed)))


def mixed_of_positions(firsts: Sequence[int], selections: Sequence[np.ndarray], seed: int,
                       positions) -> np.ndarray:
    """The row (of every source's files) at each of the stream `positions`."""
    taken = mixed_rows(firsts, selections)
    return taken[permutation(len(taken), seed)[np.asarray(positions, dtype=np.int64)]]


def counting_by_source(stream: Iterable[T], firsts: Sequence[int], read: list[int]) -> Iterator[T]:
    """The tokenized stream unchanged, each conversation it hands on counted in `read` by the config
    position of its source (a conversation expanded into samples once, at its first)."""
    for conversation in stream:
        if conversation.part == 0:
            read[bisect_right(firsts, conversation.origin.index) - 1] += 1
        yield conversation


def source_of(firsts: Sequence[int], rows) -> np.ndarray:
    """The config position of the source of each row (of every source's files)."""
    return np.searchsorted(np.asarray(firsts), np.asarray(rows, dtype=np.int64), side="right") - 1
