"""Where the template wrote each assistant field, proven: character offsets no strategy has to trust
(muse_spark's; the `assistant` strategy infers its turns instead, inference.py).

The fields are the non-empty strings an assistant message carries: its reasoning (`reasoning_content`,
`thinking`, `reasoning`), its `content`, and each tool call's function `name` and (string)
`arguments`. The conversation is rendered a second time with every field replaced by a sentinel
made of private-use characters absent from the rendered text; each sentinel the template writes must
stand there exactly once, and putting the fields back in place of their sentinels must give the
rendered text exactly. Only then are the sentinels' places, shifted by the length differences, the
fields' places. A field whose sentinel the template does not write is not written (a template that
drops earlier turns' reasoning); any other outcome raises MaskError naming the message.

`message_fields` adds each tool message's `content` (a tool result): what `show` and `report` place
to mark a row's tool calls, results and reasoning from the record (views/record_marks.py; arguments
that are an object, which no sentinel can stand for, are found there by their serializations).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from ..errors import BuildError
from ..records.conversation import REASONING_FIELDS

PRIVATE_USE = range(0xE000, 0xF900)


class MaskError(BuildError):
    """`fix`: the change that lets the build go on, when the cause is the config's rather than the
    conversation's (which on_bad_conversation: skip would only skip, every time)."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix


def fail(message_index: int, why: str, fix: str | None = None) -> MaskError:
    return MaskError(f"assistant message {message_index}: {why}", fix)


@dataclass(frozen=True)
class Placed:
    message: int
    kind: str  # content, reasoning, tool_call, tool_result
    start: int
    end: int
    call: int | None = None  # a tool call's index within its message (its name and arguments share it)


def assistant_fields(messages) -> list[tuple[int, tuple, str]]:
    """(message index, path within the message, text) of every non-empty string field of every assistant
    message: an empty field stays as it is (a sentinel there would change what a template testing for
    emptiness writes), and the proof still covers every other field."""
    fields = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        fields += [(index, (key,), message[key]) for key in REASONING_FIELDS
                   if isinstance(message.get(key), str) and message[key]]
        if isinstance(message.get("content"), str) and message["content"]:
            fields.append((index, ("content",), message["content"]))
        calls = message.get("tool_calls")
        for k, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call_function(call)
            inner = ("function",) if function is not call else ()
            for key in ("name", "arguments"):
                if isinstance(function, dict) and isinstance(function.get(key), str) and function[key]:
                    fields.append((index, ("tool_calls", k, *inner, key), function[key]))
    return fields


def call_function(call):
    """A tool call's function: OpenAI's {"type": "function", "function": {...}}, or the call itself, the
    function as some sets store it."""
    return call["function"] if isinstance(call, dict) and isinstance(call.get("function"), dict) else call


def message_fields(messages) -> list[tuple[int, tuple, str]]:
    """assistant_fields, and the non-empty string content of every tool message (a tool result)."""
    results = [(index, ("content",), message["content"]) for index, message in enumerate(messages)
               if message.get("role") == "tool" and isinstance(message.get("content"), str) and message["content"]]
    return sorted(assistant_fields(messages) + results, key=lambda field: field[0])


def _kind(message: dict, path: tuple) -> str:
    if message.get("role") == "tool":
        return "tool_result"
    return "reasoning" if path[0] in REASONING_FIELDS else "content" if path[0] == "content" else "tool_call"


def _marks(text: str, count: int) -> list[str]:
    """Sentinels made of two private-use characters the text does not hold."""
    opening, closing = "\ue000", "\ue001"
    if opening in text or closing in text:
        present = set(text)
        opening, closing = [chr(c) for c in PRIVATE_USE if chr(c) not in present][:2]
    return [f"{opening}{k}{closing}" for k in range(count)]


def _with_marks(messages, fields, marks) -> tuple[dict, ...]:
    """A copy of the messages with each field replaced by its sentinel (the caller's are never touched)."""
    out = list(messages)
    nested = {index for index, path, _ in fields if len(path) > 1}
    for index in {index for index, _, _ in fields}:
        out[index] = copy.deepcopy(messages[index]) if index in nested else dict(messages[index])
    for (index, path, _), mark in zip(fields, marks):
        target = out[index]
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = mark
    return tuple(out)


def place_fields(messages, tools, text: str, render: Callable[..., str],
                 fields: list[tuple[int, tuple, str]] | None = None) -> list[Placed]:
    """The place of every assistant field (or of `fields`: message_fields) the template writes, in
    text order; raises MaskError unless the render is reproduced exactly from those places."""
    fields = assistant_fields(messages) if fields is None else fields
    if not fields:
        return []
    marks = _marks(text, len(fields))
    try:
        marked = render(_with_marks(messages, fields, marks), tools)
    except (BuildError, RecursionError, MemoryError):  # the config's or the machine's, not the conversation's
        raise
    except Exception as exc:  # the template rendered the real fields, so it objects to the placeholders
        raise fail(fields[0][0], f"the template refuses placeholder contents ({type(exc).__name__}: {exc})") from None
    found = []
    for k, mark in enumerate(marks):
        at = marked.find(mark)
        if at >= 0 and marked.find(mark, at + 1) >= 0:
            index, path, _ = fields[k]
            raise fail(index, f"the template writes its {_kind(messages[index], path)} more than once")
        if at >= 0:
            found.append((at, k))
    placed, cursor, shift = [], 0, 0
    for at, k in sorted(found):
        index, path, value = fields[k]
        piece = marked[cursor:at]
        if not text.startswith(piece, cursor + shift) or not text.startswith(value, at + shift):
            raise _not_verbatim(index)
        placed.append(Placed(index, _kind(messages[index], path), at + shift, at + shift + len(value),
                             path[1] if path[0] == "tool_calls" else None))
        cursor = at + len(marks[k])
        shift += len(value) - len(marks[k])
    if text[cursor + shift:] != marked[cursor:]:
        raise _not_verbatim(fields[sorted(found)[-1][1]][0] if found else fields[0][0])
    return placed


def _not_verbatim(index: int) -> MaskError:
    return fail(index, "the rendered text depends on assistant content in a way character spans cannot follow")
