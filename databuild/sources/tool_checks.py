"""Tool calls checked as data, and the source entry's rules that relax the checks.

A call whose arguments are a string that is not valid JSON (`{"city": "Paris",}`) would be trained
as it stands: the model would learn to write it. A call to a function the conversation's `tools`
does not declare teaches a call the prompt never offered. Both are malformed, named by message and
call. A conversation that calls tools and has no tools list (null or empty: many datasets describe
their tools in the system text) is counted, not refused. Each rule is the source entry's to relax
(`DataRules`, recorded in the manifest's inputs.sources[i].rules), and what a relaxed rule lets
through is counted (manifest counts.sources[i].messages).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import quoted
from .record import call_function, parse_json

# name: (the values it takes, the default first)
RULE_VALUES = {"struct_nulls": ("refuse", "drop"), "invalid_tool_arguments": ("refuse", "keep"),
               "undeclared_tool_calls": ("refuse", "keep")}
# What the check pass counts of each conversation built (besides sources/row_checks.py's record counts)
TOOL_COUNTS = ("conversations_with_undeclared_tools", "tool_calls_invalid_arguments", "tool_calls_undeclared")


@dataclass(frozen=True)
class DataRules:
    """A source entry's data rules: `struct_nulls` (refuse a parquet struct or map where the record
    holds JSON values, or drop the keys whose value is null there: sources/formats/structs.py),
    `invalid_tool_arguments` and `undeclared_tool_calls` (refuse the conversation, or keep it and
    count the call)."""
    struct_nulls: str = "refuse"
    invalid_tool_arguments: str = "refuse"
    undeclared_tool_calls: str = "refuse"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def declared_names(tools: list) -> set[str]:
    """The function names a tools list declares: each schema's `function.name` (transformers' and
    OpenAI's `{"type": "function", "function": {...}}`), or its `name` (a bare function schema)."""
    names = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _call_name(call: dict) -> str:
    named = f"function {quoted(call_function(call)[0]['name'])}"
    return f"id {quoted(call['id'])}, {named}" if isinstance(call.get("id"), str) else named


def tool_call_findings(messages: list[tuple[int, dict]], tools: list | None,
                       rules: DataRules) -> tuple[str | None, tuple[int, int, int]]:
    """Why a conversation's tool calls make it malformed (or None), and its TOOL_COUNTS. `messages`:
    (message number, its fields) of the messages that have fields, their values checked already
    (sources/record.py)."""
    declared = declared_names(tools) if tools else None
    invalid = undeclared = calls_made = 0
    for number, fields in messages:
        for k, call in enumerate(fields.get("tool_calls") or ()):
            calls_made += 1
            function, _ = call_function(call)
            arguments = function["arguments"]
            if isinstance(arguments, str):
                try:
                    parse_json(arguments)
                except ValueError as exc:
                    if rules.invalid_tool_arguments == "refuse":
                        return (f"message {number}: tool_calls[{k}] ({_call_name(call)}): arguments are not valid "
                                f"JSON ({exc}); invalid_tool_arguments: keep on the source trains them as written",
                                (0, 0, 0))
                    invalid += 1
            if declared is not None and function["name"] not in declared:
                if rules.undeclared_tool_calls == "refuse":
                    return (f"message {number}: tool_calls[{k}] ({_call_name(call)}) calls a function the "
                            f"conversation's tools do not declare (they declare {', '.join(map(repr, sorted(declared))) or 'none'}); "
                            "undeclared_tool_calls: keep on the source builds it", (0, 0, 0))
                undeclared += 1
    return None, (int(bool(calls_made) and declared is None), invalid, undeclared)
