"""Checking a preference row file (rowfile/preference.py) against its manifest, failing closed: the schema
and every row's checks (a prompt, masks of 0 and 1 as long as their ids with a target in each completion,
chosen and rejected not the same, token ids below the tokenizer's size, the declared lengths), then every
figure and hash the manifest (or the command line) gives, each difference named; with the manifest's row
digests, the first differing row too. Exit codes as for the SFT file (verification/checks.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from ..publish.manifest import manifest_path
from ..publish.preference import read_preference_manifest
from ..rowfile.preference import FORMAT as ROW_FORMATS
from ..rowfile.preference_read import figures_of
from ..rowfile.schema import RowFormatError, UnreadableError
from .checks import Report, UsageError, row_differences


def is_preference_file(parquet: Path) -> bool:
    """Whether the file's schema says it is a preference row file (False when it cannot be read: the
    native verifier says why)."""
    try:
        metadata = pq.read_schema(parquet).metadata or {}
    except Exception:  # unreadable: left to the verifier that reports it
        return False
    return metadata.get(b"databuild.format", b"").decode("utf-8", "replace") in ROW_FORMATS.values()


def verify_preference(parquet: Path, manifest: Path | None = None, rows_sha256: str | None = None,
                      parquet_sha256: str | None = None, recipe: Path | None = None) -> tuple[Report, str]:
    """The report, and what was checked, in words: against the manifest (given, else the one beside the
    file, if any), the hashes given, and a recipe's workload.dataset block."""
    given = manifest is not None
    manifest = manifest or manifest_path(parquet)
    expected: dict = {}
    checked = []
    if given and not manifest.exists():
        raise UsageError(f"{manifest}: no such manifest")
    if manifest.exists():
        data = read_preference_manifest(manifest)
        expected = {**{f"output.{k}": v for k, v in data["output"].items() if k != "file"}}
        limits = data["build"]["prompt_tokens"], data["build"]["sequence_tokens"]
        below = data["inputs"]["tokenizer"].get("size")
        digests = data["row_digests"]
        checked.append(f"the manifest {manifest.name}")
    elif rows_sha256 is None and parquet_sha256 is None and recipe is None:
        raise UsageError(f"{parquet}: no manifest beside it ({manifest.name}) and no --rows-sha256, "
                         "--parquet-sha256 or --recipe given: nothing to check it against")
    else:
        limits, below, digests = (None, None), None, None
    if recipe is not None:
        expected |= recipe_expectations(recipe)
        checked.append(f"the recipe {recipe.name}")
    for field, value in (("output.rows_sha256", rows_sha256), ("output.parquet_sha256", parquet_sha256)):
        if value is not None:
            expected[field] = value
            checked.append(f"--{field.removeprefix('output.').replace('_', '-')}")
    try:
        figures, digest, size = figures_of(parquet, below, *limits)
    except UnreadableError as exc:
        return Report([str(exc)], [], unreadable=True), ", ".join(checked)
    except RowFormatError as exc:
        return Report([str(exc)], []), ", ".join(checked)
    found = {**{f"output.{k}": v for k, v in figures.record().items()},
             "output.parquet_sha256": digest, "output.parquet_bytes": size}
    failures = []
    for field, value in expected.items():
        if found.get(field) != value:
            more = row_differences(digests, tuple(figures.row_digests)) if field == "output.rows_sha256" and \
                digests is not None else ""
            failures.append(f"{field}: expected {value!r}, found {found.get(field)!r}{more}")
    return Report(failures, []), ", ".join(checked)


def refuse_options(parquet: Path, **given) -> None:
    """Options of the SFT verifier that a preference file has no figure for: refused, never ignored."""
    for name, value in given.items():
        if value is not None:
            raise UsageError(f"{parquet}: --{name.replace('_', '-')} does not apply to a preference row file")



# workload.dataset keys (publish/preference.py's recipe_values) and the output figures they pin
RECIPE_PINS = {("rows_sha256",): "output.rows_sha256", ("build", "rows"): "output.rows",
               ("build", "parquet_sha256"): "output.parquet_sha256", ("build", "parquet_bytes"): "output.parquet_bytes",
               ("build", "kind"): "output.kind"}


def recipe_expectations(recipe: Path) -> dict:
    """What a recipe's workload.dataset block pins of a preference file; one without rows_sha256 is refused."""
    from ..publish.recipe import read_dataset_block

    block = read_dataset_block(recipe)
    if block.get("rows_sha256") is None:
        raise UsageError(f"{recipe}: workload.dataset pins no rows_sha256: nothing to check the file against")
    found = {}
    for path, field in RECIPE_PINS.items():
        value = block
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            found[field] = value
    return found
