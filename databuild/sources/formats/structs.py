"""Parquet structs where the record holds JSON values: a struct column holds one set of keys for every
row of a file (the union of what the rows that wrote it had), null where a row had none, so a struct
cannot say which keys a row really wrote. Rendered as it is, every tool call would show other tools'
parameters as null (`{"city": null, "timezone": "Europe/Berlin", ...}`) and the model would learn to
write them.

Two places differ:
- **A call's frame** (the call object and its `function` object: `id`, `type`, `function`, `name`,
  `arguments`) is the record's own shape, whose keys it knows: a null there is a key the call does not
  have (a flat call beside a wrapped one in one struct has `function: null`; a wrapped one `name: null`),
  and is dropped, always.
- **JSON values**: what the template writes as JSON or reads key by key (a call's `arguments` and any
  other key of a call, a content's parts, the conversation's `tools`). A struct or map there refuses the
  file, naming the column, unless the source declares `struct_nulls: drop`: then every key whose value is
  null in those structs is dropped (a null a row did write is dropped too: the struct cannot tell them
  apart), and counted.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import pyarrow as pa


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def json_struct(kind: pa.DataType, where: str) -> str | None:
    """The path of the first struct or map at or below `kind` (named from `where`), or None."""
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        return where
    if _is_list(kind):
        return json_struct(kind.value_type, f"{where}[]")
    return None


def call_structs(kind: pa.DataType, where: str) -> str | None:
    """The first struct holding JSON values in a `tool_calls` field of type `kind`: below the frame."""
    if not _is_list(kind) or not pa.types.is_struct(kind.value_type):
        return json_struct(kind, where) if _is_list(kind) or pa.types.is_struct(kind) else None
    for child in kind.value_type:
        path = f"{where}[].{child.name}"
        if child.name == "function" and pa.types.is_struct(child.type):
            for inner in child.type:
                found = json_struct(inner.type, f"{path}.{inner.name}")
                if found is not None:
                    return found
        elif (found := json_struct(child.type, path)) is not None:
            return found
    return None


def struct_refusal(path: str, kind: pa.DataType) -> str:
    return (f"{path} is a parquet {'map' if pa.types.is_map(kind) else 'struct'}, which holds every row's keys, "
            "null where a row had none, and cannot say which keys a row wrote; store it as JSON text (a string) or "
            "as datasets' Json type, or set struct_nulls: drop on the source to drop the keys whose value is null "
            "in it (counted)")


def without_nulls(value: Any, kind: pa.DataType) -> tuple[Any, int]:
    """`value` (Python values of Arrow type `kind`) with the keys whose value is null dropped from every
    object that was a struct, and how many were dropped. (Only frames and, under `struct_nulls: drop`,
    JSON values are structs: any other struct refused the file.)"""
    return _dropper(kind)(value)


@lru_cache(maxsize=256)
def _dropper(kind: pa.DataType) -> Callable[[Any], tuple[Any, int]]:
    """without_nulls for values of `kind`, the type's shape read once, not at every value (a source's
    messages share a few types, and each of their tool calls is walked)."""
    if _is_list(kind):
        inner = _dropper(kind.value_type)

        def from_list(value):
            if value is None:
                return None, 0
            out, dropped = [], 0
            for item in value:
                item, n = inner(item)
                out.append(item)
                dropped += n
            return out, dropped
        return from_list
    if pa.types.is_struct(kind):
        children = [(child.name, _dropper(child.type)) for child in kind]

        def from_struct(value):
            if not isinstance(value, dict):  # None, or a value of another shape: as it is
                return value, 0
            out, dropped = {}, 0
            for name, inner in children:
                if value.get(name) is None:
                    dropped += 1
                    continue
                out[name], n = inner(value[name])
                dropped += n
            return out, dropped
        return from_struct
    return _as_it_is


def _as_it_is(value: Any) -> tuple[Any, int]:
    return value, 0
