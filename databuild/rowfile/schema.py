"""The row file's schema and its checks: the four list columns and their types, and what every row
must hold (no nulls; rows of one length; masks of 0 and 1; segment starts from 0, increasing; a
padding segment, conversation id PADDING_ID, only last and never a target). A file that breaks one
is refused naming the row (RowFormatError); one that cannot be read at all is UnreadableError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import BuildError
from ..records.row import PADDING_ID


class RowFormatError(BuildError):
    """The file is readable parquet but not a valid databuild row file."""


class UnreadableError(BuildError):
    """The file cannot be read as parquet at all (missing, truncated, footer lost, corrupt pages)."""


EXPECTED_TYPES = {"input_ids": pa.list_(pa.int32()), "loss_mask": pa.list_(pa.int8()),
                  "seq_start_id": pa.list_(pa.int32()), "conversation_ids": pa.list_(pa.string())}


def check_schema(schema: pa.Schema, path: Path) -> None:
    extra = [name for name in schema.names if name not in EXPECTED_TYPES]
    if extra:
        raise RowFormatError(f"{path}: schema: unexpected column '{extra[0]}' (a row file has exactly "
                             f"{', '.join(EXPECTED_TYPES)})")
    for name, kind in EXPECTED_TYPES.items():
        if name not in schema.names:
            raise RowFormatError(f"{path}: schema: missing column '{name}'")
        found = schema.field(name).type
        if not found.equals(kind):
            raise RowFormatError(f"{path}: schema: column '{name}' is {found}, expected {kind}")


def list_values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(flat values, per-row lengths) of a list column without nulls."""
    array = column.combine_chunks()
    return (array.flatten().to_numpy(zero_copy_only=False),
            pc.list_value_length(array).to_numpy(zero_copy_only=False))


def check_nulls(table: pa.Table, first: int, path: Path) -> None:
    """No null row, no null value inside a row, no empty conversation id but on a row's last segment
    (padding; _check_group checks it holds no target): checked before any value is read, as numpy
    would turn a null into NaN, or a number."""
    for name in (n for n in EXPECTED_TYPES if n in table.column_names):
        column = table.column(name).combine_chunks()
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise RowFormatError(f"{path}: row {first + row}: column '{name}' is null")
        values = column.flatten()
        bad = values.is_null().to_numpy(zero_copy_only=False)
        if name == "conversation_ids" and len(values):
            parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
            last_of_row = np.append(parents[1:] != parents[:-1], True)
            empty = pc.fill_null(pc.equal(pc.utf8_length(values), 0), False).to_numpy(zero_copy_only=False)
            bad |= empty & ~last_of_row
        if bad.any():
            row = int(pc.list_parent_indices(column)[int(np.flatnonzero(bad)[0])].as_py())
            what = "a null, or an empty id before its last segment" if name == "conversation_ids" else "a null value"
            raise RowFormatError(f"{path}: row {first + row}: column '{name}' holds {what}")


def check_row_group(table: pa.Table, first: int, path: Path) -> None:
    """What the views need of a row group read (all columns or some): no nulls; with every column,
    the shape checks too, rows as long as the group's first."""
    check_nulls(table, first, path)
    if table.num_rows and set(EXPECTED_TYPES) <= set(table.column_names):
        check_group(table, first, len(table.column("input_ids")[0]), path)


def check_group(table: pa.Table, first: int, row_tokens: int, path: Path) -> int:
    """The shape checks of a row group with every column; returns its padding tokens (those of the
    rows' final segments with conversation id "", which must hold no target)."""
    _, id_lengths = list_values(table.column("input_ids"))
    mask_values, mask_lengths = list_values(table.column("loss_mask"))
    starts, start_lengths = list_values(table.column("seq_start_id"))
    conversation_ids, conversation_lengths = list_values(table.column("conversation_ids"))
    for what, bad in (
            (f"has a length other than {row_tokens} tokens", id_lengths != row_tokens),
            ("input_ids and loss_mask lengths differ", mask_lengths != id_lengths),
            ("seq_start_id and conversation_ids lengths differ", start_lengths != conversation_lengths),
            ("seq_start_id is empty", start_lengths == 0)):
        if bad.any():
            raise RowFormatError(f"{path}: row {first + int(np.flatnonzero(bad)[0])} {what}")
    if mask_values.size and (mask_values.min() < 0 or mask_values.max() > 1):
        row = first + int(np.flatnonzero((mask_values < 0) | (mask_values > 1))[0]) // row_tokens
        raise RowFormatError(f"{path}: row {row}: loss_mask holds a value other than 0 or 1")
    row_of_start = np.repeat(np.arange(len(start_lengths)), start_lengths)
    first_of_row = np.concatenate([[0], np.cumsum(start_lengths)[:-1]])
    increasing = np.ones(len(starts), dtype=bool)
    increasing[1:] = starts[1:] > starts[:-1]
    increasing[first_of_row] = True
    bad = (starts < 0) | (starts >= row_tokens) | ~increasing
    bad[first_of_row] |= starts[first_of_row] != 0
    if bad.any():
        raise RowFormatError(f"{path}: row {first + int(row_of_start[np.flatnonzero(bad)[0]])}: seq_start_id "
                             "must start at 0 and increase within the row")
    last = np.cumsum(start_lengths) - 1
    padded = conversation_ids[last] == PADDING_ID
    pad_start = np.where(padded, starts[last], row_tokens).astype(np.int64)
    in_padding = np.arange(row_tokens) >= pad_start[:, None]
    supervised_padding = (mask_values.reshape(len(start_lengths), row_tokens).astype(bool) & in_padding).any(axis=1)
    if supervised_padding.any():
        raise RowFormatError(f"{path}: row {first + int(np.flatnonzero(supervised_padding)[0])}: its padding "
                             "segment (conversation id \"\") holds a target")
    return int((row_tokens - pad_start).sum())


def check_token_ids(ids: np.ndarray, first: int, row_tokens: int, path: Path, below: int | None,
                    whose: str = "the tokenizer's size, inputs.tokenizer.size in the manifest") -> None:
    """Every token id of rows `first`.. (`ids` flat, `row_tokens` a row) in [0, below): `below` the tokenizer's
    size (`whose` says where it comes from); None, where none is known, checks only that none is negative.
    A tokenizer decodes an id out of its range as an OverflowError, or as nothing."""
    if not ids.size or ids.min() >= 0 and (below is None or ids.max() < below):
        return
    at = int(np.flatnonzero((ids < 0) | (ids >= (below if below is not None else 2**31)))[0])
    bound = f"outside 0..{below - 1} ({whose})" if below is not None else "negative"
    raise RowFormatError(f"{path}: row {first + at // row_tokens}: token {at % row_tokens} has id {int(ids[at])}, "
                         f"{bound}: not a build of this tokenizer, or a damaged one")
