"""Validation primitives shared by the config's sections: each failure names the key and the bad value."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import BuildError, quoted
from .schema import COMMIT_RE


def _fail(where: str, key: str, value: Any, why: str) -> BuildError:
    return BuildError(f"{where}: key '{key}' = {quoted(value)}: {why}")


def _take(raw: dict, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    if key not in raw:
        if default is ...:
            raise BuildError(f"{where}: missing key '{key}'")
        return default
    value = raw[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        names = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise _fail(where, key, value, f"expected {names}")
    return value


def _choice(raw: dict, key: str, choices: tuple[str, ...], where: str, default: str) -> str:
    """A string key that takes one of `choices` (`default` when absent)."""
    value = _take(raw, key, str, where, default)
    if value not in choices:
        raise _fail(where, key, value, f"expected one of {', '.join(choices)}")
    return value


def _commit(raw: dict, key: str, where: str) -> str:
    value = _take(raw, key, str, where)
    if not COMMIT_RE.match(value):
        raise _fail(where, key, value, "a pinned build needs a 40-hex commit, not a branch or tag")
    return value


def _local_dir(raw: dict, where: str, base: Path) -> Path | None:
    value = _take(raw, "dir", str, where, None)
    return None if value is None else (base / os.path.expanduser(value)).resolve()


def _reject_unknown(raw: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(raw) - known, key=str)  # a YAML key may be a number
    if unknown:
        raise BuildError(f"{where}: unknown key {quoted(unknown[0])} (known: {', '.join(sorted(known))})")
