"""Where a tool call's arguments stand in a render when the template writes them through a JSON filter:
the sentinels of encode/placement.py cannot pass through one (an object is no text to replace, and a
text's quotes and escapes are the filter's), so views/record_marks.py finds them from the record's own
fields instead. After the call's placed name, up to the next placed field (or the text's end), it looks
for the arguments as a template can write them, and takes them only where exactly one place there holds
one of those serializations:

- transformers' `tojson` filter, the one its chat-template environment binds (the template's own,
  taken from the compiled template: json.dumps with ensure_ascii=False, no indent, the default
  separators, no sort_keys), with each of its options as a template may pass them: ensure_ascii,
  sort_keys, indent 2 or 4, the compact separators (",", ":");
- Jinja's built-in `tojson` (jinja2.utils.htmlsafe_json_dumps with the environment's default policy,
  sort_keys=True; `<`, `>`, `&`, `'` escaped), indent 2 or 4 too;
- for an object, Python's str of it, as Jinja prints a dict without a filter.

Never from the markup around them: where none of these stands there exactly once, the call's region is
its name alone, and the views' note counts it.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from ..encode.placement import MaskError, Placed, call_function, message_fields, place_fields

_LAYOUTS = ({}, {"separators": (",", ":")}, {"indent": 2}, {"indent": 4})


def serializations(arguments: Any, tojson: Callable[..., str]) -> set[str]:
    """Every text the template can write for `arguments` (an object, or a text it did not write
    verbatim) through `tojson` (the environment's filter), Jinja's built-in one, or unfiltered."""
    from jinja2.defaults import DEFAULT_POLICIES
    from jinja2.utils import htmlsafe_json_dumps

    out = {tojson(arguments, ensure_ascii=ascii_only, sort_keys=ordered, **layout)
           for ascii_only, ordered, layout in itertools.product((False, True), (False, True), _LAYOUTS)}
    jinja_kwargs = DEFAULT_POLICIES["json.dumps_kwargs"]
    out |= {str(htmlsafe_json_dumps(arguments, **jinja_kwargs, **layout)) for layout in _LAYOUTS
            if "separators" not in layout}
    if isinstance(arguments, dict):
        out.add(str(arguments))
    return out


def found_once(text: str, start: int, end: int, candidates: set[str]) -> tuple[int, int] | None:
    """The one (start, end) within text[start:end] where any of `candidates` stands; None where none
    does, or more than one place does."""
    places = set()
    for candidate in candidates:
        at = text.find(candidate, start, end)
        while at >= 0 and len(places) < 2:
            places.add((at, at + len(candidate)))
            at = text.find(candidate, at + 1, end)
    return places.pop() if len(places) == 1 else None


def placed_with_arguments(renderer, messages, tools, text: str) -> tuple[list[Placed], set[tuple[int, int]]]:
    """message_fields placed by encode/placement.py's sentinels (in text order), with each tool call's
    arguments they cannot place found after its placed name: an object, or a text the template writes
    through a JSON filter (its sentinel fails the proof: the fields are placed again without the
    texts); and the (message, call) of the arguments not found once there."""
    fields = message_fields(messages)
    texts = [f for f in fields if f[1][0] == "tool_calls" and f[1][-1] == "arguments"]
    try:
        placed, searched = place_fields(messages, tools, text, renderer.render, fields), (dict,)
    except MaskError:
        if not texts:
            raise
        placed = place_fields(messages, tools, text, renderer.render, [f for f in fields if f not in texts])
        searched = (dict, str)
    tojson, name_only, found = renderer.json_filter(tools), set(), []
    for k, name in enumerate(placed):
        arguments = _arguments(messages[name.message], name.call) if name.kind == "tool_call" else None
        if not isinstance(arguments, searched) or arguments == "":
            continue
        end = placed[k + 1].start if k + 1 < len(placed) else len(text)
        at = found_once(text, name.end, end, serializations(arguments, tojson))
        if at is None:
            name_only.add((name.message, name.call))
        else:
            found.append(Placed(name.message, "tool_call", *at, name.call))
    return sorted(placed + found, key=lambda p: p.start), name_only


def _arguments(message: dict, call: int):
    """The arguments of the message's tool call `call`, as the record holds them (wrapped or flat)."""
    return call_function(message["tool_calls"][call]).get("arguments")
