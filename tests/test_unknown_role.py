"""An unknown role is named before anything else about its message: a typo in a role beside tool calls was
"tool_calls on a 'asistant' message", whose fix (skip) would have dropped every such conversation."""

from __future__ import annotations

import pytest

from test_agentic_sources import WHERE, call, refused_build, tools_tokenizer  # noqa: F401 (a fixture)

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
