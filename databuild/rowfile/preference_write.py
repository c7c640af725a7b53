"""The preference row file's writer: kept pairs streamed into a partial file in fixed row groups,
counted and hashed as written (PairFigures, preference.py), fsynced; the partial removed on any error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..records.pair import TokenizedPair
from .preference import PAIRS_PER_GROUP, PairFigures, schema
from .write import WRITER_OPTIONS


def _list_array(rows: list[np.ndarray], kind: pa.DataType) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)]).astype(np.int32)
    values = np.concatenate(rows) if rows else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=kind.value_type))


def _table(kind: str, pairs: list[TokenizedPair]) -> pa.Table:
    arrays = [pa.array([p.origin.id for p in pairs], pa.string()),
              _list_array([p.prompt_ids for p in pairs], pa.list_(pa.int32()))]
    for k in range(2 if kind == "paired" else 1):
        arrays += [_list_array([p.completion_ids[k] for p in pairs], pa.list_(pa.int32())),
                   _list_array([p.completion_masks[k] for p in pairs], pa.list_(pa.int8()))]
    if kind == "unpaired":
        arrays.append(pa.array([bool(p.label) for p in pairs], pa.bool_()))
    return pa.Table.from_arrays(arrays, schema=schema(kind))


def write_pairs(pairs: Iterable[TokenizedPair], partial: Path, kind: str, figures: PairFigures) -> int:
    """Stream kept pairs into `partial` (removed on any error), counting and hashing them as written."""
    try:
        with pq.ParquetWriter(partial, schema(kind), **WRITER_OPTIONS) as writer:
            group: list[TokenizedPair] = []
            for pair in pairs:
                figures.add(pair.origin.id, pair.prompt_ids, pair.completion_ids, pair.completion_masks, pair.label)
                group.append(pair)
                if len(group) == PAIRS_PER_GROUP:
                    writer.write_table(_table(kind, group), row_group_size=PAIRS_PER_GROUP)
                    group = []
            if group:
                writer.write_table(_table(kind, group), row_group_size=PAIRS_PER_GROUP)
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise BuildError(f"{partial}: writing the pairs failed ({exc.strerror or exc}); nothing published") from None
        raise
    return figures.rows
