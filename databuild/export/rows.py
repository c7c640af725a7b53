"""A native row file read back one row group at a time, as numpy arrays, with what every format
needs to know of its segments: where the real ones start, where padding begins, which targets sit
on a segment's first token (no next-token trainer can label those: nothing before them in the
segment predicts them).

Padding (data/README.md, "Columns"): a row may end with one extra segment whose conversation id is
the empty string; its tokens are padding and never targets. Every format treats it as padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from ..rowfile.hashes import open_row_file, read_row_group

PADDING_ID = ""


@dataclass(frozen=True)
class RowBlock:
    """Consecutive rows of a native file: rows [first_row, first_row + len(input_ids))."""
    first_row: int
    input_ids: np.ndarray  # (rows, row_tokens) int32
    loss_mask: np.ndarray  # (rows, row_tokens) int8
    seq_start_id: tuple[np.ndarray, ...]  # per row, every segment (padding included)
    conversation_ids: tuple[tuple[str, ...], ...]
    table: pa.Table  # the same rows as read, for formats that carry them unchanged

    @property
    def rows(self) -> int:
        return len(self.input_ids)

    @property
    def row_tokens(self) -> int:
        return self.input_ids.shape[1]

    def real_starts(self, row: int) -> np.ndarray:
        """The row's segment starts without its padding segment."""
        starts = self.seq_start_id[row]
        return starts[:-1] if self.conversation_ids[row][-1] == PADDING_ID else starts

    @cached_property
    def real_lengths(self) -> np.ndarray:
        """Per row, the tokens before its padding (all of them when it has none)."""
        return np.array([s[-1] if c[-1] == PADDING_ID else self.row_tokens
                         for s, c in zip(self.seq_start_id, self.conversation_ids)], dtype=np.int64)

    @cached_property
    def segment_starts(self) -> np.ndarray:
        """(rows, row_tokens) bool: True on the first token of every real segment (computed once a block:
        a Python loop over rows, read by the counts and the formats)."""
        marks = np.zeros(self.input_ids.shape, dtype=bool)
        for row in range(self.rows):
            marks[row, self.real_starts(row)] = True
        return marks

    def segment_lengths(self, row: int) -> np.ndarray:
        starts = self.real_starts(row)
        return np.diff(np.append(starts, self.real_lengths[row]))

    def kept(self) -> np.ndarray:
        """(rows, row_tokens) bool: True on every token before the row's padding."""
        return np.arange(self.row_tokens)[None, :] < self.real_lengths[:, None]

    def targets_at_segment_starts(self) -> int:
        return int(np.count_nonzero(self.loss_mask.astype(bool) & self.segment_starts))

    def targets_at_row_starts(self) -> int:
        return int(np.count_nonzero(self.loss_mask[:, 0]))


def read_blocks(path: Path) -> Iterator[RowBlock]:
    """The file's row groups in order. The file is verified before this is called: no checks here."""
    parquet = open_row_file(path)
    first = 0
    for group in range(parquet.num_row_groups):
        table = read_row_group(parquet, group, path)
        if not table.num_rows:
            continue
        rows = table.num_rows
        ids = table.column("input_ids").combine_chunks().flatten().to_numpy().reshape(rows, -1)
        mask = table.column("loss_mask").combine_chunks().flatten().to_numpy().reshape(rows, -1)
        starts = table.column("seq_start_id").combine_chunks()
        offsets = starts.offsets.to_numpy()
        values = starts.flatten().to_numpy()
        yield RowBlock(first, ids, mask, tuple(values[a:b] for a, b in zip(offsets[:-1], offsets[1:])),
                       tuple(tuple(c) for c in table.column("conversation_ids").to_pylist()), table)
        first += rows


def list_array(values: np.ndarray, keep: np.ndarray, kind: pa.DataType) -> pa.ListArray:
    """Rows of a (rows, row_tokens) array cut to the tokens `keep` marks (a prefix of each row)."""
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[keep], type=kind))
