"""The manifest: every pin, count and library version of a build, written last, beside the parquet.

It holds no time stamp or host name, so the same build writes the same manifest bytes.
"""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = "databuild-manifest/1"
LIBRARIES = ("databuild", "numpy", "pyarrow", "tokenizers", "transformers", "jinja2", "huggingface_hub",
             "datasets", "click", "ruamel.yaml")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def manifest_path(parquet: Path) -> Path:
    return parquet.with_name(parquet.name.removesuffix(".parquet") + ".manifest.json")


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def write_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Temporary name, fsync, rename: a reader sees the old manifest or the whole new one."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(dumps(manifest))
        handle.flush()
        os.fsync(handle.fileno())
    replace_durably(partial, path)


def replace_durably(source: Path, target: Path) -> None:
    """os.replace, then fsync of the directory: without it a power loss can undo the rename."""
    os.replace(source, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_manifest(path: Path) -> dict[str, Any]:
    from .errors import BuildError

    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BuildError(f"{path}: cannot read manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BuildError(f"{path}: not a {FORMAT} manifest")
    return manifest


def manifest_beside(parquet: Path) -> dict | None:
    path = manifest_path(parquet)
    return read_manifest(path) if path.is_file() else None
