"""JSON text parsed with a bound on its nesting: a source's values, a manifest, a tokenizer's config.

json.loads nests a Python call per level, so text nested some thousand levels deep is a RecursionError, and
text nested a little less parses into a value that the next recursive walk (json.dumps, pickle, a template's
tojson, a diff of two manifests) cannot take. No value databuild reads needs more than a few levels (a tool's
JSON schema, a dozen): past MOST_JSON_DEPTH the text is refused as TooDeep, a ValueError, where every caller
already refuses text that is not JSON, in one line naming what it read.
"""

from __future__ import annotations

import json
from typing import Any

MOST_JSON_DEPTH = 100


class TooDeep(ValueError):
    def __init__(self):
        super().__init__(f"nested deeper than {MOST_JSON_DEPTH} levels")


def loads(text: str, **options: Any) -> Any:
    """json.loads(text, **options), refusing nesting past MOST_JSON_DEPTH (TooDeep)."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise TooDeep() from None
    if text.count("[") + text.count("{") > MOST_JSON_DEPTH:  # else it cannot nest that deep: not walked
        check_depth(value)
    return value


def check_depth(value: Any) -> None:
    """Raises TooDeep when `value`'s lists and dicts nest past MOST_JSON_DEPTH; walked with a stack of its own."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth > MOST_JSON_DEPTH:
                raise TooDeep()
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
