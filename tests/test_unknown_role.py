"""An unknown role is named before anything else about its message: a typo in a role beside tool calls was
"tool_calls on a 'asistant' message", whose fix (skip) would have dropped every such conversation."""

from __future__ import annotations

import pytest

from test_agentic_sources import WHERE, call, refused_build

GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
UNKNOWN = "message 1: unknown role 'asistant' (expected one of system, developer, user, assistant, tool)"


@pytest.mark.parametrize("fields", [
    {"tool_calls": [call(1, "f", "{}")]},
    {"tool_calls": "[{\"function\": "},  # JSON text that does not parse: still the role first
    {"reasoning_content": 3},
])
def test_an_unknown_role_is_named_first(tmp_path, tools_tokenizer, fields):
    good = {"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    bad = {"id": "b", "messages": [{"role": "user", "content": "hi"}, {"role": "asistant", "content": "x", **fields}]}
    error = refused_build(tmp_path, tools_tokenizer, [good, bad])
    assert error.startswith(f"malformed conversation: {WHERE}: {UNKNOWN}"), error


@pytest.mark.parametrize("fmt, rows", [
    ("messages", [{"id": "b", "messages": [{"role": "user", "content": "hi"}, {"role": "x" * 10**6, "content": "x"}]}]),
    ("sharegpt", [{"id": "b", "conversations": [{"from": "human", "value": "hi"}, {"from": "y" * 10**6, "value": "x"}]}]),
])
def test_a_huge_value_is_quoted_cut(tmp_path, tools_tokenizer, fmt, rows):
    # A message quotes at most QUOTED_CHARACTERS of a value from the source: a 1 MB role was a 1 MB line.
    good = ({"id": "a", "messages": GOOD} if fmt == "messages" else
            {"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]})
    error = refused_build(tmp_path, tools_tokenizer, [good, *rows], fmt)
    assert error.startswith(f"malformed conversation: {WHERE}: message 1: ") and "(1,000,000 characters)" in error
    assert len(error) < 1000
