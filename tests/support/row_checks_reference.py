"""The source pass's row checks as they were before they read Arrow's buffers (databuild 22b0575,
sources/row_checks.py: an Arrow compute call per check, the messages flattened for each, each tools
text parsed where it is read): the reference tests/test_row_checks.py holds the column-wise checks to,
malformed row by malformed row and count by count. Copied, not imported: it must not move with the code."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from databuild.records.conversation import REASONING_FIELDS
from databuild.records.problems import MALFORMED, BadConversation, Problem, bad_conversation
from databuild.sources.record import ROLES, unknown_role
from databuild.sources.row_checks import RECORD_COUNTS, _invalid_utf8, _text
from databuild.sources.tool_checks import TOOL_COUNTS, tool_call_findings
def _parsed_fields(fields: pa.Array) -> tuple[np.ndarray, list[dict]]:
    """(the items with fields, their fields as dicts): only messages beyond role and content cost Python."""
    items = np.flatnonzero(fields.is_valid().to_numpy(zero_copy_only=False))
    return items, [json.loads(text) for text in fields.take(pa.array(items)).to_pylist()] if len(items) else []


def _malformed_rows(batch: pa.RecordBatch, parent: np.ndarray, starts: np.ndarray,
                    parsed: tuple[np.ndarray, list[dict]]) -> dict[int, str]:
    """Row (within the batch) to reason, computed column-wise: the whole source is checked in seconds."""
    bad: dict[int, str] = {}
    ids, messages = batch.column("id"), batch.column("messages")
    for column in ("id", "source"):
        for row in _invalid_utf8(batch.column(column)):
            bad.setdefault(row, f"'{column}' is not valid UTF-8")
    for row in np.flatnonzero(pc.fill_null(pc.equal(pc.utf8_length(ids), 0), True).to_numpy(
            zero_copy_only=False)):
        bad.setdefault(int(row), "missing or empty id")
    for row in np.flatnonzero(np.diff(starts) == 0):
        bad.setdefault(int(row), "missing or empty 'messages'")
    flat = pc.list_flatten(messages)
    if len(flat):
        roles, contents = pc.struct_field(flat, "role"), pc.struct_field(flat, "content")
        for field, values in (("role", roles), ("content", contents)):
            for item in _invalid_utf8(values):
                row = int(parent[item])
                bad.setdefault(row, f"message {item - starts[row]}: {field} is not valid UTF-8")
        unknown = pc.invert(pc.fill_null(pc.is_in(roles, pa.array(ROLES)), False))
        for item in np.flatnonzero(unknown.to_numpy(zero_copy_only=False)):
            row = int(parent[item])
            if row not in bad:
                bad[row] = f"message {item - starts[row]}: {unknown_role(_text(roles, item))}"
        # content may be null only where the message says something else: an assistant turn's tool
        # calls or reasoning (what apply_chat_template documents); the template never sees the key then
        with_fields = dict(zip(parsed[0].tolist(), parsed[1]))
        for item in np.flatnonzero(pc.is_null(contents).to_numpy(zero_copy_only=False)):
            row = int(parent[item])
            fields = with_fields.get(int(item), {})
            if "content" in fields:  # a list of parts, carried in the fields
                continue
            if roles[item].as_py() != "assistant" or not (
                    fields.get("tool_calls") or any(key in fields for key in REASONING_FIELDS)):
                bad.setdefault(row, f"message {item - starts[row]}: content is null, not a string (null content "
                                    "is for an assistant message with tool_calls or reasoning)")
    return bad


def _record_counts(batch: pa.RecordBatch, parent: np.ndarray, parsed: tuple[np.ndarray, list[dict]]) -> np.ndarray:
    """RECORD_COUNTS of each row of the batch (rows x counts, int64)."""
    n = batch.num_rows
    counts = np.zeros((n, len(RECORD_COUNTS)), dtype=np.int64)
    if not len(parent):
        return counts
    roles = pc.struct_field(pc.list_flatten(batch.column("messages")), "role")
    tool = pc.fill_null(pc.equal(roles, "tool"), False).to_numpy(zero_copy_only=False)
    counts[:, 1] = np.bincount(parent[tool], minlength=n)
    items, fields = parsed
    calls = np.array([len(f.get("tool_calls") or ()) for f in fields], dtype=np.int64)
    reasoning = np.array([any(key in f for key in REASONING_FIELDS) for f in fields], dtype=np.int64)
    np.add.at(counts[:, 0], parent[items], calls)
    np.add.at(counts[:, 2], parent[items], reasoning)
    tools = batch.column("tools")
    for row in np.flatnonzero(tools.is_valid().to_numpy(zero_copy_only=False)):
        counts[row, 3] = bool(json.loads(tools[int(row)].as_py()))
    return counts


def _tool_call_rows(batch: pa.RecordBatch, parent: np.ndarray, starts: np.ndarray,
                    parsed: tuple[np.ndarray, list[dict]], rules, bad: dict[int, str], counts: np.ndarray) -> None:
    """The tool-call checks (sources/tool_checks.py) of every row with tool calls not already bad: its
    reason into `bad`, or its TOOL_COUNTS into `counts`."""
    calling: dict[int, list[tuple[int, dict]]] = {}
    for item, fields in zip(parsed[0].tolist(), parsed[1]):
        row = int(parent[item])
        if fields.get("tool_calls") and row not in bad:
            calling.setdefault(row, []).append((item - int(starts[row]), fields))
    tools = batch.column("tools")
    first = RECORD_COUNTS.index(TOOL_COUNTS[0])
    for row, messages in calling.items():
        text = tools[row].as_py()
        problem, found = tool_call_findings(messages, None if text is None else json.loads(text), rules)
        if problem is not None:
            bad[row] = problem
        else:
            counts[row, first:first + len(TOOL_COUNTS)] = found


def check_batch(file, offset: int, batch: pa.RecordBatch, refused: dict[int, str],
                dropped: Counter = Counter()) -> tuple[list[BadConversation], np.ndarray]:
    """The batch's malformed rows (the batch starts at source row `offset`), in row order: those its
    format refused (`refused`, with the format's reason), then those the record's checks and the
    tool-call checks (under the source's rules) find; and the RECORD_COUNTS of each row (rows x counts),
    `dropped` (from iter_batches) giving struct_null_keys_dropped."""
    messages = batch.column("messages")
    lengths = pc.fill_null(pc.list_value_length(messages), 0).to_numpy(zero_copy_only=False)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    parent = np.repeat(np.arange(batch.num_rows), lengths)
    parsed = _parsed_fields(pc.struct_field(pc.list_flatten(messages), "fields"))
    bad = {**_malformed_rows(batch, parent, starts, parsed), **refused}
    counts = _record_counts(batch, parent, parsed)
    for row, keys in dropped.items():
        counts[row, RECORD_COUNTS.index("struct_null_keys_dropped")] = keys
    _tool_call_rows(batch, parent, starts, parsed, file.adapter.rules, bad, counts)
    return ([bad_conversation([file], offset + row, _text(batch.column("id"), row) or "",
                              Problem(MALFORMED, bad[row])) for row in sorted(bad)], counts)
