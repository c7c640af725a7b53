"""What every format shares: the `Adapter` base, which reads the `id`, `source` and `tools` columns (or
their stand-ins) the same way for every format, checks a message list's schema, refuses the columns
and fields the format does not know, and builds a batch in the normalised record (record_arrow.SOURCE_SCHEMA)
from the Arrow building blocks in formats/values.py."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import quoted
from ...records.problems import FileRows
from ..buffers import lengths, present
from ..json_rows import KEY_ORDER, json_array
from ..record import EXTRA_FIELDS
from ..record_arrow import SOURCE_SCHEMA, json_type_problem
from ..tool_checks import DataRules
from .structs import call_structs, json_struct, struct_refusal
from .values import Flat, is_list, is_string, message_fields, python_values, row_of, tools_texts


class Adapter:
    """One source format: which columns hold the messages, how a file's schema must look, and each
    batch's messages in the normalised form. `id`, `source` and `tools` are read the same way for
    every format: an `id` column (string, or integers written in decimal) if the file has one, else
    the stable id `{repo}/{file}#{row}`; a `source` column if the file has one, else the repo; a
    tools column (`tools`, or as mapped) if the file has one: a list of function schemas, typed or
    as JSON text. A column or message field the format does not know is refused unless the config's
    `ignore_fields` names it."""

    ignore: frozenset[str] = frozenset()  # the config's ignore_fields
    rules: DataRules = DataRules()  # the config's data rules (struct_nulls and the tool-call checks)
    message_columns: tuple[str, ...] = ()
    tools: str = "tools"  # the column of the conversation's tools list
    record_fields: tuple[tuple[str, str], ...] = tuple((name, name) for name in EXTRA_FIELDS)  # (record, file)
    content_parts: bool = True  # whether a message's content may be a list of parts (sharegpt's values are text)

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        raise NotImplementedError

    def to_messages(self, batch: pa.RecordBatch) -> Flat:
        raise NotImplementedError

    def expects(self) -> str:
        raise NotImplementedError

    def schema_problem(self, schema: pa.Schema) -> str | None:
        problem = self.message_schema_problem(schema)
        for column in ("id", "source"):
            kind = schema.field(column).type if column in schema.names else None
            if problem is None and kind is not None and not is_string(kind) and not (
                    column == "id" and pa.types.is_integer(kind)):
                problem = f"column '{column}' is {kind}" + (  # JSON rows' values, no one type (sources/json_rows)
                    f": its values in these rows are not all strings{' nor all integers' if column == 'id' else ''}"
                    if isinstance(kind, pa.JsonType) else "")
        if problem is None and self.tools in schema.names and self.tools not in self.ignore:
            kind = schema.field(self.tools).type
            if not (is_string(kind) or is_list(kind) or pa.types.is_null(kind)  # null: none has tools
                    or isinstance(kind, pa.JsonType)):
                problem = f"column '{self.tools}' is {kind}, not a list of function schemas or its JSON text"
            else:
                problem = json_type_problem(kind, f"column '{self.tools}'")
            found = json_struct(kind, f"column '{self.tools}'")
            if problem is None and found is not None and self.rules.struct_nulls != "drop":
                problem = struct_refusal(found, kind)
        if problem is not None:
            return f"{problem} (expected {self.expects()})"
        unknown = [name for name in self.unread_columns(schema) if name not in self.ignore]
        if unknown:
            known = set(self.message_columns) | {"id", "source", self.tools} | self.ignore
            return (f"column {quoted(unknown[0])} is not one this format reads (it reads {', '.join(sorted(known))}); "
                    "list it in the source's ignore_fields to build without it")
        return None

    def unread_columns(self, schema: pa.Schema) -> tuple[str, ...]:
        """The schema's columns this format does not read (ignore_fields aside: a build refuses the rest)."""
        return tuple(name for name in schema.names if name not in {*self.message_columns, "id", "source", self.tools})

    def read_columns(self, schema: pa.Schema) -> list[str]:
        return [c for c in (*self.message_columns, "id", "source", self.tools)
                if c in schema.names and c not in self.ignore]

    def message_struct_problem(self, schema: pa.Schema, column: str, role: str, content: str) -> str | None:
        """Why `column` is not a list of structs with string `role` and `content` and fields of JSON
        values, or None. Fields the record does not carry are refused row by row, where they hold a value."""
        if column not in schema.names:
            return f"missing column '{column}'"
        kind = schema.field(column).type
        if not is_list(kind) or not pa.types.is_struct(kind.value_type):
            return f"column '{column}' is {kind}"
        for key in (role, content):
            index = kind.value_type.get_field_index(key)
            if index < 0:
                return f"{column} lack field '{key}'"
            value_type = kind.value_type.field(index).type
            if not is_string(value_type) and not (key == content and self.content_parts and (
                    is_list(value_type) or isinstance(value_type, pa.JsonType))):
                return f"{column} field '{key}' is {value_type}, not string" + (
                    " or a list of parts" if key == content and self.content_parts else "")
        carried = {source for _, source in self.record_fields} | ({content} if self.content_parts else set())
        for child in kind.value_type:
            if child.name in carried:
                problem = json_type_problem(child.type, f"{column} field '{child.name}'")
                if problem is not None:
                    return problem
        return None if self.rules.struct_nulls == "drop" else self.json_struct_problem(kind.value_type, column, content)

    def json_struct_problem(self, message: pa.StructType, column: str, content: str) -> str | None:
        """The refusal of a struct where the record holds JSON values (formats/structs.py): in a content's
        parts, or in a tool call below its frame."""
        tool_calls = dict(self.record_fields)["tool_calls"]
        for child in message:
            where = f"{column} field '{child.name}'"
            found = (json_struct(child.type, where) if child.name == content else
                     call_structs(child.type, where) if child.name == tool_calls and child.name not in self.ignore
                     else None)
            if found is not None:
                return struct_refusal(found, child.type)
        return None

    def flat_messages(self, lists: pa.Array, role: str, content: str) -> Flat:
        """A list-of-struct column, flat: the record's fields carried, unknown ones refused where set."""
        offsets = np.concatenate([[0], np.cumsum(lengths(lists), dtype=np.int64)])
        flat = pc.list_flatten(lists)
        problems: dict[int, str] = {}
        roles = self.record_roles(pc.struct_field(flat, role).cast(pa.string()), offsets, problems)
        names = [child.name for child in flat.type]
        record_of = {source: record for record, source in self.record_fields}
        carried = {name: record_of[name] for name in names if name in record_of and name not in self.ignore}
        contents = pc.struct_field(flat, content)
        if isinstance(contents.type, pa.JsonType):  # rows of JSON: each message's a string or a list of parts
            values = python_values(contents)
            parts = json_array([None if isinstance(v, str) else v for v in values])
            flat = pa.StructArray.from_arrays([parts if name == content else flat.field(name) for name in names],
                                              names=names, mask=flat.is_null())
            carried = {content: "content", **carried}
            contents = pa.array([v if isinstance(v, str) else None for v in values], pa.string())
        elif is_list(contents.type):  # a list of parts: carried in `fields`, the content column null
            carried = {content: "content", **carried}
            contents = pa.nulls(len(flat), pa.string())
        for name in names:
            if name in (role, content, KEY_ORDER) or name in carried or name in self.ignore:
                continue
            for item in present(pc.struct_field(flat, name)).tolist():
                row = row_of(offsets, item)
                carries = ", ".join(dict.fromkeys((role, content, *carried)))
                problems.setdefault(row, f"message {item - offsets[row]}: unknown field {quoted(name)} (the record "
                                         f"carries {carries}; list it in the source's ignore_fields to build without it)")
        dropped: Counter = Counter()
        fields = message_fields(flat, roles, offsets, carried, problems, dropped)
        return Flat(offsets, roles, contents.cast(pa.string()), fields, problems, dropped)

    def record_roles(self, roles: pa.Array, offsets: np.ndarray, problems: dict[int, str]) -> pa.Array:
        """The role values as the record spells them (here: as written; the reader checks them)."""
        return roles

    def tools_column(self, batch: pa.RecordBatch, problems: dict[int, str], dropped: Counter) -> pa.Array:
        """The normalised `tools` text of each row (null: no tools list), refusing what is not one; the
        keys with a null value dropped from its structs (struct_nulls: drop) counted into `dropped`."""
        if self.tools not in batch.schema.names or self.tools in self.ignore:
            return pa.nulls(batch.num_rows, pa.string())
        return tools_texts(batch.column(self.tools), problems, dropped)

    def normalise(self, batch: pa.RecordBatch, file: FileRows,
                  offset: int) -> tuple[pa.RecordBatch, dict[int, str], Counter]:
        """The batch (whose first row is source row `offset`) as SOURCE_SCHEMA, its refused rows, and
        the keys with a null value dropped from structs, by row (formats/structs.py)."""
        flat = self.to_messages(batch)
        problems, dropped = flat.problems, Counter(flat.dropped)
        tools = self.tools_column(batch, problems, dropped)
        n, names = batch.num_rows, batch.schema.names
        if "id" in names:
            ids = batch.column("id").cast(pa.string())
        else:
            first = offset - file.first_index
            ids = pa.array([f"{file.source}/{file.name}#{row}" for row in range(first, first + n)], pa.string())
        sources = batch.column("source").cast(pa.string()) if "source" in names else pa.array([file.source] * n,
                                                                                                pa.string())
        return pa.RecordBatch.from_arrays([ids, flat.lists(), sources, tools], schema=SOURCE_SCHEMA), problems, dropped
