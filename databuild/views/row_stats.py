"""The figures `databuild report` draws, per row of a row file: its tokens, target tokens, conversation
segments and padding, and every segment's length. Streamed one row group at a time, reading only
loss_mask, seq_start_id and conversation_ids (not the token ids); numpy does the per-token work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..records.row import PADDING_ID
from ..rowfile.read import row_groups


@dataclass(frozen=True)
class RowStats:
    tokens: np.ndarray  # per row: its length
    supervised: np.ndarray  # per row: target tokens
    segments: np.ndarray  # per row: conversation segments (len(seq_start_id), the padding segment left out)
    segment_lengths: np.ndarray  # every conversation segment of every row, in file order
    padding: np.ndarray  # per row: tokens of its padding segment (conversation id "")


def _flat(column) -> tuple[np.ndarray, np.ndarray]:
    array = column.combine_chunks()
    return (array.flatten().to_numpy(zero_copy_only=False),
            pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64))


def group_stats(table) -> RowStats:
    mask, tokens = _flat(table.column("loss_mask"))
    starts, counts = _flat(table.column("seq_start_id"))
    if len(tokens) and (tokens == tokens[0]).all():  # the usual fixed-length rows: one 2-D count
        supervised = np.count_nonzero(mask.reshape(len(tokens), -1), axis=1).astype(np.int64)
    else:  # any row lengths: differences of one running sum at the row offsets, still no loop
        running = np.concatenate([[0], np.cumsum(mask != 0, dtype=np.int64)])
        offsets = np.concatenate([[0], np.cumsum(tokens)])
        supervised = running[offsets[1:]] - running[offsets[:-1]]
    # a segment ends where the next one in its row starts; a row's last one at the row's end
    ends = np.append(starts[1:], 0).astype(np.int64)
    ends[np.cumsum(counts)[counts > 0] - 1] = tokens[counts > 0]
    ids, _ = _flat(table.column("conversation_ids"))
    is_padding = ids == PADDING_ID
    rows_of = np.repeat(np.arange(len(counts)), counts)
    padding = np.bincount(rows_of[is_padding], (ends - starts)[is_padding], minlength=len(counts)).astype(np.int64)
    return RowStats(tokens, supervised, counts - np.bincount(rows_of[is_padding], minlength=len(counts)),
                    (ends - starts)[~is_padding], padding)


def row_stats(parquet: pq.ParquetFile, path: Path) -> RowStats:
    parts = []
    for _, table in row_groups(parquet, path, ["loss_mask", "seq_start_id", "conversation_ids"]):  # checked: a null
        parts.append(group_stats(table))  # would count as a number
    fields = ("tokens", "supervised", "segments", "segment_lengths", "padding")
    return RowStats(*(np.concatenate([getattr(p, f) for p in parts] or [np.zeros(0, np.int64)]) for f in fields))
