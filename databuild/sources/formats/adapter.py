"""What every format shares: the `id` and `source` columns (or their stand-ins), the schema checks of
a message list, and the Arrow building blocks of the normalised messages column."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..reader import SOURCE_SCHEMA

if TYPE_CHECKING:
    from ..reader import SourceFile

MESSAGES = SOURCE_SCHEMA.field("messages").type  # list<struct<content: string, role: string>>


def is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def message_list_problem(schema: pa.Schema, column: str, role: str, content: str) -> str | None:
    """Why `column` is not a list of structs with string fields `role` and `content`, or None."""
    if column not in schema.names:
        return f"missing column '{column}'"
    kind = schema.field(column).type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
        return f"column '{column}' is {kind}"
    for key in (role, content):
        index = kind.value_type.get_field_index(key)
        if index < 0:
            return f"{column} lack field '{key}'"
        if not is_string(kind.value_type.field(index).type):
            return f"{column} field '{key}' is {kind.value_type.field(index).type}, not string"
    return None


def flat_messages(lists: pa.Array, role: str, content: str) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(offsets, roles, contents) of a list-of-struct column: row i's messages are items
    offsets[i]:offsets[i+1]; a null list has none."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(lists)
    return (np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]),
            pc.struct_field(flat, role).cast(pa.string()), pc.struct_field(flat, content).cast(pa.string()))


def message_lists(offsets: np.ndarray, roles: pa.Array, contents: pa.Array) -> pa.Array:
    """The normalised messages column from flat roles and contents cut at offsets."""
    items = pa.StructArray.from_arrays([contents, roles],
                                       fields=list(MESSAGES.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=MESSAGES)


class Adapter:
    """One source format: which columns hold the messages, how a file's schema must look, and each
    batch's messages in the normalised form. `id` and `source` are read the same way for every format:
    an `id` column (string, or integers written in decimal) if the file has one, else the stable id
    `{repo}/{file}#{row}`; a `source` column if the file has one, else the repo."""

    message_columns: tuple[str, ...] = ()

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        raise NotImplementedError

    def to_messages(self, batch: pa.RecordBatch) -> tuple[pa.Array, dict[int, str]]:
        """Each row's messages (normalised), and the rows (within the batch) the format refuses, with why."""
        raise NotImplementedError

    def expects(self) -> str:
        raise NotImplementedError

    def schema_problem(self, schema: pa.Schema) -> str | None:
        problem = self.message_schema_problem(schema)
        for column in ("id", "source"):
            kind = schema.field(column).type if column in schema.names else None
            if problem is None and kind is not None and not is_string(kind) and not (
                    column == "id" and pa.types.is_integer(kind)):
                problem = f"column '{column}' is {kind}"
        return None if problem is None else f"{problem} (expected {self.expects()})"

    def read_columns(self, schema: pa.Schema) -> list[str]:
        return list(self.message_columns) + [c for c in ("id", "source") if c in schema.names]

    def normalise(self, batch: pa.RecordBatch, file: SourceFile, offset: int) -> tuple[pa.RecordBatch, dict[int, str]]:
        """The batch (whose first row is source row `offset`) as SOURCE_SCHEMA, and its refused rows."""
        messages, problems = self.to_messages(batch)
        n, names = batch.num_rows, batch.schema.names
        if "id" in names:
            ids = batch.column("id").cast(pa.string())
        else:
            first = offset - file.first_index
            ids = pa.array([f"{file.source}/{file.name}#{row}" for row in range(first, first + n)], pa.string())
        sources = batch.column("source").cast(pa.string()) if "source" in names else pa.array([file.source] * n,
                                                                                                pa.string())
        return pa.RecordBatch.from_arrays([ids, messages, sources], schema=SOURCE_SCHEMA), problems
