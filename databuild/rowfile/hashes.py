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

from ..utils.files import file_sha256
from .read import open_row_file, row_groups
from .schema import check_group, check_nulls, check_token_ids, list_values

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


def hash_parquet(path: Path, file_digest: tuple[str, int] | None = None,
                 token_ids_below: int | None = None) -> ParquetSummary:
    """Every pinned figure of a row file, from the file alone, one row group in memory at a time.
    `file_digest` is the file's (sha256, bytes) when the caller has already read them; every token id is
    checked to be below `token_ids_below` (the tokenizer's size), or only non-negative without it."""
    hasher, segments, rows, supervised, padding, row_tokens = RowsHasher(), SegmentsHasher(), 0, 0, 0, None
    for _, table in row_groups(open_row_file(path), path, checked=False):
        if not table.num_rows:
            continue
        check_nulls(table, rows, path)
        ids, lengths = list_values(table.column("input_ids"))
        row_tokens = int(lengths[0]) if row_tokens is None else row_tokens
        padding += check_group(table, rows, row_tokens, path)
        check_token_ids(ids, rows, row_tokens, path, token_ids_below)
        mask, _ = list_values(table.column("loss_mask"))
        hasher.update_rows(ids.reshape(table.num_rows, -1), mask.reshape(table.num_rows, -1))
        for starts, conversations in zip(table.column("seq_start_id").to_pylist(),
                                         table.column("conversation_ids").to_pylist()):
            segments.update(starts, conversations)
        rows += table.num_rows
        supervised += int(np.count_nonzero(mask))
    digest, size = file_digest or file_sha256(path)
    return ParquetSummary(hasher.hexdigest(), segments.hexdigest(), digest, size, rows, row_tokens or 0, supervised,
                          tuple(hasher.row_digests), padding)
