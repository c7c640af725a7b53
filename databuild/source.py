"""Source stage: Tulu-schema parquet files, validated up front, read back in permutation order.

The source is never held whole: conversations come back in windows of permutation positions,
each window one streaming pass over the files that keeps only the rows whose positions fall in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import BuildError
from .permute import inverse_permutation

ROLES = ("system", "developer", "user", "assistant")
COLUMNS = ["id", "messages", "source"]
READ_BATCH_ROWS = 4096


@dataclass(frozen=True)
class Conversation:
    position: int  # place in the permuted stream
    index: int  # row in the concatenated source (files in sorted name order)
    id: str
    source: str
    messages: tuple[tuple[str, str], ...]  # (role, content)


@dataclass(frozen=True)
class SourceFile:
    path: Path
    name: str  # path relative to the source root, as recorded in the manifest
    rows: int
    first_index: int


@dataclass(frozen=True)
class Malformed:
    index: int
    file: str
    row: int
    id: str
    reason: str

    def message(self) -> str:
        return f"{self.file}: row {self.row} (id {self.id!r}): {self.reason}"


def source_files(root: Path, split: str) -> list[SourceFile]:
    """The split's parquet files under root/data, in sorted name order, with their row counts."""
    paths = sorted((root / "data").glob(f"{split}-*.parquet"))
    if not paths:
        raise BuildError(f"{root}: no files data/{split}-*.parquet")
    files, first = [], 0
    for path in paths:
        name = path.relative_to(root).as_posix()
        try:
            meta = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            raise BuildError(f"{name}: not a readable parquet file ({exc})") from None
        _check_schema(meta.schema_arrow, name)
        files.append(SourceFile(path, name, meta.metadata.num_rows, first))
        first += meta.metadata.num_rows
    return files


def _check_schema(schema: pa.Schema, name: str) -> None:
    def fail(what: str) -> BuildError:
        return BuildError(f"{name}: schema: {what} (expected id: string, "
                          "messages: list<struct<content: string, role: string>>, source: string)")

    for column in COLUMNS:
        if column not in schema.names:
            raise fail(f"missing column '{column}'")
    for column in ("id", "source"):
        if not pa.types.is_string(schema.field(column).type) and not pa.types.is_large_string(
                schema.field(column).type):
            raise fail(f"column '{column}' is {schema.field(column).type}")
    messages = schema.field("messages").type
    if not (pa.types.is_list(messages) or pa.types.is_large_list(messages)) or not pa.types.is_struct(
            messages.value_type):
        raise fail(f"column 'messages' is {messages}")
    struct = messages.value_type
    for key in ("role", "content"):
        index = struct.get_field_index(key)
        if index < 0:
            raise fail(f"messages lack field '{key}'")
        kind = struct.field(index).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise fail(f"messages field '{key}' is {kind}, not string")


def _iter_batches(file: SourceFile) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(index of the batch's first row in the whole source, batch), streaming."""
    offset = file.first_index
    for batch in pq.ParquetFile(file.path).iter_batches(batch_size=READ_BATCH_ROWS, columns=COLUMNS):
        yield offset, batch
        offset += batch.num_rows


def _malformed_rows(batch: pa.RecordBatch) -> dict[int, str]:
    """Row (within the batch) to reason, computed column-wise: the whole source is checked in seconds."""
    bad: dict[int, str] = {}
    ids, messages = batch.column("id"), batch.column("messages")
    for row in np.flatnonzero(pc.fill_null(pc.equal(pc.utf8_length(ids), 0), True).to_numpy(
            zero_copy_only=False)):
        bad.setdefault(int(row), "missing or empty id")
    lengths = pc.fill_null(pc.list_value_length(messages), 0).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(lengths == 0):
        bad.setdefault(int(row), "missing or empty 'messages'")
    flat = pc.list_flatten(messages)
    if len(flat):
        parent = pc.list_parent_indices(messages).to_numpy(zero_copy_only=False)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        roles, contents = pc.struct_field(flat, "role"), pc.struct_field(flat, "content")
        unknown = pc.invert(pc.fill_null(pc.is_in(roles, pa.array(ROLES)), False))
        for item in np.flatnonzero(unknown.to_numpy(zero_copy_only=False)):
            row = int(parent[item])
            bad.setdefault(row, f"message {item - starts[row]}: unknown role {roles[item].as_py()!r} "
                                f"(expected one of {', '.join(ROLES)})")
        for item in np.flatnonzero(pc.is_null(contents).to_numpy(zero_copy_only=False)):
            row = int(parent[item])
            bad.setdefault(row, f"message {item - starts[row]}: content is null, not a string")
    return bad


def find_malformed(files: list[SourceFile]) -> list[Malformed]:
    """Every malformed conversation in the source, in source order, from one streaming pass."""
    found = []
    for file in files:
        for offset, batch in _iter_batches(file):
            bad = _malformed_rows(batch)
            ids = batch.column("id")
            for row in sorted(bad):
                index = offset + row
                found.append(Malformed(index, file.name, index - file.first_index,
                                       ids[row].as_py() or "", bad[row]))
    return found


def read_in_order(files: list[SourceFile], permutation: np.ndarray, window: int,
                  stop_at: int | None = None) -> Iterator[Conversation]:
    """Conversations in permutation order, one window of positions per pass over the files.

    `window` only trades memory for passes; the order and content of what comes back do not
    depend on it. `stop_at` ends the stream early (the caller may also just stop iterating).
    """
    positions_of = inverse_permutation(permutation)
    total = len(permutation) if stop_at is None else min(stop_at, len(permutation))
    for low in range(0, total, window):
        high = min(low + window, total)
        kept: list[pa.Table] = []
        kept_positions: list[np.ndarray] = []
        kept_indices: list[np.ndarray] = []
        for file in files:
            for offset, batch in _iter_batches(file):
                indices = np.arange(offset, offset + batch.num_rows)
                positions = positions_of[indices]
                take = np.flatnonzero((positions >= low) & (positions < high))
                if len(take):
                    kept.append(pa.Table.from_batches([batch]).take(pa.array(take)))
                    kept_positions.append(positions[take])
                    kept_indices.append(indices[take])
        if not kept:
            continue
        table = pa.concat_tables(kept)
        positions = np.concatenate(kept_positions)
        indices = np.concatenate(kept_indices)
        order = np.argsort(positions, kind="stable")
        table = table.take(pa.array(order))
        for start in range(0, table.num_rows, READ_BATCH_ROWS):
            chunk = table.slice(start, READ_BATCH_ROWS).to_pylist()
            for offset, row in enumerate(chunk):
                k = order[start + offset]
                yield Conversation(
                    position=int(positions[k]), index=int(indices[k]), id=row["id"] or "",
                    source=row["source"] or "",
                    messages=tuple((m["role"], m["content"]) for m in row["messages"] or ()),
                )
