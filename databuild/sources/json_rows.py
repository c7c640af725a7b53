"""JSON values into Arrow, exactly: rows parsed from JSON files, and `datasets`' Json columns
(`extension<arrow.json>`) of a parquet file, as batches the formats' adapters read.

Arrow's own JSON reader (and `datasets`' json builder on it) infers one table schema and unifies
keys: an object becomes a struct holding every key any row had, null where a row had none. Here no
value is unified. A message column (the adapter's `message_columns`) becomes a list of structs whose
fields are the message's keys, strings where every value is a string, else Json holding each
value's JSON text; a message that lacks a key has null there, which the record reads as absent
(sources/record.py). Every other column is a string column where every value is a string, an
int64 column where every value is an integer that fits (an `id`), else Json: each row's value
whole, its keys, their order and its numbers as written (sources/record.parse_json).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any, Iterable, Iterator, Protocol

import pyarrow as pa

from .json_files import Unparsed
from .json_files import rows as json_file_rows
from .record import _type, parse_json


class Adapter(Protocol):
    """What of a format (sources/formats: the formats import this module) the batches are built for."""
    message_columns: tuple[str, ...]
    content_parts: bool
    ignore: frozenset[str]

INT64 = (-(1 << 63), (1 << 63) - 1)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def json_array(values: list) -> pa.Array:
    """Python values as a Json column (null where None)."""
    return pa.ExtensionArray.from_storage(pa.json_(), pa.array(
        [None if v is None else _dumps(v) for v in values], pa.string()))


def _all(values: Iterable, kind: type | tuple[type, ...]) -> bool:
    return all(v is None or isinstance(v, kind) and not isinstance(v, bool) for v in values)


def _scalars(values: list) -> pa.Array:
    """Strings, integers of an id, or Json."""
    if _all(values, str):
        return pa.array(values, pa.string())
    if _all(values, int) and all(v is None or INT64[0] <= v <= INT64[1] for v in values):
        return pa.array(values, pa.int64())
    return json_array(values)


def _messages(lists: list, strings: dict[str, bool], problems: dict[int, str]) -> pa.Array:
    """A message column: list<struct<the format's role and content (`strings`), then each key in the
    order keys first appear>>; a field `strings` marks True always strings, refusing the row where
    one is not."""
    if _all(lists, str) and any(v is not None for v in lists):  # prompt_completion's one-turn form
        return pa.array(lists, pa.string())
    lists = [_message_list(row, value, problems) for row, value in enumerate(lists)]
    keys: dict[str, None] = dict.fromkeys(strings)
    for messages in lists:
        for message in messages or ():
            keys.update(dict.fromkeys(message))
    flat = [m for messages in lists if messages is not None for m in messages]
    offsets = [0]
    for messages in lists:
        offsets.append(offsets[-1] + len(messages or ()))
    children = []
    for key in keys:
        values = [m.get(key) for m in flat]
        if strings.get(key):
            for item, value in enumerate(values):
                if value is not None and not isinstance(value, str):
                    row = bisect.bisect_right(offsets, item) - 1
                    problems.setdefault(row, f"message {item - offsets[row]}: {key} is {_type(value)}, not a string")
                    values[item] = None
        children.append(pa.array(values, pa.string()) if _all(values, str) else json_array(values))
    names = list(keys)
    orders = [_own_order(m, keys, strings) for m in flat]
    if any(order is not None for order in orders):
        children.append(pa.array(orders, pa.list_(pa.string())))
        names.append(KEY_ORDER)
    items = pa.StructArray.from_arrays(children, names=names)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, mask=pa.array([v is None for v in lists]))


# A message's keys beside role and content in its own order, where that is not the struct's (the
# order keys first appear in the batch): the adapter gives the record the message's order (its fields'
# JSON text keeps it). Only in batches built here, never in a file.
KEY_ORDER = "\x00key order"


def _own_order(message: dict, keys: dict[str, None], strings: dict[str, bool]) -> list[str] | None:
    own = [key for key in message if key not in strings]
    return None if own == [key for key in keys if key in message and key not in strings] else own


def _message_list(row: int, value: Any, problems: dict[int, str]) -> list | None:
    """The row's messages, or None (the row refused) where they are not a list of objects."""
    if value is None:
        return None
    if not isinstance(value, list):
        problems.setdefault(row, f"{_type(value)} in place of a list of messages")
        return None
    for number, message in enumerate(value):
        if not isinstance(message, dict):
            problems.setdefault(row, f"message {number} is {_type(message)}, not an object"
                                     + (_TWICE if isinstance(message, str) and message.startswith("{") else ""))
            return None
    return value


# What `datasets` 5.2.0 writes when it falls back to Arrow's JSON reader (an integer beyond int64, say)
_TWICE = " (a Json value holding a message's JSON text as a string: encoded twice; write it again as an object)"


