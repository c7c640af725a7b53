"""The conversation record's vocabulary: the roles and message fields it carries, the checks of
their values, and their normalised form (what every format's adapter writes and the spill reads).

A message is `role` and `content` (a string; null beside tool calls or reasoning; or a list of
parts, `[{"type": "text", "text": ...}, ...]`), then the fields transformers' `apply_chat_template`
documents for tool calling and reasoning, carried as the source wrote them: `tool_calls` (a list of
calls, each wrapped, `{id?, type?, function: {name, arguments}}`, or flat, `{id?, type?, name,
arguments}`, the arguments a JSON string or an object, each kept in its form: the templates read
both shapes, `tool_call.function is defined`), `tool_call_id` and `name` (on a tool result), and a
reasoning trace under any of `reasoning_content`, `thinking`, `reasoning`; and `train` (true or
false: whether the turn trains, read under `train_turns: flagged`; the template is never given it).
In the normalised record
those fields travel as one JSON object text per message (`fields`, null for a plain message, so
plain chat costs one null column), and so does a content of parts (under `content`, the `content`
column then null); the conversation's `tools` as JSON text too. JSON text keeps every value exact
(strings, integers, floats by their shortest repr) and every object's key order.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..records.conversation import REASONING_FIELDS
from ..errors import quoted
from ..utils import json_depth

COLUMNS = ["id", "messages", "source", "tools"]  # its Arrow types: record_arrow.SOURCE_SCHEMA
ROLES = ("system", "developer", "user", "assistant", "tool")
TRAIN = "train"  # a message's training flag (encode/turns.py): a boolean, read under train_turns: flagged
EXTRA_FIELDS = ("tool_calls", "tool_call_id", "name") + REASONING_FIELDS + (TRAIN,)  # beside role and content


def _type(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError(f"duplicate key {quoted(next(k for k in keys if keys.count(k) > 1))}")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} is beyond a 64-bit float")
    return value


JSON_OPTIONS = {"object_pairs_hook": _no_duplicate_keys, "parse_constant": _no_constant, "parse_float": _finite}


def parse_json(text: str) -> Any:
    """JSON text as Python values, exactly: an object's keys in their order, an integer of any size
    as int, a number with a fraction or exponent as the float64 it rounds to. Refused where
    json.loads would silently resolve or accept what is not JSON: a repeated key, NaN or Infinity, a
    number beyond a float64; and nesting past MOST_JSON_DEPTH (TooDeep)."""
    return json_depth.loads(text, **JSON_OPTIONS)


def json_decoder() -> json.JSONDecoder:
    """The decoder of parse_json (its raw_decode parses a value within a longer text; the caller checks
    the depth, json_depth.check_depth)."""
    return json.JSONDecoder(**JSON_OPTIONS)


def not_json(what: str, exc: ValueError) -> str:
    """Why `what` (a field, a value) cannot be parsed: JSON too deep, or not JSON text."""
    return f"{what} is JSON {exc}" if isinstance(exc, json_depth.TooDeep) else f"{what} is not JSON text ({exc})"


def call_function(call: dict) -> tuple[dict, str]:
    """The object holding a call's name and arguments, and its path in the call: its `function`
    (wrapped, transformers' documented schema), or the call itself (flat: no `function` key)."""
    return (call["function"], "function.") if "function" in call else (call, "")


def tool_call_problem(call: Any) -> str | None:
    """Why `call` is not a tool call of the shapes the templates read (wrapped or flat), or None."""
    if not isinstance(call, dict):
        return f"is {_type(call)}, not an object"
    for key in ("id", "type"):
        if call.get(key) is not None and not isinstance(call[key], str):
            return f"{key} is {_type(call[key])}, not a string"
    function, path = call_function(call)
    if not isinstance(function, dict):
        return f"function is {_type(function)}, not an object with name and arguments"
    if not isinstance(function.get("name"), str) or not function["name"]:
        return f"{path}name is {_type(function.get('name'))}, not a non-empty string"
    if not isinstance(function.get("arguments"), (str, dict)):
        return f"{path}arguments is {_type(function.get('arguments'))}, not a JSON string or an object"
    return None


def content_problem(value: Any) -> str | None:
    """Why a content that is not a string or null is not a list of parts (objects, each with a
    string `type`), or None."""
    if not isinstance(value, list):
        return f"content is {_type(value)}, not a string, null or a list of parts"
    for number, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return f"content[{number}] is {_type(part)}, not a part (an object with a string 'type')"
    return None


def unknown_role(role: Any) -> str:
    if role is None:  # a JSON message without the key, or a null in a parquet struct
        return f"no role (missing or null; expected one of {', '.join(ROLES)})"
    return f"unknown role {quoted(role)} (expected one of {', '.join(ROLES)})"


def field_problem(key: str, value: Any, role: str | None) -> str | None:
    """Why a message's `key` (one of EXTRA_FIELDS, or `content` when not a string, not null) cannot be
    carried as it is, or None."""
    if key == "content":
        return content_problem(value)
    if key == TRAIN:
        if not isinstance(value, bool):
            return f"train is {_type(value)}, not true or false"
        return None if role == "assistant" or value is False else (
            f"train: true on a {quoted(role)} message (only an assistant turn, which the model writes, can train)")
    if key != "tool_calls":
        return None if isinstance(value, str) else f"{key} is {_type(value)}, not a string"
    if role != "assistant":
        return f"tool_calls on a {quoted(role)} message (only an assistant message calls tools)"
    if not isinstance(value, list):
        return f"tool_calls is {_type(value)}, not a list"
    for number, call in enumerate(value):
        problem = tool_call_problem(call)
        if problem is not None:
            return f"tool_calls[{number}] {problem}"
    return None


def fields_text(fields: dict[str, Any], role: str | None) -> tuple[str | None, str | None]:
    """(the normalised `fields` text of a message's extra fields, in their order, null ones left
    out; or None when it has none) and why they cannot be carried, or None. An unknown role is named first:
    "tool_calls on a 'asistant' message" would hide the typo, and suggest skipping the conversation."""
    if isinstance(role, str) and role not in ROLES:  # a null role, or one not UTF-8: the reader names it
        return None, unknown_role(role)
    present = {key: value for key, value in fields.items() if value is not None}
    if isinstance(present.get("tool_calls"), str):  # the list as JSON text (a string column): parsed
        try:
            present["tool_calls"] = parse_json(present["tool_calls"])
        except ValueError as exc:
            return None, not_json("tool_calls", exc)
    for key, value in present.items():
        problem = field_problem(key, value, role)
        if problem is not None:
            return None, problem
    return (json.dumps(present, ensure_ascii=False) if present else None), None


def tools_problem(tools: Any) -> str | None:
    """Why a conversation's tools value (parsed) is not a list of function schemas (objects), or None."""
    if not isinstance(tools, list):
        return f"tools is {_type(tools)}, not a list of function schemas"
    for number, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"tools[{number}] is {_type(tool)}, not an object"
    return None


def tools_text(value: Any) -> tuple[str | None, str | None]:
    """(the normalised `tools` text, None for no tools list) and why the value cannot be carried.
    A string is the list's JSON text, kept byte for byte; a typed list is written as JSON."""
    if value is None:
        return None, None
    try:
        parsed = parse_json(value) if isinstance(value, str) else value
    except ValueError as exc:
        return None, not_json("tools", exc)
    problem = tools_problem(parsed)
    if problem is not None:
        return None, problem
    return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)), None

