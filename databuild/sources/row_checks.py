"""Source stage: the checks of a batch of source rows in the conversation record (SOURCE_SCHEMA), as
sources/reader.py yields them: the malformed rows with their reasons, each row's record counts, and the
batch made valid UTF-8 for the spill.

The checks are column-wise, so the whole source is checked in seconds: numpy over Arrow's buffers
(sources/buffers.py) and a few Arrow calls a batch, with Python only for the rows found bad and for the
messages with fields beyond role and content. `spill` runs them in its first pass, on a thread per core,
before anything is rendered.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..records.conversation import REASONING_FIELDS
from ..records.problems import MALFORMED, BadConversation, Problem, bad_conversation
from .buffers import int32_values, lengths, present, validity
from .record import ROLES, unknown_role
from .record_arrow import MESSAGE, SOURCE_SCHEMA
from .tool_checks import TOOL_COUNTS, tool_call_findings

if TYPE_CHECKING:
    from .reader import SourceFile

# What the check pass counts of each conversation (manifest counts.sources[i].messages)
RECORD_COUNTS = ("tool_calls", "tool_results", "reasoning_turns", "conversations_with_tools", *TOOL_COUNTS,
                 "struct_null_keys_dropped")


def _invalid_utf8(strings: pa.Array) -> list[int]:
    """Indices of the strings that are not valid UTF-8: one C++ pass when there are none (parquet
    does not guarantee it, and Python would raise where it first decodes one)."""
    try:
        strings.validate(full=True)
        return []
    except pa.ArrowInvalid:
        pass
    raw = strings.view(pa.large_binary() if pa.types.is_large_string(strings.type) else pa.binary())
    found = []
    for i, value in enumerate(raw.to_pylist()):
        try:
            value is None or value.decode("utf-8")
        except UnicodeDecodeError:
            found.append(i)
    return found


def _text(strings: pa.Array, i: int) -> str | None:
    """strings[i] as Python text, invalid UTF-8 bytes shown as escapes (for messages, never for rows)."""
    raw = strings.view(pa.large_binary() if pa.types.is_large_string(strings.type) else pa.binary())[i].as_py()
    return None if raw is None else raw.decode("utf-8", "backslashreplace")


def _repaired(strings: pa.Array) -> pa.Array:
    bad = set(_invalid_utf8(strings))
    if not bad:
        return strings
    return pa.array([_text(strings, i) if i in bad else strings[i].as_py() for i in range(len(strings))],
                    strings.type)


def _all_utf8(batch: pa.RecordBatch) -> bool:
    """Whether every string of the batch is valid UTF-8 (parquet does not guarantee it): one C++ pass."""
    try:
        batch.validate(full=True)
        return True
    except pa.ArrowInvalid:
        return False


def with_valid_utf8(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch (in SOURCE_SCHEMA) with every invalid UTF-8 string replaced by its escaped text, so that
    it can be spilled and read back; the check has marked those rows malformed, so nothing is built
    from the replacement."""
    if _all_utf8(batch):
        return batch
    messages = batch.column("messages")
    items = messages.values
    repaired = pa.StructArray.from_arrays([_repaired(child) for child in items.flatten()],
                                          fields=list(MESSAGE), mask=items.is_null())
    messages = pa.ListArray.from_arrays(messages.offsets, repaired, mask=messages.is_null())
    return pa.RecordBatch.from_arrays([_repaired(batch.column("id")), messages, _repaired(batch.column("source")),
                                       batch.column("tools")], schema=SOURCE_SCHEMA)


class _Items:
    """The batch's messages flat, read once for every check: `parent` row and `starts` of each row's
    items, their `role_text` and `contents`, `roles` (the role's index in ROLES, -1 for null or unknown),
    and the fields parsed (`with_fields`: the items that have any; `fields`: their dicts)."""

    def __init__(self, batch: pa.RecordBatch):
        messages = batch.column("messages")
        counts = lengths(messages)
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        self.parent = np.repeat(np.arange(batch.num_rows), counts)
        flat = pc.list_flatten(messages)
        self.role_text = pc.struct_field(flat, "role")
        self.contents = pc.struct_field(flat, "content")
        self.roles = int32_values(pc.index_in(self.role_text, value_set=_role_set()), -1)
        fields = pc.struct_field(flat, "fields")
        self.with_fields = present(fields)  # only messages beyond role and content cost Python
        self.fields = [json.loads(text) for text in fields.take(pa.array(self.with_fields)).to_pylist()] if len(
            self.with_fields) else []

    def message(self, item: int) -> tuple[int, int]:
        """(row, the item's message number within it)."""
        row = int(self.parent[item])
        return row, int(item - self.starts[row])


@functools.cache
def _role_set() -> pa.Array:
    """ROLES as an array, built at first use (sharegpt._role_arrays says why)."""
    return pa.array(ROLES, pa.string())


_ASSISTANT, _TOOL = ROLES.index("assistant"), ROLES.index("tool")


