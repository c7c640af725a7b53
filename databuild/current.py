"""Is the build already in the output directory this build? `make` asks before it builds anything.

A build is up to date when its manifest's pinned sections (`PINNED`: the format, the name, `build`,
`inputs` and `versions`) equal, key for key, the ones this config and these inputs would write, as
`build_manifest` makes them, and the file verifies against that manifest. The comparison is of whole
sections, never a list of chosen keys: a setting added to the manifest later is compared from the
day it is written, and a manifest written before it existed lacks it, so it is rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .errors import BuildError
from .publish.manifest import manifest_path
from .publish.manifest_diff import ABSENT, changes
from .publish.manifest_read import read_manifest
from .verification import gather, verify

PINNED = ("format", "name", "build", "inputs", "versions")
SHOWN = 60  # characters of a differing value quoted in a message


def pinned(manifest: dict[str, Any]) -> dict[str, Any]:
    """The sections of a manifest fixed before its build's first row: what decides whether it is current."""
    return {key: manifest.get(key) for key in PINNED}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def first_difference(found: Any, expected: Any) -> str | None:
    """The first place two JSON values differ, as 'KEY: VALUE in the build's manifest, VALUE now'."""
    change = next(changes(found, expected), None)
    if change is None:
        return None
    old = "absent from the build's manifest" if change.a is ABSENT else f"{_show(change.a)} in the build's manifest"
    return f"{change.key}: {old}, {'absent' if change.b is ABSENT else _show(change.b)} now"


def stale_reason(parquet: Path, expected: dict[str, Any], read: Callable[[Path], dict] = read_manifest,
                 check: Callable[[Path, Path], Any] | None = None) -> str | None:
    """None when the build at `parquet` is up to date for the pinned sections `expected`; else why not.
    `read` reads its manifest and `check(parquet, manifest)` verifies it (a Report): by default an SFT
    build's; a preference build gives its own (preference/build.py)."""
    manifest_file = manifest_path(parquet)
    if not manifest_file.exists():
        return "no build there yet" if not parquet.exists() else "its manifest is missing (an interrupted build)"
    try:
        manifest = read(manifest_file)
    except BuildError as exc:
        return f"its manifest is unreadable ({exc})"
    if (difference := first_difference(pinned(manifest), pinned(expected))) is not None:
        return difference
    try:
        report = check(parquet, manifest_file) if check else verify(parquet, gather(parquet, manifest_file))
    except BuildError as exc:
        return f"it does not verify: {exc}"
    if report.failures:
        return f"it does not verify: {report.failures[0]}"
    return None
