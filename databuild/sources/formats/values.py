"""The Arrow building blocks every format's adapter (formats/adapter.py) shares: a batch's messages
flat (`Flat`) and as the normalised messages column (record_arrow.SOURCE_SCHEMA), Python values read from
Arrow without raising on bytes that are not UTF-8, and the conversion of a message's other fields and
of a tools list to the record's normalised text."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..buffers import present
from ..json_rows import KEY_ORDER, decoded, has_json
from ..record import fields_text, tools_text
from ..record_arrow import MESSAGE, SOURCE_SCHEMA
from .structs import json_struct, without_nulls

MESSAGES = SOURCE_SCHEMA.field("messages").type  # list<struct<content, role, fields>>
INVALID_UTF8 = object()  # stands for a value Arrow holds as bytes that are not UTF-8


def is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def python_values(values: pa.Array) -> list:
    """values.to_pylist(), a string that is not UTF-8 given as INVALID_UTF8 instead of raising; Json
    (`datasets`' type, anywhere in the values) as the values it holds (sources/json_rows.decoded)."""
    if has_json(values.type):
        return [decoded(value, values.type, strict=False) for value in values.to_pylist()]
    try:
        return values.to_pylist()
    except (UnicodeDecodeError, pa.ArrowException):
        out = []
        for i in range(len(values)):
            try:
                out.append(values[i].as_py())
            except (UnicodeDecodeError, pa.ArrowException):
                out.append(INVALID_UTF8)
        return out


def row_of(offsets: np.ndarray, item: int) -> int:
    return int(np.searchsorted(offsets, item, side="right")) - 1


@dataclass(frozen=True)
class Flat:
    """A batch's messages, flat: row i's are items offsets[i]:offsets[i+1]; `fields` the normalised
    text of each item's other fields (null for none); `problems` the refused rows, with why; `dropped`
    the keys with a null value dropped from structs (formats/structs.py), by row."""
    offsets: np.ndarray
    roles: pa.Array
    contents: pa.Array
    fields: pa.Array
    problems: dict[int, str]
    dropped: Counter = field(default_factory=Counter)

    def lists(self) -> pa.Array:
        items = pa.StructArray.from_arrays([self.contents, self.roles, self.fields], fields=list(MESSAGE))
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), items, type=MESSAGES)



def one_turn(values: pa.Array, role: str) -> Flat:
    """A string column as one `role` message per row holding the string (no message where it is null)."""
    present = values.is_valid().to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(present, dtype=np.int64)])
    contents = values.drop_null().cast(pa.string())
    return Flat(offsets, pa.array([role] * len(contents), pa.string()), contents, pa.nulls(len(contents), pa.string()),
                {})


def joined(parts: list[Flat], rows: int, problems: dict[int, str], dropped: Counter) -> Flat:
    """Several columns' messages as one conversation per row: row by row, each part's messages in turn (a
    stable sort of the items by row)."""
    of_row = np.concatenate([np.repeat(np.arange(rows), np.diff(part.offsets)) for part in parts])
    order = pa.array(np.argsort(of_row, kind="stable"))
    roles, contents, fields = (pa.concat_arrays([getattr(part, name).cast(pa.string()) for part in parts]).take(order)
                               for name in ("roles", "contents", "fields"))
    return Flat(sum(part.offsets for part in parts), roles, contents, fields, problems, dropped)


def message_fields(flat: pa.Array, roles: pa.Array, offsets: np.ndarray, carried: dict[str, str],
                   problems: dict[int, str], dropped: Counter) -> pa.Array:
    """The normalised `fields` text of each item (null where none is set): Python work only for
    the messages that carry more than role and content."""
    if not carried:
        return pa.nulls(len(flat), pa.string())
    children = {record: pc.struct_field(flat, source) for source, record in carried.items()}
    valid = np.zeros(len(flat), dtype=bool)
    for child in children.values():
        valid[present(child)] = True
    items = np.flatnonzero(valid)
    if not len(items):
        return pa.nulls(len(flat), pa.string())
    taken = pa.array(items)
    values = {record: python_values(child.take(taken)) for record, child in children.items()}
    orders = (pc.struct_field(flat, KEY_ORDER).take(taken).to_pylist()
              if KEY_ORDER in [child.name for child in flat.type] else [None] * len(items))
    structured = {record: child.type for record, child in children.items() if json_struct(child.type, "")}
    texts: list[str | None] = [None] * len(flat)
    for k, (item, role) in enumerate(zip(items.tolist(), python_values(roles.take(taken)))):
        message = {record: column[k] for record, column in values.items()}
        if orders[k] is not None:  # a JSON message's own key order (sources/json_rows.py)
            message = {**{carried[key]: message[carried[key]] for key in orders[k] if key in carried}, **message}
        for record, kind in structured.items():
            if message[record] is not None and message[record] is not INVALID_UTF8:
                message[record], count = without_nulls(message[record], kind)
                if count:
                    dropped[row_of(offsets, item)] += count
        text, problem = fields_text(message, role) if INVALID_UTF8 not in message.values() else (
            None, f"{next(r for r, v in message.items() if v is INVALID_UTF8)} is not valid UTF-8")
        if problem is not None:
            row = row_of(offsets, item)
            problems.setdefault(row, f"message {item - offsets[row]}: {problem}")
        texts[item] = text
    return pa.array(texts, pa.string())


def tools_texts(column: pa.Array, problems: dict[int, str], dropped: Counter) -> pa.Array:
    """The normalised `tools` text of each row of a tools column (null: no tools list), refusing what is
    not one; the keys with a null value dropped from its structs (struct_nulls: drop) counted into `dropped`."""
    rows = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))
    texts: list[Any] = [None] * len(column)
    structured = json_struct(column.type, "") is not None
    for row, value in zip(rows.tolist(), python_values(column.take(pa.array(rows)))):
        if structured and value is not INVALID_UTF8:
            value, count = without_nulls(value, column.type)
            dropped[row] += count
        text, problem = (None, "tools is not valid UTF-8") if value is INVALID_UTF8 else tools_text(value)
        if problem is not None:
            problems.setdefault(row, problem)
        texts[row] = text
    return pa.array(texts, pa.string())

