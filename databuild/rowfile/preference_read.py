"""The preference row file read back, one row group at a time (StoredPair), and checked row by row
while its figures and hashes are recomputed from the file alone (figures_of)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..records.pair import COMPLETION_NAMES
from ..utils.files import file_sha256
from .preference import PairFigures, kind_of
from .schema import RowFormatError, UnreadableError


@dataclass(frozen=True)
class StoredPair:
    """One row read back."""
    row: int
    id: str
    prompt_ids: np.ndarray
    completion_ids: tuple[np.ndarray, ...]
    completion_masks: tuple[np.ndarray, ...]
    label: bool | None


def open_pairs(path: Path) -> tuple[pq.ParquetFile, str]:
    try:
        parquet = pq.ParquetFile(path)
    except FileNotFoundError:
        raise UnreadableError(f"{path}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableError(f"{path}: not a readable parquet file ({exc})") from None
    return parquet, kind_of(parquet.schema_arrow, path)


def _values(table: pa.Table, name: str, first: int, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(flat values, row offsets) of a list column, refusing a null anywhere."""
    column = table.column(name).combine_chunks()
    if column.null_count or column.flatten().null_count:
        rows = column.is_null().to_numpy(zero_copy_only=False)
        row = int(np.flatnonzero(rows)[0]) if rows.any() else int(
            pc.list_parent_indices(column)[int(np.flatnonzero(column.flatten().is_null().to_numpy(
                zero_copy_only=False))[0])].as_py())
        raise RowFormatError(f"{path}: row {first + row}: column '{name}' holds a null")
    offsets = column.offsets.to_numpy() - column.offsets[0].as_py()
    return column.flatten().to_numpy(zero_copy_only=False), offsets


def read_pairs(path: Path) -> Iterator[StoredPair]:
    """Every row in order, one row group in memory at a time; nulls refused naming the row."""
    parquet, kind = open_pairs(path)
    names = COMPLETION_NAMES[2 if kind == "paired" else 1]
    first = 0
    for group in range(parquet.num_row_groups):
        try:
            table = parquet.read_row_group(group)
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableError(f"{path}: row group {group} cannot be read ({exc})") from None
        ids = table.column("id").to_pylist()
        if None in ids:
            raise RowFormatError(f"{path}: row {first + ids.index(None)}: column 'id' holds a null")
        lists = {name: _values(table, name, first, path) for name in table.column_names
                 if name not in ("id", "label")}
        labels = table.column("label").to_pylist() if kind == "unpaired" else [None] * len(ids)
        if kind == "unpaired" and None in labels:
            raise RowFormatError(f"{path}: row {first + labels.index(None)}: column 'label' holds a null")

        def cell(name: str, row: int) -> np.ndarray:
            values, offsets = lists[name]
            return values[offsets[row]:offsets[row + 1]]

        for row, pair_id in enumerate(ids):
            yield StoredPair(first + row, pair_id, cell("prompt_input_ids", row),
                             tuple(cell(f"{n}_input_ids", row) for n in names),
                             tuple(cell(f"{n}_loss_mask", row) for n in names), labels[row])
        first += len(ids)


def figures_of(path: Path, token_ids_below: int | None = None, prompt_tokens: int | None = None,
               sequence_tokens: int | None = None) -> tuple[PairFigures, str, int]:
    """The figures of a preference file from the file alone, checking every row as it goes: masks as long as
    their ids and of 0 and 1 only, a target in every completion, a prompt of one token at least, chosen and
    rejected not the same, token ids in [0, token_ids_below), and the declared lengths when given. Returns
    (figures, parquet_sha256, parquet_bytes). The first row that breaks one is named (RowFormatError)."""
    _, kind = open_pairs(path)
    figures = PairFigures(kind)
    for pair in read_pairs(path):
        _check_row(pair, path, token_ids_below, prompt_tokens, sequence_tokens)
        figures.add(pair.id, pair.prompt_ids, pair.completion_ids, pair.completion_masks, pair.label)
    digest, size = file_sha256(path)
    return figures, digest, size


def _check_row(pair: StoredPair, path: Path, below: int | None, prompt_tokens: int | None,
               sequence_tokens: int | None) -> None:
    where = f"{path}: row {pair.row} (id {pair.id!r})"
    names = COMPLETION_NAMES[len(pair.completion_ids)]
    if not len(pair.prompt_ids):
        raise RowFormatError(f"{where}: its prompt is empty")
    if prompt_tokens is not None and len(pair.prompt_ids) > prompt_tokens:
        raise RowFormatError(f"{where}: its prompt is {len(pair.prompt_ids)} tokens, over prompt_tokens "
                             f"({prompt_tokens})")
    for name, ids, mask in zip(names, pair.completion_ids, pair.completion_masks):
        if len(ids) != len(mask):
            raise RowFormatError(f"{where}: {name}_input_ids and {name}_loss_mask lengths differ "
                                 f"({len(ids)} and {len(mask)})")
        if mask.size and (mask.min() < 0 or mask.max() > 1):
            raise RowFormatError(f"{where}: {name}_loss_mask holds a value other than 0 or 1")
        if not mask.any():
            raise RowFormatError(f"{where}: {name} holds no target")
        if sequence_tokens is not None and len(pair.prompt_ids) + len(ids) > sequence_tokens:
            raise RowFormatError(f"{where}: prompt and {name} are {len(pair.prompt_ids) + len(ids)} tokens, over "
                                 f"sequence_tokens ({sequence_tokens})")
    for name, ids in (("prompt", pair.prompt_ids), *zip(names, pair.completion_ids)):
        if ids.size and (ids.min() < 0 or below is not None and ids.max() >= below):
            bad = int(ids[(ids < 0) | (ids >= (below if below is not None else 2**31))][0])
            raise RowFormatError(f"{where}: {name} holds token id {bad}, outside 0..{(below or 2**31) - 1}: not a "
                                 "build of this tokenizer, or a damaged one")
    if len(pair.completion_ids) == 2 and all(np.array_equal(a, b) for a, b in (pair.completion_ids,
                                                                              pair.completion_masks)):
        raise RowFormatError(f"{where}: chosen and rejected are the same tokens and targets")