def _malformed_rows(batch: pa.RecordBatch, items: _Items) -> dict[int, str]:
    """Row (within the batch) to reason, computed column-wise (numpy over Arrow's buffers, a few Arrow
    calls a batch, one C++ pass for UTF-8 where every string is valid): a row that is fine costs no
    Python of its own, and the pass's threads seldom wait for one another at the interpreter."""
    bad: dict[int, str] = {}
    utf8 = _all_utf8(batch)
    if not utf8:
        for column in ("id", "source"):
            for row in _invalid_utf8(batch.column(column)):
                bad.setdefault(row, f"'{column}' is not valid UTF-8")
    for row in np.flatnonzero(lengths(batch.column("id")) == 0).tolist():
        bad.setdefault(row, "missing or empty id")
    for row in np.flatnonzero(np.diff(items.starts) == 0).tolist():
        bad.setdefault(row, "missing or empty 'messages'")
    if not len(items.parent):
        return bad
    if not utf8:
        for field, values in (("role", items.role_text), ("content", items.contents)):
            for item in _invalid_utf8(values):
                row, number = items.message(item)
                bad.setdefault(row, f"message {number}: {field} is not valid UTF-8")
    for item in np.flatnonzero(items.roles < 0).tolist():
        row, number = items.message(item)
        if row not in bad:
            bad[row] = f"message {number}: {unknown_role(_text(items.role_text, item))}"
    # content may be null only where the message says something else: an assistant turn's tool
    # calls or reasoning (what apply_chat_template documents); the template never sees the key then
    has_content = validity(items.contents)
    if has_content is not None:
        with_fields = dict(zip(items.with_fields.tolist(), items.fields))
        for item in np.flatnonzero(~has_content).tolist():
            fields = with_fields.get(item, {})
            if "content" in fields:  # a list of parts, carried in the fields
                continue
            if items.roles[item] != _ASSISTANT or not (
                    fields.get("tool_calls") or any(key in fields for key in REASONING_FIELDS)):
                row, number = items.message(item)
                bad.setdefault(row, f"message {number}: content is null, not a string (null content "
                                    "is for an assistant message with tool_calls or reasoning)")
    return bad


def _record_counts(batch: pa.RecordBatch, items: _Items, tools: dict[int, Any]) -> np.ndarray:
    """RECORD_COUNTS of each row of the batch (rows x counts, int64)."""
    n = batch.num_rows
    counts = np.zeros((n, len(RECORD_COUNTS)), dtype=np.int64)
    if not len(items.parent):
        return counts
    counts[:, 1] = np.bincount(items.parent[items.roles == _TOOL], minlength=n)
    if items.fields:
        calls = np.array([len(f.get("tool_calls") or ()) for f in items.fields], dtype=np.int64)
        reasoning = np.array([any(key in f for key in REASONING_FIELDS) for f in items.fields], dtype=np.int64)
        np.add.at(counts[:, 0], items.parent[items.with_fields], calls)
        np.add.at(counts[:, 2], items.parent[items.with_fields], reasoning)
    for row, parsed in tools.items():
        counts[row, 3] = bool(parsed)
    return counts


def _tools(batch: pa.RecordBatch) -> dict[int, Any]:
    """Each row's tools list parsed (the rows that have one), each distinct text parsed once."""
    column = batch.column("tools")
    if column.null_count == len(column):
        return {}
    encoded = column.dictionary_encode()
    parsed = [json.loads(text) for text in encoded.dictionary.to_pylist()]
    index = int32_values(encoded.indices, -1)
    return {row: parsed[index[row]] for row in np.flatnonzero(index >= 0).tolist()}


def _tool_call_rows(items: _Items, tools: dict[int, Any], rules, bad: dict[int, str], counts: np.ndarray) -> None:
    """The tool-call checks (sources/tool_checks.py) of every row with tool calls not already bad: its
    reason into `bad`, or its TOOL_COUNTS into `counts`."""
    calling: dict[int, list[tuple[int, dict]]] = {}
    for item, fields in zip(items.with_fields.tolist(), items.fields):
        row = int(items.parent[item])
        if fields.get("tool_calls") and row not in bad:
            calling.setdefault(row, []).append((item - int(items.starts[row]), fields))
    first = RECORD_COUNTS.index(TOOL_COUNTS[0])
    for row, messages in calling.items():
        problem, found = tool_call_findings(messages, tools.get(row), rules)
        if problem is not None:
            bad[row] = problem
        else:
            counts[row, first:first + len(TOOL_COUNTS)] = found


def check_batch(file: SourceFile, offset: int, batch: pa.RecordBatch, refused: dict[int, str],
                dropped: Counter = Counter()) -> tuple[list[BadConversation], np.ndarray]:
    """The batch's malformed rows (the batch starts at source row `offset`), in row order: those its
    format refused (`refused`, with the format's reason), then those the record's checks and the
    tool-call checks (under the source's rules) find; and the RECORD_COUNTS of each row (rows x counts),
    `dropped` (from iter_batches) giving struct_null_keys_dropped."""
    items = _Items(batch)
    tools = _tools(batch)
    bad = {**_malformed_rows(batch, items), **refused}
    counts = _record_counts(batch, items, tools)
    for row, keys in dropped.items():
        counts[row, RECORD_COUNTS.index("struct_null_keys_dropped")] = keys
    _tool_call_rows(items, tools, file.adapter.rules, bad, counts)
    return ([bad_conversation([file], offset + row, _text(batch.column("id"), row) or "",
                              Problem(MALFORMED, bad[row])) for row in sorted(bad)], counts)
