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
    _check_shape(manifest, path)
    return manifest


NUMBER = (int, float)
# The type of every field a reader of the manifest uses (where present): a manifest edited by hand
# is refused in one line naming the field, not met by a traceback deep in a view.
SHAPE: dict[str, type | tuple] = {
    "output": dict, "build": dict, "inputs": dict, "counts": dict, "versions": dict, "row_digests": list,
    "continued_rows": list,
    "output.rows": int, "output.row_tokens": int, "output.tokens": int, "output.padding_tokens": int,
    "output.supervised_tokens": int, "output.supervised_token_ratio": NUMBER, "output.parquet_bytes": int,
    "output.rows_sha256": str, "output.parquet_sha256": str, "output.file": str,
    "build.template_kwargs": dict, "build.seed": int, "build.loss_mask": str,
    "inputs.tokenizer": dict, "inputs.tokenizer.repo": str, "inputs.tokenizer.revision": str,
    "inputs.tokenizer.sha256": dict, "inputs.source": dict, "inputs.source.files": list,
    "counts.rows_skipped": dict, "counts.conversations_skipped": dict, "counts.by_source": dict,
}
ITEMS: dict[str, dict[str, type | tuple]] = {  # fields of each entry of a mapping's values or a list
    "counts.by_source": {"conversations": int, "tokens": int},
    "inputs.source.files": {"path": str, "bytes": int, "sha256": str, "rows": int},
}


def _check_shape(manifest: dict[str, Any], path: Path) -> None:
    from .errors import BuildError

    def fail(field: str, value: Any, kind) -> BuildError:
        names = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        return BuildError(f"{path}: manifest field {field} is {type(value).__name__} {value!r:.40}, expected {names}")

    def good(value: Any, kind) -> bool:
        return isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)

    for field, kind in SHAPE.items():
        value, present = manifest, True
        for key in field.split("."):
            present = isinstance(value, dict) and key in value
            if not present:
                break
            value = value[key]
        if present and not good(value, kind):
            raise fail(field, value, kind)
        if present and field in ITEMS:
            for index, entry in enumerate(value.values() if isinstance(value, dict) else value):
                if not isinstance(entry, dict):
                    raise fail(f"{field}[{index}]", entry, dict)
                for key, item_kind in ITEMS[field].items():
                    if key in entry and not good(entry[key], item_kind):
                        raise fail(f"{field}[{index}].{key}", entry[key], item_kind)


def manifest_beside(parquet: Path) -> dict | None:
    path = manifest_path(parquet)
    return read_manifest(path) if path.is_file() else None
