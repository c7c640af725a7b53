"""The spill read back: a bucket file's rows as conversations, and a batch of them named by where they
lie in the bucket files (`SpilledBatch`), which a worker process reads itself. The reading half of
the spill: what the workers need of it, without the passes that write it (spill.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc  # noqa: F401  (pa.ipc)

from ..records.conversation import Conversation
from ..records.origin import Origin
from ..records.problems import BadConversation, marked


def spilled_batch(pieces: list, malformed: dict[int, BadConversation], known_bad: np.ndarray) -> SpilledBatch:
    bad = {int(i): malformed[int(i)] for _, _, indices in pieces for i in indices[np.isin(indices, known_bad)]}
    return SpilledBatch(tuple((path, rows) for path, rows, _ in pieces), bad)


def read_bucket(path: Path) -> Iterator[Conversation]:
    table = open_bucket(path)
    conversations = conversations_of(table)
    for k in np.argsort(table.column("position").to_numpy(), kind="stable"):
        yield conversations[k]


def open_bucket(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def conversations_of(table: pa.Table) -> list[Conversation]:
    """The conversations of rows of a bucket file (or of a table in its columns), in the table's order."""
    # to_pylist, not to_numpy: pyarrow's first conversion to or from numpy in a process imports pandas
    # (~0.5 s), which an encode process never needs otherwise and would spend at its first batch
    positions, indices = table.column("position").to_pylist(), table.column("index").to_pylist()
    ids, sources = table.column("id").to_pylist(), table.column("source").to_pylist()
    tools = [None if text is None else json.loads(text) for text in table.column("tools").to_pylist()]
    # Column by column: one Python list per field, not a dict per row and per message.
    messages = table.column("messages").combine_chunks()
    ends = list(accumulate(length or 0 for length in pc.list_value_length(messages).to_pylist()))  # null: none
    flat = messages.flatten()
    # The Tulu schema's key order, which `datasets` and apply_chat_template give the template; a
    # message's other fields after them, in the source's order.
    dicts = [{"content": content, "role": role} if fields is None else
             {"content": content, "role": role, **json.loads(fields)} for content, role, fields in
             zip(*(pc.struct_field(flat, name).to_pylist() for name in ("content", "role", "fields")))]
    return [Conversation(Origin(positions[k], indices[k], ids[k] or "", sources[k] or ""),
                         messages=tuple(dicts[(ends[k - 1] if k else 0):ends[k]]), tools=tools[k])
            for k in range(len(positions))]


def _rows_of(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`rows` of a bucket, in that order, taken from the record batches that hold them: a take on the
    whole table would first join its record batches (one per part of the pass that wrote to it),
    copying the bucket for every batch read from it."""
    chunks = table.to_batches()
    starts = np.cumsum([0] + [chunk.num_rows for chunk in chunks])
    chunk_of = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(chunk_of, kind="stable")
    by_chunk = rows[order], chunk_of[order]
    picked = [chunks[c].take(_indices(by_chunk[0][by_chunk[1] == c] - starts[c])) for c in np.unique(chunk_of)]
    # `picked` holds the rows in the order `order` put them in; its inverse puts them back
    return pa.Table.from_batches(picked, schema=table.schema).take(_indices(np.argsort(order, kind="stable")))


def _indices(rows: np.ndarray) -> pa.Array:
    """Row numbers as an arrow array made from their buffer: not pa.array, which imports pandas at its
    first call in a process (conversations_of says why a worker should not)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


@dataclass(frozen=True)
class SpilledBatch:
    """Consecutive conversations of the stream named by where they lie in the bucket files, not by
    their text: what the driver hands a local worker process, which reads them itself. The driver's
    one thread then neither decodes the messages to Python nor pickles them, and the reading is
    spread over the workers. `read()` gives the conversations, malformed ones marked (records.problems.marked)."""
    pieces: tuple[tuple[Path, np.ndarray], ...]  # (bucket file, its rows in stream order)
    malformed: dict[int, BadConversation]  # by source row index: the batch's conversations that are malformed

    def read(self) -> list[Conversation]:
        out = [c for path, rows in self.pieces for c in conversations_of(_rows_of(open_bucket(path), rows))]
        return list(marked(out, self.malformed))

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self.pieces)
