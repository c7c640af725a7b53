"""Preference formats (issue 34), the shapes TRL's preference trainers read (trl/data_utils.py,
huggingface/trl@f2cd5771: `is_conversational`, `maybe_extract_prompt`, `extract_prompt`,
`unpair_preference_dataset`):

- `preference`: TRL's explicit prompt: `prompt`, `chosen`, `rejected`, each a list of messages (the
  conversational form) or each a string (the standard form: the prompt one user turn, each completion
  one assistant turn; rendered through the chat template like prompt_completion's strings, where TRL
  would train on the raw concatenation). A string prompt beside message lists is the implicit shape,
  refused here with the format to use.
- `preference_implicit`: `chosen` and `rejected`, each a whole conversation, sharing their prompt as a
  prefix of messages (Tulu 3's preference mixtures, UltraFeedback-binarized). Their `prompt` string
  column, which TRL's maybe_extract_prompt passes over without reading, is not read here either: it
  is refused like any column the format does not read, unless ignore_fields names it.
- `unpaired_preference`: `prompt`, `completion` (each a list of messages, or each a string) and
  `label` (true: desirable, false: undesirable), KTO's unpaired shape.

A column mapping renames the columns (and the messages' role and content fields) of one shape, as the
SFT formats' mapping does: `format: {preference: implicit, chosen: better, rejected: worse}` (`mapped`).

Each row becomes one conversation of the normalised record (record_arrow.SOURCE_SCHEMA), so that the
reader, the checks, the spill and its permutation are SFT's unchanged: the row's columns' messages in
the order above, the first message of each column marked in its `fields` with PART (the column's
name; for an unpaired completion `desirable` or `undesirable`). sources/preference/split.py reads the
marks back into a PreferenceRecord. The marks are the record's own key: a source's unknown message
field is refused before it (formats/adapter.py), so none can collide with it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ...errors import quoted
from ..tool_checks import DataRules
from .adapter import Adapter
from .values import Flat, is_string, joined, one_turn, python_values

PART = "databuild.part"  # the key of a column's first message that names the column (in `fields`)
LABELS = {True: "desirable", False: "undesirable"}  # an unpaired completion's mark, by its label
ROLE_OF_STRING = {"prompt": "user", "chosen": "assistant", "rejected": "assistant", "completion": "assistant"}


@dataclass(frozen=True)
class PreferenceColumns(Adapter):
    """What the three preference formats share: message columns read as prompt_completion reads its
    two (a list of messages, or a string for one turn), one conversation per row, each column's first
    message marked."""
    ignore: frozenset[str] = frozenset()
    rules: DataRules = DataRules()
    parts: tuple[str, ...] = ()  # the record's names of the message columns, in order (the marks)
    message_columns: tuple[str, ...] = ()  # the file's names of them: `parts` unless a column mapping renames them
    role: str = "role"  # the messages' role field, and content field (a column mapping may rename them)
    content: str = "content"
    strings: bool = True  # whether the columns may be strings (all of them, or none)

    def __post_init__(self):
        if not self.message_columns:
            object.__setattr__(self, "message_columns", self.parts)

    def expects(self) -> str:
        kinds = (f"each a list<struct<{self.content}: string, {self.role}: string, and optionally the record's other "
                 "fields>>")
        return f"{', '.join(self.message_columns)}: {kinds}" + (", or each a string" if self.strings else "") + \
            ", optionally tools"

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        present = [c for c in self.message_columns if c in schema.names]
        as_strings = [c for c in present if is_string(schema.field(c).type)]
        if as_strings and not self.strings:
            return f"column {quoted(as_strings[0])} is a string, not a list of messages"
        if as_strings and len(as_strings) < len(self.message_columns):
            lists = [c for c in self.message_columns if c not in as_strings]
            return (f"columns {', '.join(as_strings)} are strings and {', '.join(lists)} not: each all strings or all "
                    "lists of messages" + self.mixed_hint(as_strings))
        for column in self.message_columns:
            if column in as_strings:
                continue
            problem = self.message_struct_problem(schema, column, self.role, self.content)
            if problem is not None:
                return problem
        return None

    def mixed_hint(self, as_strings: list[str]) -> str:
        return ""

    def marks(self, batch: pa.RecordBatch, problems: dict[int, str]) -> list[list[str | None]]:
        """Each column's mark for each row (None: the row is refused, nothing marked)."""
        return [[part] * batch.num_rows for part in self.parts]

    def to_messages(self, batch: pa.RecordBatch) -> Flat:
        parts, problems, dropped = [], {}, Counter()
        for part_name, column in zip(self.parts, self.message_columns):
            values = batch.column(column)
            for row in np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)):
                problems.setdefault(int(row), f"{column} is null")
            if is_string(values.type):
                parts.append(one_turn(values, ROLE_OF_STRING[part_name]))
                continue
            part = self.flat_messages(values, self.role, self.content)
            for row, reason in part.problems.items():
                problems.setdefault(row, f"{column}: {reason}")
            for row in np.flatnonzero((np.diff(part.offsets) == 0) & values.is_valid().to_numpy(zero_copy_only=False)):
                problems.setdefault(int(row), f"{column} is an empty list of messages")
            dropped.update(part.dropped)
            parts.append(part)
        marks = self.marks(batch, problems)
        for k, (part, column_marks) in enumerate(zip(parts, marks)):
            texts = python_values(part.fields)
            for row, mark in enumerate(column_marks):
                first = int(part.offsets[row])
                if row in problems or mark is None or first == part.offsets[row + 1]:
                    continue
                own = texts[first]
                texts[first] = json.dumps({PART: mark, **(json.loads(own) if own else {})}, ensure_ascii=False)
            parts[k] = replace(part, fields=pa.array(texts, pa.string()))
        return joined(parts, batch.num_rows, problems, dropped)  # each column's messages in turn


