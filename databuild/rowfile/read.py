"""The one way to read a row file back: opened from its footer with its schema checked, its row groups
in order (`row_groups`, one in memory at a time), as blocks of numpy rows (`RowBlock`, what exports
stream) or as single rows found from the footer (`StoredRow`, what show, report and diff decode).

Padding (data/README.md, "Columns"): a row may end with one extra segment whose conversation id is
PADDING_ID; its tokens are padding and never targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..records.row import PADDING_ID
from ..utils import json_depth
from .schema import EXPECTED_TYPES, RowFormatError, UnreadableError, check_row_group, check_schema

COLUMNS = list(EXPECTED_TYPES)


def open_row_file(path: Path) -> pq.ParquetFile:
    """A row file opened from its footer, with the schema checked: what every reader starts with."""
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableError(f"{path}: not readable as parquet: {exc}") from None
    try:
        check_schema(parquet.schema_arrow, path)
    except RowFormatError:
        exported = _export_of(path)
        if exported is not None:  # the file a trainer reads, handed to a command that reads the build's rows
            raise RowFormatError(f"{path}: an export (--to {exported[0]}) of {exported[1]}, not a row file: show, "
                                 "report, diff and hash read the row file it was exported from (verify checks "
                                 "either)") from None
        raise
    return parquet


def _export_of(path: Path) -> tuple[str, str] | None:
    """(its target, the row file it came from) where the manifest beside `path` is an export's, else None."""
    try:
        manifest = json_depth.loads(path.with_name(path.name.removesuffix(".parquet") + ".manifest.json")
                                    .read_text(encoding="utf-8"))
        if str(manifest["format"]).startswith("databuild-export/"):
            return str(manifest["export"]), str(manifest["source"]["file"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def read_row_group(parquet: pq.ParquetFile, group: int, path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return parquet.read_row_group(group, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableError(f"{path}: row group {group} unreadable: {exc}") from None


def row_groups(parquet: pq.ParquetFile, path: Path, columns: list[str] | None = None,
               checked: bool = True) -> Iterator[tuple[int, pa.Table]]:
    """(the index of its first row, the group read) for each row group in order, empty ones included;
    `checked`: each group's rows checked (check_row_group) before it is handed on."""
    first = 0
    for group in range(parquet.metadata.num_row_groups):
        table = read_row_group(parquet, group, path, columns)
        if checked:
            check_row_group(table, first, path)
        yield first, table
        first += table.num_rows


@dataclass(frozen=True)
class RowBlock:
    """Consecutive rows of a native file: rows [first_row, first_row + len(input_ids)), as numpy
    arrays, with what every export needs of their segments: where the real ones start, where padding
    begins, which targets sit on a segment's first token (no next-token trainer can label those)."""
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
    for first, table in row_groups(open_row_file(path), path, checked=False):
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


@dataclass(frozen=True)
class StoredRow:
    """One row read back, for the views: its arrays, its segments, whether it continues a conversation."""
    index: int
    input_ids: np.ndarray
    loss_mask: np.ndarray
    seq_start_id: np.ndarray
    conversation_ids: tuple[str, ...]
    continued: bool  # its first segment continues a conversation begun in an earlier row

    @property
    def padding_start(self) -> int:
        """Where its padding segment (conversation id PADDING_ID) starts; the row's length if it has none."""
        return int(self.seq_start_id[-1]) if self.conversation_ids[-1] == PADDING_ID else len(self.input_ids)


def open_parquet(path: Path) -> pq.ParquetFile:
    if not path.is_file():
        raise BuildError(f"{path}: no such file")
    return open_row_file(path)


def locate(parquet: pq.ParquetFile, row: int) -> tuple[int, int]:
    """(row group, row inside it), from the footer's row counts alone."""
    total = parquet.metadata.num_rows
    if not 0 <= row < total:
        raise BuildError(f"row {row} is out of range: the file has {total} rows"
                         + (f" (0..{total - 1})" if total else ""))
    first = 0
    for group in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(group).num_rows
        if row < first + size:
            return group, row - first
        first += size
    raise BuildError(f"row {row}: the footer's row groups do not add up to {total} rows")


def _last_id(table: pa.Table, offset: int) -> str | None:
    ids = table.column("conversation_ids")[offset].as_py()
    return ids[-1] if ids else None


def read_rows(parquet: pq.ParquetFile, path: Path, first: int, count: int = 1,
              continued_rows: list[int] | None = None) -> list[StoredRow]:
    """Rows first..first+count-1 of the file at path, reading (and checking) each row group they touch
    once. Whether a row's first segment continues an earlier row's conversation comes from the
    manifest's `continued_rows` when given; the file alone can only compare it with the previous kept
    row's last id, which misses a conversation begun in a row skipped for having no target."""
    rows, tables = [], {}
    for index in range(first, first + count):
        group, offset = locate(parquet, index)
        if group not in tables:
            tables = {group: read_row_group(parquet, group, path, COLUMNS)}  # keep one group in memory
            check_row_group(tables[group], index - offset, path)
        one = tables[group].slice(offset, 1)
        values = {name: one.column(name).combine_chunks().flatten() for name in COLUMNS}
        ids = tuple(values["conversation_ids"].to_pylist())
        if continued_rows is not None:
            continued = index in continued_rows
        elif offset:
            continued = _last_id(tables[group], offset - 1) == ids[0]
        elif group:  # the previous row sits in the group before: read its one small column
            before = read_row_group(parquet, group - 1, path, ["conversation_ids"])
            continued = _last_id(before, before.num_rows - 1) == ids[0]
        else:
            continued = False
        rows.append(StoredRow(index, values["input_ids"].to_numpy(zero_copy_only=False),
                        values["loss_mask"].to_numpy(zero_copy_only=False),
                        values["seq_start_id"].to_numpy(zero_copy_only=False), ids, continued))
    return rows
