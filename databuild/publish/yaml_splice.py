"""Write plain values into a YAML text in place: ruamel composes the text into nodes that know
where each value starts and ends, and only those characters change (or new lines are added after a
mapping's last value). Comments, quoting, folding and line breaks elsewhere stay byte for byte.
Layouts this cannot edit in place (flow mappings, aliases, merged keys, collections as values) are
refused, never rewritten.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ..errors import BuildError

WIDTH = 120  # the seed recipe folds long strings at 120 columns


def _scalar_lines(key: str, value: Any, column: int) -> list[str]:
    """`key: value` as YAML at the given indent, folded like the seed, as lines without line breaks."""
    if isinstance(value, float):
        return [" " * column + f"{key}: {value:.2f}"]
    yaml = YAML()
    yaml.width = max(WIDTH - column, 40)
    buffer = io.StringIO()
    yaml.dump({key: value}, buffer)
    # A plain scalar's line breaks fold to spaces: the spaces ruamel leaves before them are noise.
    lines = [line.rstrip(" ") for line in buffer.getvalue().splitlines()]
    return [" " * column + lines[0]] + [" " * (column + 2) + line.lstrip(" ") for line in lines[1:]]


def _block_lines(mapping: dict[str, Any], column: int) -> list[str]:
    """New keys, a nested dict becoming a nested block mapping."""
    lines = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            lines += [" " * column + f"{key}:"] + _block_lines(value, column + 2)
        else:
            lines += _scalar_lines(key, value, column)
    return lines


def _not_editable(where: str, dotted: str, what: str) -> BuildError:
    return BuildError(f"{where}: {dotted} is {what}, not a layout the writer can edit in place (it writes plain "
                      "values into block mappings); recipe left unchanged")


def _pair(node: MappingNode, key: str, where: str, dotted: str):
    """(key node, value node) of `key` as written in this mapping, or None (absent, or merged in)."""
    for key_node, value in node.value:
        if isinstance(key_node, ScalarNode) and key_node.value == key:
            if value.start_mark.index < key_node.end_mark.index:  # an alias: its node stands at the anchor
                raise _not_editable(where, dotted, "an alias")
            return key_node, value
    return None


def _end(text: str, key: ScalarNode, value) -> int:
    """Offset just past the text of a mapping's last value (a block collection's last leaf)."""
    while isinstance(value, (MappingNode, SequenceNode)) and not value.flow_style and value.value:
        value = value.value[-1]
        if isinstance(value, tuple):
            key, value = value
    span = text[value.start_mark.index:value.end_mark.index].rstrip()  # a block scalar's span runs past its breaks
    return value.start_mark.index + len(span) if span else key.end_mark.index  # an empty value ends at its key


def _replacement(text: str, key: ScalarNode, value, new: Any, nl: str, where: str, dotted: str):
    """Splice putting `new` where the value stands; what follows it on the line (a comment) stays."""
    if not isinstance(value, ScalarNode):
        raise _not_editable(where, dotted, "a mapping" if isinstance(value, MappingNode) else "a list")
    first, *rest = _scalar_lines(key.value, new, key.start_mark.column)
    rendered = nl.join([first.split(":", 1)[1].lstrip(" ")] + rest)
    start = value.start_mark.index
    span = text[start:value.end_mark.index].rstrip()
    if not span:  # an empty value's node stands at the next token: write just after the key's colon
        start = text.index(":", key.end_mark.index) + 1
        rendered = " " + rendered
    return start, start + len(span), rendered, key.start_mark.column + 1  # inside its key's line


def _empty(node) -> bool:
    """A key written with nothing after it (`build:`), which YAML reads as null."""
    return isinstance(node, ScalarNode) and node.tag.endswith(":null") and node.value == ""


def _insertion(text: str, key: ScalarNode, node: MappingNode, new: dict[str, Any], nl: str):
    """Splice adding `new` as lines after the mapping's last value; `{}`, or nothing, after the key
    turns into a block mapping."""
    if _empty(node):  # the new lines go after the key's line, which keeps any comment on it
        column, stop = key.start_mark.column + 2, text.find("\n", key.end_mark.index) + 1
        block = nl.join(_block_lines(new, column))
        return (stop, stop, block + nl, column) if stop else (len(text), len(text), nl + block, column)
    if node.value:
        column, end = node.value[0][0].start_mark.column, _end(text, *node.value[-1])
    else:
        column, end = key.start_mark.column + 2, node.end_mark.index
    stop = text.find("\n", end) + 1
    block = nl.join(_block_lines(new, column))
    block, stop = (block + nl, stop) if stop else (nl + block, len(text))  # a last line without a break keeps none
    if node.value:
        return stop, stop, block, column
    start = len(text[:node.start_mark.index].rstrip(" "))  # drop ` {}`, keep the rest of its line
    return start, stop, text[node.end_mark.index:stop] + block, column


def splices(text: str, writes: list[tuple[tuple[str, ...], Any]], where: str) -> list[tuple[int, int, str, int]]:
    """(start, stop, new text, indent) edits that write the values: each replaces a value or adds lines."""
    newline = text.find("\n")
    nl = "\r\n" if newline > 0 and text[newline - 1] == "\r" else "\n"
    root = YAML(typ="safe", pure=True).compose(text)
    splices, additions = [], {}
    for path, value in writes:
        full = ("workload", "dataset") + path
        key, node = None, root
        for depth, name in enumerate(full):
            if depth >= 2 and _empty(node):  # `build:` with nothing after it: a mapping to fill
                target = additions.setdefault(id(node), (key, node, {}))[2]
                for missing in full[depth:-1]:
                    target = target.setdefault(missing, {})
                target[full[-1]] = value
                break
            if depth >= 2 and node.flow_style and node.value:
                raise _not_editable(where, ".".join(full[:depth]), "a flow mapping")
            pair = _pair(node, name, where, ".".join(full[:depth + 1]))
            if pair is None and depth < 2:
                raise _not_editable(where, ".".join(full[:depth + 1]), "merged in")
            if pair is None:  # added to the mapping at full[:depth], with any mapping missing below it
                target = additions.setdefault(id(node), (key, node, {}))[2]
                for missing in full[depth:-1]:
                    target = target.setdefault(missing, {})
                target[full[-1]] = value
                break
            key, node = pair
        else:
            splices.append(_replacement(text, key, node, value, nl, where, ".".join(full)))
    return splices + [_insertion(text, key, node, new, nl) for key, node, new in additions.values()]
