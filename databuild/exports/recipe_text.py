"""The text of a trainer configuration written beside an export: YAML, a Python call, a shell array.

Each export module says what its trainer needs (settings as plain values); this module only spells
them. Paths in them are the export's own, absolute, so the files are valid where the export lies
and nowhere else: `databuild verify` rewrites them for OUT's current place and compares.
"""

from __future__ import annotations

import io
import shlex
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML


def comment(lines: list[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


def yaml_text(header: list[str], data: dict[str, Any]) -> str:
    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # a long path stays on its line
    yaml.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return comment(header) + buffer.getvalue()


def python_call(name: str, kwargs: dict[str, Any], indent: int) -> str:
    """`name(key=value, ...)` over several lines; a nested (name, kwargs) pair is a nested call."""
    pad = " " * (indent + 4)
    parts = []
    for key, value in kwargs.items():
        text = python_call(*value, indent + 4) if isinstance(value, tuple) else repr(value)
        parts.append(f"{pad}{key}={text},\n")
    return f"{name}(\n{''.join(parts)}{' ' * indent})"


def shell_array(name: str, flags: list[tuple[str, str | None]]) -> str:
    """A bash array of flags; a value is quoted for the shell unless it already is an expansion."""
    lines = []
    for flag, value in flags:
        if value is None:
            lines.append(f"  {flag}\n")
        else:
            lines.append(f"  {flag} {value if value.startswith(chr(34)) else shlex.quote(value)}\n")
    return f"{name}=(\n{''.join(lines)})\n"


def absolute(path: Path) -> str:
    return str(Path(path).resolve())
