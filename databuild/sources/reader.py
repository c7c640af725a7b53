"""Source stage: Tulu-schema parquet files, their schema and every row checked.

The checks are column-wise (Arrow compute), so the whole source is checked in seconds; `spill`
runs them in its first pass, before anything is rendered.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import BuildError

ROLES = ("system", "developer", "user", "assistant")
COLUMNS = ["id", "messages", "source"]
SOURCE_SCHEMA = pa.schema([("id", pa.string()),
                           ("messages", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
                           ("source", pa.string())])
READ_BATCH_ROWS = 4096


class Problem(NamedTuple):
    """Why a conversation cannot be built: its kind (malformed, template_error, mask_error) and reason."""
    kind: str
    reason: str


@dataclass(frozen=True)
class Conversation:
    position: int  # place in the permuted stream
    index: int  # row in the concatenated source (files in sorted name order)
    id: str
    source: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    problem: Problem | None = None  # when it cannot be built; no messages then


@dataclass(frozen=True)
class SourceFile:
    path: Path
    name: str  # path relative to the source root, as recorded in the manifest
    rows: int
    first_index: int
    message_bytes: int  # the messages column's uncompressed size, from the parquet metadata


@dataclass(frozen=True)
class BadConversation:
    """A conversation the build cannot use, and why: `kind` is malformed (the up-front check), or
    template_error / mask_error (found when the stream renders it)."""
    index: int
    file: str
    row: int
    id: str
    reason: str
    kind: str = "malformed"

    def message(self) -> str:
        return f"{self.file}: row {self.row} (id {shown_id(self.id)}): {self.reason}"


def shown_id(conversation_id: str, limit: int = 60) -> str:
    """An id as a message quotes it: whole when short, else its start and its length (an id may be any size)."""
    if len(conversation_id) <= limit:
        return repr(conversation_id)
    return f"{conversation_id[:limit]!r}... ({len(conversation_id):,} characters)"


def locate_row(files: list[SourceFile], index: int) -> tuple[str, int]:
    """(file name, row within the file) of source row `index`."""
    file = files[bisect.bisect_right([f.first_index for f in files], index) - 1]
    return file.name, index - file.first_index


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
        files.append(SourceFile(path, name, meta.metadata.num_rows, first, _message_bytes(meta.metadata)))
        first += meta.metadata.num_rows
    return files


def _message_bytes(metadata: pq.FileMetaData) -> int:
    return sum(group.column(j).total_uncompressed_size
               for group in (metadata.row_group(g) for g in range(metadata.num_row_groups))
               for j in range(group.num_columns) if group.column(j).path_in_schema.startswith("messages."))


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


def iter_batches(file: SourceFile) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(index of the batch's first row in the whole source, batch), streaming, every batch in
    SOURCE_SCHEMA whatever the file's flavour of strings, lists and struct field order, so that rows
    of different files can share a bucket file."""
    offset = file.first_index
    try:
        for batch in pq.ParquetFile(file.path).iter_batches(batch_size=READ_BATCH_ROWS, columns=COLUMNS):
            batch = batch.select(COLUMNS).cast(SOURCE_SCHEMA)
            _check_utf8(file, offset, batch)
            yield offset, batch
            offset += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"{file.name}: unreadable after row {offset - file.first_index}: {exc}") from None


def _check_utf8(file: SourceFile, offset: int, batch: pa.RecordBatch) -> None:
    """Parquet strings are UTF-8; bytes that are not (a lone surrogate written raw, a damaged page) would
    stop the build deep in Python, so the file is refused here, naming the first such row."""
    if _valid(batch):
        return
    row = next(r for r in range(batch.num_rows) if not _valid(batch.slice(r, 1)))
    try:
        name = shown_id(batch.column("id")[row].as_py() or "")
    except UnicodeDecodeError:
        name = "not UTF-8 either"
    raise BuildError(f"{file.name}: row {offset + row - file.first_index} (id {name}): text that is not valid "
                     "UTF-8 (parquet strings are UTF-8: the file is damaged)")


def _valid(batch: pa.RecordBatch) -> bool:
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


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


def check_batch(file: SourceFile, offset: int, batch: pa.RecordBatch) -> list[BadConversation]:
    """The batch's malformed rows (the batch starts at source row `offset`), in row order."""
    bad = _malformed_rows(batch)
    return [BadConversation(offset + row, file.name, offset + row - file.first_index,
                      batch.column("id")[row].as_py() or "", bad[row]) for row in sorted(bad)]
