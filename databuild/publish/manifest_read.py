"""Reading a manifest back: its format checked, and the type of every field a reader uses, so that a
manifest edited by hand is refused in one line naming the field, not met by a traceback in a view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BuildError
from ..records.problems import MALFORMED
from ..utils import json_depth
from .funnel import BOXES as FUNNEL_BOXES
from .manifest import FORMAT, manifest_path


def read_manifest(path: Path) -> dict[str, Any]:
    manifest = manifest_of_format(path, FORMAT)
    _check_shape(manifest, path)
    return manifest


def manifest_of_format(path: Path, expected: str) -> dict[str, Any]:
    """A manifest's JSON, refused in one line when it cannot be read or is not of the `expected` format."""
    try:
        manifest = json_depth.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BuildError(f"{path}: cannot read manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != expected:
        raise BuildError(f"{path}: not a {expected} manifest")
    return manifest


NUMBER = (int, float)
OPTIONAL_STR = (str, type(None))  # a repo and revision: null for a local dir pinned by content
# The type of every field a reader of the manifest uses (where present): a manifest edited by hand
# is refused in one line naming the field, not met by a traceback deep in a view.
SHAPE: dict[str, type | tuple] = {
    "name": str, "output": dict, "build": dict, "inputs": dict, "counts": dict, "versions": dict,
    "row_digests": list, "continued_rows": list, "skipped_conversations": list,
    "output.rows": int, "output.row_tokens": int, "output.tokens": int, "output.padding_tokens": int,
    "output.supervised_tokens": int, "output.supervised_token_ratio": NUMBER, "output.parquet_bytes": int,
    "output.rows_sha256": str, "output.segments_sha256": str, "output.parquet_sha256": str, "output.file": str,
    "build.template_kwargs": dict, "build.seed": int, "build.loss_mask": str,
    "inputs.tokenizer": dict, "inputs.tokenizer.repo": OPTIONAL_STR, "inputs.tokenizer.revision": OPTIONAL_STR,
    "inputs.tokenizer.sha256": dict, "inputs.tokenizer.size": int, "inputs.sources": list, "counts.sources": list,
    "counts.rows_skipped": dict, "counts.conversations_skipped": dict, "counts.by_source": dict,
    "build.packing": dict, "build.packing.policy": str, "counts.overlong_conversations": dict,
    "counts.conversations_read": int, "counts.source_conversations": int, "counts.separators_inserted": int,
    "tokenizer_dir": str, "counts.funnel": dict, "counts.funnel.total": dict, "counts.funnel.sources": list,
    "counts.funnel.total.dropped": dict,
    "validation": dict, "validation.file": str, "validation.manifest": str, "validation.rows": int,
    "validation.rows_sha256": str, "validation.parquet_sha256": str, "validation.parquet_bytes": int,
}
# Each entry of a mapping's values or of a list: a type, or a mapping's typed fields.
ITEMS: dict[str, type | dict[str, type | tuple]] = {
    "counts.by_source": {"conversations": int, "tokens": int},
    "inputs.sources": {"repo": OPTIONAL_STR, "revision": OPTIONAL_STR, "split": str, "origin": str, "files": list,
                       "rows": int, "selected": int, "selected_sha256": str},
    "counts.sources": {"repo": str, "selected": int, MALFORMED: int, "conversations_read": int,
                       "conversations_skipped": dict},
    "counts.funnel.sources": {"source": str, "dropped": dict, **{box: int for box in FUNNEL_BOXES}},
    "counts.funnel.total.dropped": int,
    "counts.rows_skipped": int, "counts.conversations_skipped": int, "counts.overlong_conversations": int,
    "row_digests": str, "continued_rows": int, "versions": str,
    "skipped_conversations": {"index": int, "file": str, "row": int, "id": str, "reason": str, "kind": str,
                              "source": str},
}


def _check_shape(manifest: dict[str, Any], path: Path) -> None:
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
            fields = ITEMS[field]
            for index, entry in enumerate(value.values() if isinstance(value, dict) else value):
                if not isinstance(fields, dict):
                    if not good(entry, fields):
                        raise fail(f"{field}[{index}]", entry, fields)
                    continue
                if not isinstance(entry, dict):
                    raise fail(f"{field}[{index}]", entry, dict)
                for key, item_kind in fields.items():
                    if key in entry and not good(entry[key], item_kind):
                        raise fail(f"{field}[{index}].{key}", entry[key], item_kind)


def manifest_beside(parquet: Path) -> dict | None:
    path = manifest_path(parquet)
    return read_manifest(path) if path.is_file() else None
