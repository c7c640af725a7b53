"""The source pass's row checks read Arrow's buffers and run a few Arrow calls a batch (sources/row_checks.py):
they find the same malformed rows, with the same reasons, and the same record counts as the checks they
replaced (tests/support/row_checks_reference.py), on every kind of malformation, each alone and mixed, on
slices of batches (buffers read at an offset) and on batches with nothing wrong."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import row_checks_reference as reference
from databuild.sources.formats import FORMATS
from databuild.sources.mixture import Placement
from databuild.sources.reader import source_files
from databuild.sources.record_arrow import MESSAGE, SOURCE_SCHEMA
from databuild.sources.row_checks import RECORD_COUNTS, check_batch
from databuild.sources.spill import Spill
from databuild.sources.tool_checks import DataRules

BAD_UTF8 = b"caf\xe9"
SEARCH = json.dumps([{"type": "function", "function": {"name": "search", "parameters": {}}}])


def call(name="search", arguments='{"q": "x"}', id="c1"):
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def fields(**values):
    return json.dumps(values)


USER, ANSWER = ("user", "hi", None), ("assistant", "hello", None)
# name: (id, messages as (role, content, fields JSON text) or None, source, tools JSON text); str or bytes
ROWS = {
    "fine": ("a", [USER, ANSWER], "s", None),
    "fine with a system prompt and tools": ("b", [("system", "be brief", None), USER, ANSWER], "s", SEARCH),
    "id not utf-8": (BAD_UTF8, [USER, ANSWER], "s", None),
    "source not utf-8": ("c", [USER, ANSWER], BAD_UTF8, None),
    "id null": (None, [USER, ANSWER], "s", None),
    "id empty": ("", [USER, ANSWER], "s", None),
    "messages null": ("d", None, "s", None),
    "messages empty": ("e", [], "s", None),
    "role not utf-8": ("f", [USER, (BAD_UTF8, "x", None)], "s", None),
    "content not utf-8": ("g", [USER, ("assistant", BAD_UTF8, None)], "s", None),
    "role unknown": ("h", [USER, ("asistant", "x", None)], "s", None),
    "role null": ("i", [(None, "x", None), ANSWER], "s", None),
    "content null, user": ("j", [("user", None, None), ANSWER], "s", None),
    "content null, assistant alone": ("k", [USER, ("assistant", None, None)], "s", None),
    "content null beside tool calls": ("l", [USER, ("assistant", None, fields(tool_calls=[call()])),
                                            ("tool", "found", fields(tool_call_id="c1")), ANSWER], "s", SEARCH),
    "content null beside reasoning": ("m", [USER, ("assistant", None, fields(reasoning_content="so"))], "s", None),
    "content of parts": ("n", [("user", None, fields(content=[{"type": "text", "text": "hi"}])), ANSWER], "s", None),
    "tool call arguments not JSON": ("o", [USER, ("assistant", None, fields(tool_calls=[call(arguments='{"q": }')])),
                                           ("tool", "r", None), ANSWER], "s", SEARCH),
    "tool call undeclared": ("p", [USER, ("assistant", "x", fields(tool_calls=[call("fetch")])), ANSWER], "s", SEARCH),
    "tool calls without tools": ("q", [USER, ("assistant", "x", fields(tool_calls=[call(), call(id="c2")])),
                                       ("tool", "r", None), ("tool", "r", None), ANSWER], "s", None),
    "tool calls, tools empty": ("r", [USER, ("assistant", "x", fields(tool_calls=[call()])), ANSWER], "s", "[]"),
    "two problems, first named": ("t", [("asistant", "x", None), ("user", None, None)], "s", None),
    "content null after an unknown role": ("u", [("user", None, None), ("bot", "x", None)], "s", None),
    "id empty and not a string message": ("", [("user", BAD_UTF8, None)], BAD_UTF8, None),
}


def strings(values) -> pa.Array:
    """A string array of str, bytes (not UTF-8 as they stand) or None, unvalidated, as parquet may give one."""
    return pa.array([v.encode() if isinstance(v, str) else v for v in values], pa.binary()).view(pa.string())


def batch_of(rows: list[tuple]) -> pa.RecordBatch:
    """Rows in the record's schema (SOURCE_SCHEMA), as a format's adapter hands them to the check."""
    items = [m for _, messages, _, _ in rows for m in messages or ()]
    lengths = [len(messages or ()) for _, messages, _, _ in rows]
    struct = pa.StructArray.from_arrays([strings([m[1] for m in items]), strings([m[0] for m in items]),
                                         strings([m[2] for m in items])], fields=list(MESSAGE))
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    messages = pa.ListArray.from_arrays(offsets, struct, type=SOURCE_SCHEMA.field("messages").type,
                                        mask=pa.array([m is None for _, m, _, _ in rows]))
    return pa.RecordBatch.from_arrays([strings([r[0] for r in rows]), messages, strings([r[2] for r in rows]),
                                       strings([r[3] for r in rows])], schema=SOURCE_SCHEMA)


def file_of(rules: DataRules = DataRules()):
    return SimpleNamespace(name="data/train-0.parquet", source="org/set", first_index=100,
                           adapter=SimpleNamespace(rules=rules))


def both(batch, rules=DataRules(), refused=None, dropped=Counter(), offset=100):
    """(what the check finds, what the reference finds): the malformed rows as (index, id, problem), the counts."""
    found = [check(file_of(rules), offset, batch, dict(refused or {}), dropped) for check in
             (check_batch, reference.check_batch)]
    return [([(b.index, b.file, b.row, b.id, b.problem, b.source) for b in bad], counts.tolist())
            for bad, counts in found]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_kind_alone_and_among_fine_rows(name):
    row = ROWS[name]
    for rows in ([row], [ROWS["fine"], row, ROWS["fine with a system prompt and tools"]]):
        mine, theirs = both(batch_of(rows))
        assert mine == theirs


def test_the_reasons_named(tmp_path):
    """What the crafted rows are found to be (so that the comparison compares something)."""
    names = sorted(ROWS)
    (bad, counts), _ = both(batch_of([ROWS[n] for n in names]), offset=0)
    reasons = {names[index]: problem.reason for index, _, _, _, problem, _ in bad}
    assert set(reasons) == set(names) - {"fine", "fine with a system prompt and tools", "content null beside tool calls",
                                         "content null beside reasoning", "content of parts", "tool calls without tools",
                                         "tool calls, tools empty"}
    assert reasons["id not utf-8"] == "'id' is not valid UTF-8"
    assert reasons["source not utf-8"] == "'source' is not valid UTF-8"
    assert reasons["id null"] == reasons["id empty"] == "missing or empty id"
    assert reasons["messages null"] == reasons["messages empty"] == "missing or empty 'messages'"
    assert reasons["role not utf-8"] == "message 1: role is not valid UTF-8"
    assert reasons["content not utf-8"] == "message 1: content is not valid UTF-8"
    assert reasons["role unknown"].startswith("message 1: unknown role 'asistant'")
    assert reasons["role null"].startswith("message 0: no role")
    assert reasons["content null, user"].startswith("message 0: content is null, not a string")
    assert reasons["content null, assistant alone"].startswith("message 1: content is null")
    assert reasons["two problems, first named"].startswith("message 0: unknown role")
    assert reasons["content null after an unknown role"].startswith("message 1: unknown role 'bot'")  # roles first
    assert reasons["tool call arguments not JSON"].startswith("message 1: tool_calls[0] (id 'c1', function 'search'): "
                                                              "arguments are not valid JSON")
    assert "calls a function the conversation's tools do not declare" in reasons["tool call undeclared"]
    assert reasons["id empty and not a string message"] == "'source' is not valid UTF-8"
    by_name = dict(zip(names, counts))
    assert by_name["tool calls without tools"][:2] == [2, 2]  # tool_calls, tool_results
    assert by_name["tool calls without tools"][RECORD_COUNTS.index("conversations_with_undeclared_tools")] == 1
    assert by_name["content null beside reasoning"][RECORD_COUNTS.index("reasoning_turns")] == 1
    assert by_name["fine with a system prompt and tools"][RECORD_COUNTS.index("conversations_with_tools")] == 1
    assert by_name["tool calls, tools empty"][RECORD_COUNTS.index("conversations_with_tools")] == 0


@pytest.mark.parametrize("rules", [DataRules(invalid_tool_arguments="keep"), DataRules(undeclared_tool_calls="keep")])
def test_relaxed_rules_count_alike(rules):
    mine, theirs = both(batch_of(list(ROWS.values())), rules)
    assert mine == theirs


def test_refused_rows_and_dropped_keys_alike():
    rows = list(ROWS.values())
    refused = {0: "the format refused it", 3: "another reason", len(rows) - 1: "the last"}
    mine, theirs = both(batch_of(rows), refused=refused, dropped=Counter({1: 2, 4: 1}))
    assert mine == theirs
    assert [problem.reason for index, _, _, _, problem, _ in mine[0] if index in (100, 103)] == [
        "the format refused it", "another reason"]


def test_slices_and_empty_batches_alike():
    batch = batch_of(list(ROWS.values()) * 2)
    for start, length in ((0, 0), (1, 5), (7, 20), (13, 30), (len(ROWS) * 2 - 1, 1)):
        mine, theirs = both(batch.slice(start, length))
        assert mine == theirs
    mine, theirs = both(batch_of([ROWS["messages null"], ROWS["messages empty"]]))
    assert mine == theirs


def test_a_role_not_utf8_on_a_null_content_is_named_where_the_reference_raised(tmp_path):
    """The reference read the role of a null content as Python text, and raised on one not UTF-8 (a
    traceback out of make); the check names the row, as for any role not UTF-8."""
    batch = batch_of([ROWS["fine"], ("v", [USER, (BAD_UTF8, None, None)], "s", None)])
    with pytest.raises(UnicodeDecodeError):
        reference.check_batch(file_of(), 100, batch, {})
    (bad, _), = [check_batch(file_of(), 100, batch, {})]
    assert [(b.index, b.id, b.problem.reason) for b in bad] == [(101, "v", "message 1: role is not valid UTF-8")]
    source = tmp_path / "src" / "data"
    source.mkdir(parents=True)
    pq.write_table(pa.table({"id": batch.column("id"), "messages": batch.column("messages")}),
                   source / "train-00000-of-00001.parquet")
    files = source_files(tmp_path / "src", "train", FORMATS["messages"], "org/set")
    found = Spill(files, Placement.one_each(np.arange(2)), 8, tmp_path).check_and_spill(2)
    assert [b.message() for b in found] == [
        "org/set: data/train-00000-of-00001.parquet: row 1 (id 'v'): message 1: role is not valid UTF-8"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(ROWS)), max_size=12), st.integers(0, 3), st.booleans())
def test_any_mix_alike(names, cut, keep):
    rules = DataRules(invalid_tool_arguments="keep", undeclared_tool_calls="keep") if keep else DataRules()
    batch = batch_of([ROWS["fine"]] * 3 + [ROWS[n] for n in names])
    mine, theirs = both(batch.slice(cut), rules)
    assert mine == theirs
