"""A source's format, read off its parquet schema (a JSON file's, and a parquet file's with Json
columns, as the reader builds it from the first rows): each format's own schema check (sources/formats,
so a format added there is detected here unasked), else one list-of-struct column whose items have
one role-like and one content-like string field (a column mapping). Two candidates, or none, are
the user's to decide: the error names --format. Tool and reasoning fields are named for the comment.

A preference source (issue 34) is told first, by its columns, TRL's way (trl/data_utils.py,
huggingface/trl@f2cd5771: maybe_extract_prompt, maybe_unpair_preference_dataset): `chosen` and
`rejected` make a pair, `completion` and `label` beside `prompt` an unpaired row; a pair with a `prompt`
of the same form as its completions (both messages, or both strings) has an explicit prompt
(`preference`), else its prompt is implicit (`preference_implicit`, any `prompt` column left unread, as
TRL leaves it). Both shapes in one file are refused, naming the columns. Otherwise the SFT formats are
tried: their prompt_completion would read an unpaired file's prompt and completion with its label left
out, which is why a preference file never reaches them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..sources.formats import FORMATS, PREFERENCE_FORMATS
from ..sources.formats.adapter import Adapter
from ..sources.formats.messages import MessageColumn
from ..sources.formats.values import is_string
from ..sources.tool_checks import DataRules
from ..sources.json_files import Unparsed, is_json
from ..sources.json_files import rows as json_rows
from ..sources.json_rows import decode_json_columns, decoded_values, json_messages, rows_batch

ROLE_FIELDS = ("role", "from", "speaker", "author")
CONTENT_FIELDS = ("content", "value", "text")
SAMPLE_ROWS = 1000  # of a JSON file, or of a parquet file with Json columns: what the formats are tried on
TOOL_FIELDS = ("tool_calls", "tool_call_id", "name", "reasoning_content", "thinking", "reasoning", "function_call")


@dataclass(frozen=True)
class Detected:
    format: str | dict[str, str]  # as the config spells it
    why: str  # for the comment: what decided it
    extras: tuple[str, ...]  # tool or reasoning fields, and a tools column, the schema holds
    unread: tuple[str, ...] = ()  # columns the format does not read: written as ignore_fields, with a comment
    structs: str | None = None  # where the format reads the file only under struct_nulls: drop, the refusal
    task: str = "sft"  # preference: a preference format (the config's task: preference)


def _fits(adapter: Adapter, schema: pa.Schema) -> bool:
    """The format reads the schema, columns it does not read aside."""
    return _fits_problem(adapter, schema) is None


def _fits_problem(adapter: Adapter, schema: pa.Schema) -> str | None:
    """Why the format does not read the schema, columns it does not read aside; None where it does."""
    return replace(adapter, ignore=frozenset(adapter.unread_columns(schema))).schema_problem(schema)


def _detect_structs(schema: pa.Schema, given: str) -> Detected | None:
    """The format that reads the schema only with struct_nulls: drop (a struct where the record holds
    JSON values: `datasets` writes one for a tools list whose schemas share their keys), or None."""
    drop = DataRules(struct_nulls="drop")
    named = [name for name, adapter in FORMATS.items() if _fits(replace(adapter, rules=drop), schema)]
    if len(named) != 1:
        return None
    adapter = FORMATS[named[0]]
    refusal = replace(adapter, ignore=frozenset(adapter.unread_columns(schema))).schema_problem(schema) or ""
    return Detected(named[0], f"detected from the schema (columns {', '.join(adapter.message_columns)})",
                    _extras(schema, list(adapter.message_columns)), adapter.unread_columns(schema),
                    refusal.split(" is a parquet ")[0])


def _mappings(schema: pa.Schema) -> list[dict[str, str]]:
    """Column mappings {messages, role, content} that the schema fits unambiguously."""
    found = []
    for field in schema:
        kind = field.type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
            continue
        strings = {f.name for f in kind.value_type if is_string(f.type)}
        roles, contents = [r for r in ROLE_FIELDS if r in strings], [c for c in CONTENT_FIELDS if c in strings]
        if len(roles) == 1 and len(contents) == 1:
            found.append({"messages": field.name, "role": roles[0], "content": contents[0]})
    return found


def _extras(schema: pa.Schema, columns: list[str]) -> tuple[str, ...]:
    extras = []
    for column in columns:
        kind = schema.field(column).type if column in schema.names else None
        if kind is not None and (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and \
                pa.types.is_struct(kind.value_type):
            extras += [f"{column}.{f.name}" for f in kind.value_type if f.name in TOOL_FIELDS]
    return tuple(extras + (["tools column"] if "tools" in schema.names else []))


def _lists_of_objects(rows: list) -> tuple[str, ...]:
    """The keys that hold messages: most of their values (where set) lists of objects, some object of which
    has a role-like key (a tools list's objects have none: it stays JSON values, as the reader keeps it).
    A message without its role, a string in place of the list or of a message: a bad row the build skips
    and counts (json_rows names it), not another format; a few in the sample do not hide the column."""
    keys = dict.fromkeys(k for row in rows if isinstance(row, dict) for k in row)
    found = {k: [row[k] for row in rows if isinstance(row, dict) and row.get(k) is not None] for k in keys}

    def holds_messages(values: list) -> bool:
        lists = [v for v in values if isinstance(v, list) and all(isinstance(m, dict) for m in v)]
        return 2 * len(lists) >= len(values) and any(any(r in m for r in ROLE_FIELDS) for v in lists for m in v)

    return tuple(k for k, values in found.items() if holds_messages(values))


def _schema(path: Path, given: str) -> pa.Schema:
    """The schema the formats are tried on: a parquet file's own; a JSON file's first SAMPLE_ROWS rows,
    and a parquet file's with Json columns its first batch, as the reader builds them (sources/json_rows)."""
    if is_json(path.name):
        try:
            rows = [value for _, value in islice(json_rows(path, path.name), SAMPLE_ROWS)
                    if not isinstance(value, Unparsed)]
        except (OSError, pa.ArrowException, BuildError) as exc:
            raise BuildError(f"--source {given}: {path.name}: not a readable JSON file ({exc})") from None
        return rows_batch(rows, _lists_of_objects(rows), {}, {}).schema
    try:
        parquet = pq.ParquetFile(path)
        candidates = tuple(f.name for f in parquet.schema_arrow)  # any column could hold the messages
        if not json_messages(parquet.schema_arrow, candidates):
            return parquet.schema_arrow
        batch = next(parquet.iter_batches(batch_size=SAMPLE_ROWS), None)
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"--source {given}: {path.name}: not a readable parquet file ({exc})") from None
    if batch is None:
        return parquet.schema_arrow
    names = json_messages(batch.schema, candidates)
    rows = [dict(zip(names, values)) for values in zip(*(decoded_values(batch.column(n), n, {}) for n in names))]
    return decode_json_columns(batch, _lists_of_objects(rows), {}, {}).schema


