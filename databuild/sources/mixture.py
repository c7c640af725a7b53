"""The mixed source: each configured source's selected rows (`take`), concatenated in config order,
and where each of them lands in the stream.

A source of n rows with `take` k (a count, or floor(fraction * n) on the decimal the config writes)
contributes the rows `sorted(numpy.random.default_rng([seed, 1]).permutation(n)[:k])`: which rows
depends on the build's seed and n alone (not on the other sources, their order, or the workers), a
larger take of the same source keeps every row of a smaller one, and taking every row is the
identity. The one global permutation (`permute.permutation`) then runs over the mixed rows, so a
source split into two entries, in order, builds the same stream as the whole.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..errors import BuildError
from .permute import inverse_permutation, permutation

TAKE_STREAM = 1  # the selection's random stream is default_rng([seed, TAKE_STREAM]): not the permutation's


def take_count(take: int | float | None, rows: int, where: str) -> int:
    """Rows a source's `take` selects out of its `rows`."""
    if take is None:
        return rows
    if isinstance(take, float):
        count = math.floor(Fraction(repr(take)) * rows)  # exact on the decimal written: 0.29 of 100 is 29
    else:
        count = take
    if count > rows:
        raise BuildError(f"{where}: key 'take' = {take!r}: the source has {rows} rows; a take cannot repeat rows "
                         "(list the source twice to repeat it)")
    if count == 0:
        raise BuildError(f"{where}: key 'take' = {take!r}: selects no row of the source's {rows}")
    return count


def take_rows(rows: int, count: int, seed: int) -> np.ndarray:
    """The selected rows of a source (int64, ascending, within the source)."""
    if count == rows:
        return np.arange(rows, dtype=np.int64)
    chosen = np.random.default_rng([seed, TAKE_STREAM]).permutation(rows)[:count]
    return np.sort(chosen).astype(np.int64)


def selection_sha256(selected: np.ndarray) -> str:
    """sha256 of the selected rows as little-endian int64: the manifest's pin of a take."""
    return hashlib.sha256(selected.astype("<i8").tobytes()).hexdigest()


def mixed_rows(firsts: Sequence[int], selections: Sequence[np.ndarray]) -> np.ndarray:
    """The mixed source: mixed row m is row mixed_rows[m] of the files of every source (int64)."""
    parts = [first + selected for first, selected in zip(firsts, selections)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def stream_positions(firsts: Sequence[int], selections: Sequence[np.ndarray], total_rows: int,
                     seed: int) -> np.ndarray:
    """For each row of every source's files, its place in the stream, or -1 when no take selects it."""
    taken = mixed_rows(firsts, selections)
    positions = np.full(total_rows, -1, dtype=np.int64)
    positions[taken] = inverse_permutation(permutation(len(taken), seed))
    return positions


def read_by_source(firsts: Sequence[int], selections: Sequence[np.ndarray], seed: int,
                   stream_read: int) -> list[int]:
    """How many of the first `stream_read` stream positions each source holds."""
    if not stream_read:  # a manifest written before the first row (make's up-to-date check): no permutation
        return [0] * len(firsts)
    taken = mixed_rows(firsts, selections)
    read = taken[permutation(len(taken), seed)[:stream_read]]
    return np.bincount(source_of(firsts, read), minlength=len(firsts)).tolist()


def source_of(firsts: Sequence[int], rows) -> np.ndarray:
    """The config position of the source of each row (of every source's files)."""
    return np.searchsorted(np.asarray(firsts), np.asarray(rows, dtype=np.int64), side="right") - 1
