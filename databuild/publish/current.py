"""Is the build already in the output directory this build? `make` asks before it builds anything.

A build is up to date when its manifest's pinned sections (`PINNED`: the format, the name, `build`,
`inputs` and `versions`) equal, key for key, the ones this config and these inputs would write, as
`build_manifest` makes them, and the file verifies against that manifest. The comparison is of whole
sections, never a list of chosen keys: a setting added to the manifest later is compared from the
day it is written, and a manifest written before it existed lacks it, so it is rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BuildError
from .manifest import manifest_path
from .manifest_read import read_manifest

PINNED = ("format", "name", "build", "inputs", "versions")
SHOWN = 60  # characters of a differing value quoted in a message


def pinned(manifest: dict[str, Any]) -> dict[str, Any]:
    """The sections of a manifest fixed before its build's first row: what decides whether it is current."""
    return {key: manifest.get(key) for key in PINNED}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def first_difference(found: Any, expected: Any, where: str = "") -> str | None:
    """The first place two JSON values differ, as 'KEY: VALUE in the build's manifest, VALUE now'."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in list(expected) + [k for k in found if k not in expected]:
            path = f"{where}.{key}" if where else key
            if key not in found:
                return f"{path}: absent from the build's manifest, {_show(expected[key])} now"
            if key not in expected:
                return f"{path}: {_show(found[key])} in the build's manifest, absent now"
            if (difference := first_difference(found[key], expected[key], path)) is not None:
                return difference
        return None
    if isinstance(found, list) and isinstance(expected, list) and len(found) == len(expected):
        for index, (a, b) in enumerate(zip(found, expected)):
            if (difference := first_difference(a, b, f"{where}[{index}]")) is not None:
                return difference
        return None
    if isinstance(found, list) and isinstance(expected, list):
        return f"{where}: {len(found)} entries in the build's manifest, {len(expected)} now"
    if type(found) is not type(expected) or found != expected:
        return f"{where}: {_show(found)} in the build's manifest, {_show(expected)} now"
    return None


def stale_reason(parquet: Path, expected: dict[str, Any]) -> str | None:
    """None when the build at `parquet` is up to date for the pinned sections `expected`; else why not."""
    from ..verify import gather, verify

    manifest_file = manifest_path(parquet)
    if not manifest_file.exists():
        return "no build there yet" if not parquet.exists() else "its manifest is missing (an interrupted build)"
    try:
        manifest = read_manifest(manifest_file)
    except BuildError as exc:
        return f"its manifest is unreadable ({exc})"
    if (difference := first_difference(pinned(manifest), pinned(expected))) is not None:
        return difference
    try:
        report = verify(parquet, gather(parquet, manifest_file))
    except BuildError as exc:
        return f"it does not verify: {exc}"
    if report.failures:
        return f"it does not verify: {report.failures[0]}"
    return None
