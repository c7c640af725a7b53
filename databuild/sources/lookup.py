"""Conversations found by id in a build's sources, read as the build reads them (each file's format
through its adapter): what `show` and `report` re-render to mark a row's tool calls, tool results
and reasoning from the record (views/record_marks.py). One pass over the files, stopped once every
id wanted is found; the build's stream order is not needed, only the records.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..records.conversation import Conversation
from .reader import SourceFile, iter_batches
from .record import COLUMNS
from .row_checks import with_valid_utf8
from .spilled import conversations_of


def find_by_id(files: Iterable[SourceFile], ids: set[str]) -> dict[str, list[Conversation]]:
    """The conversations of `files` whose id is one of `ids`, by id, in source order, read until every
    id is found (an id the source repeats has those of its rows read by then)."""
    found: dict[str, list[Conversation]] = {}
    wanted = pa.array(sorted(ids), pa.string())
    for file in files:
        for offset, batch, _, _ in iter_batches(file):
            rows = np.flatnonzero(pc.is_in(batch.column("id"), value_set=wanted).to_numpy(zero_copy_only=False))
            if not len(rows):
                continue
            taken = with_valid_utf8(batch.take(pa.array(rows)))
            table = pa.Table.from_batches([pa.RecordBatch.from_arrays(
                [taken.column(c) for c in COLUMNS] + [pa.array(np.full(len(rows), -1)), pa.array(rows + offset)],
                names=COLUMNS + ["position", "index"])])
            for conversation in conversations_of(table):
                found.setdefault(conversation.origin.id, []).append(conversation)
            if ids <= found.keys():
                return found
    return found