PAIRED, UNPAIRED = ("chosen", "rejected"), ("prompt", "completion", "label")


def _preference(schema: pa.Schema, given: str, name: str) -> Detected | None:
    """A preference source's format, told by its columns (the module's docstring), or None: not one."""
    paired = all(c in schema.names for c in PAIRED)
    unpaired = all(c in schema.names for c in UNPAIRED)
    if paired and unpaired:
        raise BuildError(f"--source {given}: {name} has both a pair's columns ({', '.join(PAIRED)}) and an unpaired "
                         f"row's ({', '.join(UNPAIRED)}): one file is one shape; pass --format NAME")
    if not paired and not unpaired:
        return None
    if unpaired:
        format_name = "unpaired_preference"
    else:
        explicit = "prompt" in schema.names and is_string(schema.field("prompt").type) == is_string(
            schema.field("chosen").type)
        format_name = "preference" if explicit else "preference_implicit"
    adapter = PREFERENCE_FORMATS[format_name]
    unread = adapter.unread_columns(schema)
    problem = replace(adapter, ignore=frozenset(unread)).schema_problem(schema)
    if problem is not None:
        raise BuildError(f"--source {given}: {name}: the columns of a preference source ({format_name}), but {problem}")
    why = {"preference": "chosen and rejected with a prompt of their form: TRL's explicit prompt",
           "preference_implicit": "chosen and rejected, whole conversations: the prompt is their shared first messages"
                                  + (" (the prompt string is not read, as TRL does not read it)"
                                     if "prompt" in schema.names else ""),
           "unpaired_preference": "prompt, completion and label: unpaired (KTO)"}[format_name]
    return Detected(format_name, f"detected from the schema ({why})", _extras(schema, list(adapter.message_columns)),
                    unread, task="preference")


def detect_format(path: Path, given: str) -> Detected:
    """The format of the source file `path` (`given` names the source in errors)."""
    schema = _schema(path, given)
    preference = _preference(schema, given, path.name)
    if preference is not None:
        return preference
    named = [name for name, adapter in FORMATS.items() if _fits(adapter, schema)]
    if len(named) == 1:
        adapter = FORMATS[named[0]]
        return Detected(named[0], f"detected from the schema (columns {', '.join(adapter.message_columns)})",
                        _extras(schema, list(adapter.message_columns)), adapter.unread_columns(schema))
    if len(named) > 1:
        raise BuildError(f"--source {given}: the schema fits the formats {', '.join(named)}: pass --format NAME")
    structs = _detect_structs(schema, given)
    if structs is not None:
        return structs
    mappings = _mappings(schema)
    if len(mappings) == 1:
        mapping = mappings[0]
        problem = _fits_problem(MessageColumn(**mapping), schema)
        if problem is not None:  # the messages fit, something else does not (ids of two types): make would refuse it
            raise BuildError(f"--source {given}: {path.name}: {problem}")
        return Detected(mapping, f"detected from the schema (column {mapping['messages']} of "
                                 f"{mapping['role']}/{mapping['content']})",
                        _extras(schema, [mapping["messages"]]), MessageColumn(**mapping).unread_columns(schema))
    columns = ", ".join(f"{f.name}: {f.type}" for f in schema)
    if mappings:
        raise BuildError(f"--source {given}: several columns could hold the messages "
                         f"({', '.join(m['messages'] for m in mappings)}): pass --format with a mapping, "
                         "e.g. --format '{messages: COLUMN, role: FIELD, content: FIELD}'")
    raise BuildError(f"--source {given}: no known format fits the schema ({columns}): known formats are "
                     f"{', '.join(FORMATS)}; pass --format '{{messages: COLUMN, role: FIELD, content: FIELD}}'")
