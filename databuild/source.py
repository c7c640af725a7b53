"""Source stage: Tulu-schema parquet files, validated up front, read back in permutation order.

The source is never held whole. One streaming pass checks every row and spills it, by its stream
position, into bucket files of `window` positions each (Arrow IPC in a temporary directory); the
stream then reads the buckets back in order, one in memory at a time, sorted within. The window
trades memory for the number of files; the stream does not depend on it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401  (pa.ipc)
import pyarrow.parquet as pq

from .errors import BuildError
from .permute import inverse_permutation

ROLES = ("system", "developer", "user", "assistant")
COLUMNS = ["id", "messages", "source"]
SPILL_THREADS = 2  # files decoded at once in the spill pass
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


def spill_in_order(files: list[SourceFile], permutation: np.ndarray, window: int,
                   directory: Path, threads: int = SPILL_THREADS) -> tuple[list[Malformed], int]:
    """The one pass over the source: check every row, and write each to the bucket file of its
    stream position (bucket k holds positions [k*window, (k+1)*window)), in Arrow IPC under directory.

    Returns (every malformed conversation in source order, the number of buckets). One pass, whatever
    the source's size; reading the stream back then holds one bucket in memory at a time. Files are
    decoded `threads` at a time: parquet decoding, the checks and the takes run in Arrow's C++ without
    the GIL, and nothing is tokenized before this pass ends. A bucket's rows may come from the files
    in any order; read_in_order sorts each bucket by position, so the stream does not depend on it.
    """
    positions_of = inverse_permutation(permutation)
    buckets = -(-len(permutation) // window)
    writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
    lock = threading.Lock()

    def one_file(file: SourceFile) -> list[Malformed]:
        found: list[Malformed] = []
        for offset, batch in _iter_batches(file):
            bad = _malformed_rows(batch)
            for row in sorted(bad):
                found.append(Malformed(offset + row, file.name, offset + row - file.first_index,
                                       batch.column("id")[row].as_py() or "", bad[row]))
            indices = np.arange(offset, offset + batch.num_rows)
            positions = positions_of[indices]
            batch = pa.RecordBatch.from_arrays(
                [batch.column(c) for c in COLUMNS] + [pa.array(positions), pa.array(indices)],
                names=COLUMNS + ["position", "index"])
            bucket_of = positions // window
            order = np.argsort(bucket_of, kind="stable")
            grouped = batch.take(pa.array(order))
            cuts = np.flatnonzero(np.diff(bucket_of[order])) + 1
            with lock:
                for low, high in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(order)]])):
                    bucket = int(bucket_of[order[low]])
                    if bucket not in writers:
                        writers[bucket] = pa.ipc.new_file(directory / f"bucket-{bucket:06d}.arrow", grouped.schema)
                    writers[bucket].write_batch(grouped.slice(low, high - low))
        return found

    try:
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            found = [m for part in pool.map(one_file, files) for m in part]  # file order: source order
    finally:
        for writer in writers.values():
            writer.close()
    return found, buckets


def read_in_order(directory: Path, buckets: int) -> Iterator[Conversation]:
    """Conversations in permutation order, from the buckets spill_in_order wrote."""
    for bucket in range(buckets):
        path = directory / f"bucket-{bucket:06d}.arrow"
        if not path.exists():
            continue
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
        positions = table.column("position").to_numpy()
        indices = table.column("index").to_numpy()
        ids, sources = table.column("id").to_pylist(), table.column("source").to_pylist()
        # Column by column: one Python list per field, not a dict per row and per message.
        messages = table.column("messages").combine_chunks()
        ends = np.cumsum(pc.fill_null(pc.list_value_length(messages), 0).to_numpy(zero_copy_only=False))
        flat = messages.flatten()
        pairs = list(zip(pc.struct_field(flat, "role").to_pylist(), pc.struct_field(flat, "content").to_pylist()))
        del table, messages, flat
        for k in np.argsort(positions, kind="stable"):
            yield Conversation(
                position=int(positions[k]), index=int(indices[k]), id=ids[k] or "", source=sources[k] or "",
                messages=tuple(pairs[(ends[k - 1] if k else 0):ends[k]]),
            )
