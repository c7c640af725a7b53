"""The preference row file (task: preference), one owner: its schema, its writer, its hashes and its
checks, read back one row group at a time.

One row per pair: `id`, `prompt_input_ids`, then `chosen_input_ids`, `chosen_loss_mask`,
`rejected_input_ids`, `rejected_loss_mask` (a pair file), or `completion_input_ids`,
`completion_loss_mask`, `label` (an unpaired file). A completion's ids do not repeat the prompt (TRL's
tokenized convention: prompt_ids, chosen_ids): the prompt is stored once, so it is the same in both
sequences by construction, and a sequence is the prompt's ids followed by the completion's.

rows_sha256: SHA-256 over the rows in order, each row's bytes (`row_bytes`) being: the id as its UTF-8
length (<u4) and bytes; then each list column in the order above, as its length (<u4) and its values
(ids <i4, masks one byte each, 0 or 1); then, in an unpaired file, the label as one byte (0 or 1). A row
digest is the first 16 hex digits of the SHA-256 of the row's bytes. parquet_sha256: the file's bytes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import BuildError
from ..records.pair import COMPLETION_NAMES, TokenizedPair
from ..utils.files import file_sha256
from .hashes import ROW_DIGEST_HEX
from .schema import RowFormatError, UnreadableError
from .write import WRITER_OPTIONS

FORMAT = {"paired": "databuild-preference/1", "unpaired": "databuild-unpaired/1"}
PAIRS_PER_GROUP = 512  # fixed: the same rows give the same bytes whatever the batch size


def columns(kind: str) -> dict[str, pa.DataType]:
    names = COMPLETION_NAMES[2 if kind == "paired" else 1]
    types = {"id": pa.string(), "prompt_input_ids": pa.list_(pa.int32())}
    for name in names:
        types |= {f"{name}_input_ids": pa.list_(pa.int32()), f"{name}_loss_mask": pa.list_(pa.int8())}
    return types if kind == "paired" else types | {"label": pa.bool_()}


def schema(kind: str) -> pa.Schema:
    metadata = {"databuild.format": FORMAT[kind],
                "databuild.completions": "a completion's input_ids do not repeat the prompt: a sequence is "
                                         "prompt_input_ids + <name>_input_ids; <name>_loss_mask[i] = 1 means "
                                         "<name>_input_ids[i] is a training target (token-aligned, not shifted)",
                "databuild.consumers": "see data/README.md, Preference builds"}
    return pa.schema([pa.field(n, t, nullable=False) for n, t in columns(kind).items()], metadata=metadata)


def kind_of(file_schema: pa.Schema, path: Path) -> str:
    """paired or unpaired, from the schema's format; a file of another format is refused."""
    found = (file_schema.metadata or {}).get(b"databuild.format", b"").decode("utf-8", "replace")
    kinds = {v: k for k, v in FORMAT.items()}
    if found not in kinds:
        raise RowFormatError(f"{path}: schema: format {found!r} is not a preference row file "
                             f"({' or '.join(FORMAT.values())})")
    kind = kinds[found]
    expected = columns(kind)
    if file_schema.names != list(expected):
        raise RowFormatError(f"{path}: schema: columns {file_schema.names}, expected {list(expected)}")
    for name, kind_type in expected.items():
        if not file_schema.field(name).type.equals(kind_type):
            raise RowFormatError(f"{path}: schema: column '{name}' is {file_schema.field(name).type}, "
                                 f"expected {kind_type}")
    return kind


def row_bytes(pair_id: str, lists: Iterable[np.ndarray], label: bool | None) -> bytes:
    """One row's contribution to rows_sha256 (module docstring)."""
    encoded = pair_id.encode("utf-8")
    parts = [np.array([len(encoded)], dtype="<u4").tobytes(), encoded]
    for values in lists:
        kind = "<i4" if values.dtype.itemsize == 4 else "u1"
        parts += [np.array([len(values)], dtype="<u4").tobytes(), np.ascontiguousarray(values, dtype=kind).tobytes()]
    if label is not None:
        parts.append(b"\x01" if label else b"\x00")
    return b"".join(parts)


@dataclass
class PairFigures:
    """What a preference file holds, counted as it is written or read: rows, tokens, targets, its hashes."""
    kind: str
    rows: int = 0
    prompt_tokens: int = 0
    tokens: dict[str, int] = field(default_factory=dict)  # completion name -> its tokens, the prompt's not counted
    supervised_tokens: dict[str, int] = field(default_factory=dict)  # completion name -> its targets
    labels_true: int = 0  # unpaired: rows labelled desirable
    longest_prompt: int = 0
    longest_sequence: int = 0  # the prompt and its longer completion
    row_digests: list[str] = field(default_factory=list)
    _sha: object = field(default_factory=hashlib.sha256, repr=False)

    def add(self, pair_id: str, prompt: np.ndarray, completions, masks, label: bool | None) -> None:
        lists = [prompt, *(x for pair in zip(completions, masks) for x in pair)]
        data = row_bytes(pair_id, lists, label if self.kind == "unpaired" else None)
        self._sha.update(data)
        self.row_digests.append(hashlib.sha256(data).hexdigest()[:ROW_DIGEST_HEX])
        self.rows += 1
        self.prompt_tokens += len(prompt)
        for name, ids, mask in zip(COMPLETION_NAMES[len(completions)], completions, masks):
            self.tokens[name] = self.tokens.get(name, 0) + len(ids)
            self.supervised_tokens[name] = self.supervised_tokens.get(name, 0) + int(np.count_nonzero(mask))
        self.labels_true += bool(label)
        self.longest_prompt = max(self.longest_prompt, len(prompt))
        self.longest_sequence = max(self.longest_sequence, len(prompt) + max(len(c) for c in completions))

    @property
    def rows_sha256(self) -> str:
        return self._sha.hexdigest()

    def record(self) -> dict:
        """As the manifest's output section holds them (data/README: Preference builds)."""
        names = COMPLETION_NAMES[2 if self.kind == "paired" else 1]
        out = {"kind": self.kind, "rows": self.rows, "rows_sha256": self.rows_sha256,
               "prompt_tokens": self.prompt_tokens, **{f"{n}_tokens": self.tokens.get(n, 0) for n in names},
               **{f"{n}_supervised_tokens": self.supervised_tokens.get(n, 0) for n in names},
               "longest_prompt": self.longest_prompt, "longest_sequence": self.longest_sequence}
        return out | ({"labels_true": self.labels_true} if self.kind == "unpaired" else {})


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