def rows_batch(rows: list[Any], message_columns: tuple[str, ...], strings: dict[str, bool],
               problems: dict[int, str]) -> pa.RecordBatch:
    """Rows (JSON values, each an object) as a batch: a column per key, in the order keys first
    appear; a row that is not an object is refused (into `problems`, by row) and has nulls."""
    keys: dict[str, None] = {}
    for row, value in enumerate(rows):
        if isinstance(value, dict):
            keys.update(dict.fromkeys(value))
        else:
            problems.setdefault(row, f"a JSON {_type(value).removeprefix('a ').removeprefix('an ')}, not an object")
    objects = [value if isinstance(value, dict) else {} for value in rows]
    columns = [_column(key, [o.get(key) for o in objects], message_columns, strings, problems) for key in keys]
    return pa.RecordBatch.from_arrays(columns, names=list(keys)) if keys else \
        pa.RecordBatch.from_pydict({"id": pa.nulls(len(rows), pa.string())})


def _column(key: str, values: list, message_columns: tuple[str, ...], strings: dict[str, bool],
            problems: dict[int, str]) -> pa.Array:
    return _messages(values, strings, problems) if key in message_columns else _scalars(values)


def has_json(kind: pa.DataType) -> bool:
    """Whether `kind` holds a Json value anywhere."""
    if isinstance(kind, pa.JsonType):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return has_json(kind.value_type)
    return pa.types.is_struct(kind) and any(has_json(child.type) for child in kind)


def json_messages(schema: pa.Schema, message_columns: tuple[str, ...]) -> list[str]:
    """The message columns that hold their messages as Json (the whole list, or each message): those
    are rebuilt as JSON rows' are (decode_json_columns). Json deeper in a column (a struct's field) is
    read where the adapter reads the field (python_values)."""
    return [field.name for field in schema if field.name in message_columns and (
        isinstance(field.type, pa.JsonType) or _is_list(field.type) and isinstance(field.type.value_type, pa.JsonType))]


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def decoded(value: Any, kind: pa.DataType, strict: bool = True) -> Any:
    """A Python value of an Arrow value of type `kind`, each Json text in it parsed (parse_json); not
    `strict`, a text that does not parse is kept as that string (where the record wants JSON there,
    it refuses it, named)."""
    if value is None:
        return None
    if isinstance(kind, pa.JsonType):
        if strict:
            return parse_json(value)
        try:
            return parse_json(value)
        except ValueError:
            return value
    if _is_list(kind):
        return [decoded(v, kind.value_type, strict) for v in value]
    if pa.types.is_struct(kind):
        return {child.name: decoded(value[child.name], child.type, strict) for child in kind}
    return value


def decode_json_columns(batch: pa.RecordBatch, message_columns: tuple[str, ...], strings: dict[str, bool],
                        problems: dict[int, str]) -> pa.RecordBatch:
    """The batch with every message column that holds Json (json_messages) rebuilt as JSON rows' are
    (rows_batch): the values it holds, read exactly; a Json text that does not parse refuses its row."""
    names = json_messages(batch.schema, message_columns)
    if not names:
        return batch
    return pa.RecordBatch.from_arrays(
        [_messages(decoded_values(column, name, problems), strings, problems) if name in names else column
         for name, column in zip(batch.schema.names, batch.columns)], names=batch.schema.names)


def decoded_values(column: pa.Array, name: str, problems: dict[int, str]) -> list:
    """The column's Python values, each Json text in them parsed; a text that does not parse refuses its row."""
    values = []
    for row, value in enumerate(column.to_pylist()):  # Json as its text, at any depth
        try:
            values.append(decoded(value, column.type))
        except (ValueError, UnicodeDecodeError) as exc:
            problems.setdefault(row, f"column '{name}' holds Json text that does not parse ({exc})")
            values.append(None)
    return values


def message_strings(adapter: Adapter) -> dict[str, bool]:
    """The format's role and content fields, each with whether it must be a string (the content may be a
    list of parts where the format takes them)."""
    return {getattr(adapter, "role", "role"): True, getattr(adapter, "content", "content"): not adapter.content_parts}


def json_batches(path: Path, name: str, adapter: Adapter,
                 size: int) -> Iterator[tuple[pa.RecordBatch, dict[int, str], bool]]:
    """A JSON file's rows (sources/json_files.py) in batches of `size`, as rows_batch builds them for
    the format: (batch, rows refused, True: its schema is the batch's own), a row that is not one
    refused naming its line."""
    values, lines = [], []
    for line, value in json_file_rows(path, name):
        values.append(value)
        lines.append(line)
        if len(values) == size:
            yield _json_batch(adapter, values, lines)
            values, lines = [], []
    if values:
        yield _json_batch(adapter, values, lines)


def _json_batch(adapter: Adapter, values: list, lines: list[int]) -> tuple[pa.RecordBatch, dict[int, str], bool]:
    problems = {row: value.reason for row, value in enumerate(values) if isinstance(value, Unparsed)}
    batch = rows_batch([None if isinstance(v, Unparsed) else v for v in values], adapter.message_columns,
                       message_strings(adapter), problems)
    batch = batch.select([name for name in batch.schema.names if name not in adapter.ignore])
    return batch, {row: reason if reason.startswith("line ") else f"line {lines[row]}: {reason}"
                   for row, reason in problems.items()}, True