@dataclass(frozen=True)
class ExplicitPreference(PreferenceColumns):
    parts: tuple[str, ...] = ("prompt", "chosen", "rejected")

    def mixed_hint(self, as_strings: list[str]) -> str:
        return (" (a string prompt beside conversations in chosen and rejected is the implicit shape: format: "
                "preference_implicit, with prompt in ignore_fields)") if as_strings == [self.message_columns[0]] else ""


@dataclass(frozen=True)
class ImplicitPreference(PreferenceColumns):
    parts: tuple[str, ...] = ("chosen", "rejected")
    strings: bool = False  # TRL extracts a prompt from two strings by characters: refused (a prompt is messages)


@dataclass(frozen=True)
class UnpairedPreference(PreferenceColumns):
    parts: tuple[str, ...] = ("prompt", "completion")
    label: str = "label"

    def expects(self) -> str:
        return f"{super().expects()}, and {self.label}: bool"

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        if self.label not in schema.names:
            return f"missing column {quoted(self.label)}"
        kind = schema.field(self.label).type
        if not (pa.types.is_boolean(kind) or pa.types.is_null(kind) or isinstance(kind, pa.JsonType)):
            return f"column {quoted(self.label)} is {kind}, not bool"
        return super().message_schema_problem(schema)

    def unread_columns(self, schema: pa.Schema) -> tuple[str, ...]:
        return tuple(name for name in super().unread_columns(schema) if name != self.label)

    def read_columns(self, schema: pa.Schema) -> list[str]:
        return super().read_columns(schema) + [self.label]

    def marks(self, batch: pa.RecordBatch, problems: dict[int, str]) -> list[list[str | None]]:
        labels = []
        for row, value in enumerate(python_values(batch.column(self.label))):
            if not isinstance(value, bool):  # a JSON 1 is not true
                problems.setdefault(row, f"{self.label} is {json.dumps(value)[:40] if value is not None else 'null'}, "
                                         "not true or false")
            labels.append(LABELS.get(value) if isinstance(value, bool) else None)
        return [["prompt"] * batch.num_rows, labels]


PREFERENCE_FORMATS: dict[str, Adapter] = {"preference": ExplicitPreference(),
                                          "preference_implicit": ImplicitPreference(),
                                          "unpaired_preference": UnpairedPreference()}
# A preference column mapping (`format: {preference: SHAPE, chosen: COLUMN, ...}`): its shapes' formats
SHAPES = {"explicit": "preference", "implicit": "preference_implicit", "unpaired": "unpaired_preference"}


def mapping_keys(format_name: str) -> tuple[str, ...]:
    """The keys a column mapping of a preference format may rename: its columns, and the messages' fields."""
    adapter = PREFERENCE_FORMATS[format_name]
    return (*adapter.parts, *(("label",) if isinstance(adapter, UnpairedPreference) else ()), "role", "content")


def mapped(format_name: str, mapping: dict[str, str]) -> PreferenceColumns:
    """The format's adapter reading the columns and fields a mapping names (the rest keep their names)."""
    adapter = PREFERENCE_FORMATS[format_name]
    names = {key: value for key, value in mapping.items() if key != "preference"}
    return replace(adapter, message_columns=tuple(names.get(part, part) for part in adapter.parts),
                   **{key: value for key, value in names.items() if key not in adapter.parts})
