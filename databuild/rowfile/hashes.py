"""The hashes that pin a build, defined once and used by make, hash and verify alike.

rows_sha256: SHA-256 over the kept rows in order; each row contributes its input_ids as
little-endian int32 bytes, then its loss_mask as one byte (0 or 1) per token. It depends on the
tokens and targets only, never on the parquet encoding. segments_sha256: the same over each row's
boundaries (segment_bytes), for trainers that isolate conversations in attention. parquet_sha256:
SHA-256 of the file's bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import BuildError
from ..utils.files import file_sha256

ROW_DIGEST_HEX = 16


def row_bytes(input_ids: np.ndarray, loss_mask: np.ndarray) -> np.ndarray:
    """(rows, row_tokens) arrays to (rows, 5 * row_tokens) bytes: each row's ids (<i4), then its mask."""
    # A C-contiguous (rows, n) array viewed as bytes is (rows, 4n): no reshape, which zero rows could not infer.
    ids_bytes = np.ascontiguousarray(input_ids, dtype="<i4").view(np.uint8)
    return np.concatenate([ids_bytes, np.asarray(loss_mask).astype(np.uint8)], axis=1)


def segment_bytes(seq_start_id, conversation_ids) -> bytes:
    """A row's contribution to segments_sha256: its segment count (<u4), its seq_start_id (<i4), then
    each conversation id as its UTF-8 length (<u4) and bytes. Lengths first, so no two rows' boundaries
    give the same bytes."""
    ids = [c.encode("utf-8") for c in conversation_ids]
    parts = [np.array([len(ids)], dtype="<u4").tobytes(), np.asarray(seq_start_id, dtype="<i4").tobytes()]
    for encoded in ids:
        parts += [np.array([len(encoded)], dtype="<u4").tobytes(), encoded]
    return b"".join(parts)


class SegmentsHasher:
    """segments_sha256, row by row."""

    def __init__(self):
        self._sha = hashlib.sha256()

    def update(self, seq_start_id, conversation_ids) -> None:
        self._sha.update(segment_bytes(seq_start_id, conversation_ids))

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


class RowsHasher:
    """rows_sha256, plus a short digest of each row (the first ROW_DIGEST_HEX hex digits of the
    SHA-256 of that row's bytes) so that verify can name the first row that differs."""

    def __init__(self):
        self._sha = hashlib.sha256()
        self.row_digests: list[str] = []

    def update_rows(self, input_ids: np.ndarray, loss_mask: np.ndarray) -> None:
        """Rows of equal length, as (rows, row_tokens) arrays."""
        data = row_bytes(input_ids, loss_mask)
        self._sha.update(data)
        self.row_digests.extend(hashlib.sha256(row).hexdigest()[:ROW_DIGEST_HEX] for row in data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


@dataclass(frozen=True)
class ParquetSummary:
    rows_sha256: str
    segments_sha256: str
    parquet_sha256: str
    parquet_bytes: int
    rows: int
    row_tokens: int
    supervised_tokens: int
    row_digests: tuple[str, ...]
    padding_tokens: int = 0

    @property
    def supervised_token_ratio(self) -> float:
        total = self.rows * self.row_tokens
        return self.supervised_tokens / total if total else 0.0


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


def _values(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(flat values, per-row lengths) of a list column without nulls."""
    array = column.combine_chunks()
    return (array.flatten().to_numpy(zero_copy_only=False),
            pc.list_value_length(array).to_numpy(zero_copy_only=False))


def _check_nulls(table: pa.Table, first: int, path: Path) -> None:
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
    _check_nulls(table, first, path)
    if table.num_rows and set(EXPECTED_TYPES) <= set(table.column_names):
        _check_group(table, first, len(table.column("input_ids")[0]), path)


def _check_group(table: pa.Table, first: int, row_tokens: int, path: Path) -> int:
    """The shape checks of a row group with every column; returns its padding tokens (those of the
    rows' final segments with conversation id "", which must hold no target)."""
    _, id_lengths = _values(table.column("input_ids"))
    mask_values, mask_lengths = _values(table.column("loss_mask"))
    starts, start_lengths = _values(table.column("seq_start_id"))
    conversation_ids, conversation_lengths = _values(table.column("conversation_ids"))
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
    padded = conversation_ids[last] == ""
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


def open_row_file(path: Path) -> pq.ParquetFile:
    """A row file opened from its footer, with the schema checked: what every reader starts with."""
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableError(f"{path}: not readable as parquet: {exc}") from None
    check_schema(parquet.schema_arrow, path)
    return parquet


def read_row_group(parquet: pq.ParquetFile, group: int, path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return parquet.read_row_group(group, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableError(f"{path}: row group {group} unreadable: {exc}") from None


def hash_parquet(path: Path, file_digest: tuple[str, int] | None = None,
                 token_ids_below: int | None = None) -> ParquetSummary:
    """Every pinned figure of a row file, from the file alone, one row group in memory at a time.
    `file_digest` is the file's (sha256, bytes) when the caller has already read them; every token id is
    checked to be below `token_ids_below` (the tokenizer's size), or only non-negative without it."""
    parquet = open_row_file(path)
    hasher, segments, rows, supervised, padding, row_tokens = RowsHasher(), SegmentsHasher(), 0, 0, 0, None
    for group in range(parquet.num_row_groups):
        table = read_row_group(parquet, group, path)
        if not table.num_rows:
            continue
        _check_nulls(table, rows, path)
        ids, lengths = _values(table.column("input_ids"))
        row_tokens = int(lengths[0]) if row_tokens is None else row_tokens
        padding += _check_group(table, rows, row_tokens, path)
        check_token_ids(ids, rows, row_tokens, path, token_ids_below)
        mask, _ = _values(table.column("loss_mask"))
        hasher.update_rows(ids.reshape(table.num_rows, -1), mask.reshape(table.num_rows, -1))
        for starts, conversations in zip(table.column("seq_start_id").to_pylist(),
                                         table.column("conversation_ids").to_pylist()):
            segments.update(starts, conversations)
        rows += table.num_rows
        supervised += int(np.count_nonzero(mask))
    digest, size = file_digest or file_sha256(path)
    return ParquetSummary(hasher.hexdigest(), segments.hexdigest(), digest, size, rows, row_tokens or 0, supervised,
                          tuple(hasher.row_digests), padding)
