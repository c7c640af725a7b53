"""What a row file must match, gathered for `databuild verify`: the figures of a manifest (by default the
one beside the file), of a recipe's `workload.dataset` block, or hashes given on the command line,
each named by where it comes from; verification/checks.py checks a file against them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BuildError
from ..publish.manifest import manifest_path
from ..publish.manifest_read import read_manifest
from ..rowfile.schema import UnreadableError

FILE_FIELDS = ("parquet_sha256", "parquet_bytes")
ROW_FIELDS = ("rows_sha256", "rows", "row_tokens", "supervised_token_ratio", "padding_tokens")
# Checked whenever a manifest holds it; a manifest written before it existed still pins the boundaries
# through parquet_sha256, so its absence weakens nothing.
SEGMENT_FIELD = "segments_sha256"


@dataclass(frozen=True)
class Expectation:
    field: str
    value: Any
    origin: str  # where the expectation comes from, named in messages
    decimals: int | None = None  # the ratio as a recipe shows it (rounded); None = exact


@dataclass(frozen=True)
class Expected:
    """What a file must match: the checks, and from a manifest its row digests (to name the first
    row that differs) and the library versions it was built with (to warn when they differ)."""
    checks: list[Expectation]
    row_digests: list[str] | None = None
    built_with: dict[str, str] | None = None
    manifest: Path | None = None  # the manifest the checks come from, if any: `databuild diff` explains with it
    token_ids_below: int | None = None  # the manifest's inputs.tokenizer.size: every id is below it
    validation: dict[str, Any] | None = None  # the manifest's validation file (its name and hashes), checked too



def from_manifest(manifest: dict[str, Any], origin: str) -> list[Expectation]:
    """Every output figure a manifest must hold: a manifest missing one checks nothing, so it is refused."""
    output = manifest.get("output")
    missing = [f for f in FILE_FIELDS + ROW_FIELDS if not isinstance(output, dict) or f not in output]
    if missing:
        raise BuildError(f"{origin}: the manifest has no output.{missing[0]}: not a complete build's manifest; "
                         "rerun make, which replaces an incomplete build")
    present = (SEGMENT_FIELD,) if SEGMENT_FIELD in output else ()
    return [Expectation(f, output[f], origin) for f in FILE_FIELDS + ROW_FIELDS + present]


def from_recipe(path: Path) -> list[Expectation]:
    from ..publish.recipe import read_dataset_block

    dataset = read_dataset_block(path)
    build = dataset.get("build") or {}
    origin = f"{path} workload.dataset"
    if not isinstance(build, dict):
        raise BuildError(f"{origin}.build is not a mapping")
    found = []
    if "rows_sha256" in dataset:
        found.append(Expectation("rows_sha256", str(dataset["rows_sha256"]), origin))
    for field in FILE_FIELDS + ROW_FIELDS[1:]:
        if field in build:
            value = build[field]
            decimals = None
            if field == "supervised_token_ratio":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise BuildError(f"{origin}.build.supervised_token_ratio: {value!r} is not a number")
                decimals, value = max(_decimals_shown(path, build, field), 2), float(value)
            found.append(Expectation(field, value, f"{origin}.build", decimals))
    if not found:
        raise BuildError(f"{path}: workload.dataset holds no hash or count to check against; "
                         f"'databuild make NAME --recipe {path}' writes them")
    return found


def _decimals_shown(path: Path, mapping, key: str) -> int:
    """Decimals of a number as the recipe's text writes it (`0.60` is two, though it loads as 0.6)."""
    line, column = mapping.lc.value(key)
    text = path.read_text(encoding="utf-8").splitlines()[line][column:]
    return len(re.match(r"[-+]?\d*\.?(\d*)", text).group(1))


def gather(parquet: Path, manifest: Path | None = None, recipe: Path | None = None,
           rows_sha256: str | None = None, parquet_sha256: str | None = None,
           segments_sha256: str | None = None) -> Expected:
    """The expectations for a file: the given sources, or by default the manifest beside it."""
    expectations: list[Expectation] = []
    digests = versions = size = validation = None
    explicit = any(x is not None for x in (manifest, recipe, rows_sha256, parquet_sha256, segments_sha256))
    beside = manifest_path(parquet)
    if not parquet.is_file():  # unreadable (exit 3), whatever else is missing with it
        raise UnreadableError(f"{parquet}: no such file")
    if manifest is None and not explicit:
        if not beside.exists():
            raise BuildError(f"{parquet}: no manifest beside it ({beside.name}): the build is incomplete, or "
                             "pass --manifest, --recipe or --rows-sha256 to say what to expect")
        manifest = beside
    if manifest is not None:
        data = read_manifest(manifest)
        expectations += from_manifest(data, str(manifest))
        digests, versions = data.get("row_digests"), data.get("versions")
        # absent from a manifest written before it was recorded (SHAPE checked its type where present)
        size = ((data.get("inputs") or {}).get("tokenizer") or {}).get("size")
        validation = data.get("validation")
    if recipe is not None:
        expectations += from_recipe(recipe)
    if rows_sha256 is not None:
        expectations.append(Expectation("rows_sha256", rows_sha256.lower(), "--rows-sha256"))
    if parquet_sha256 is not None:
        expectations.append(Expectation("parquet_sha256", parquet_sha256.lower(), "--parquet-sha256"))
    if segments_sha256 is not None:
        expectations.append(Expectation(SEGMENT_FIELD, segments_sha256.lower(), "--segments-sha256"))
    return Expected(expectations, digests, versions, manifest, size, validation)
