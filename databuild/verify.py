"""`databuild verify`: check a row file against every expectation given, and fail closed.

Expectations come from a manifest (by default the one beside the file), a recipe's
`workload.dataset` block, or hashes on the command line. Every check that fails is reported with
what was expected and what was found; with a manifest's row digests, the first differing row is
named too. Exit codes: 0 verified, 1 a difference, 2 a usage error (an option that does not apply
is refused, never ignored), 3 the file is unreadable (missing included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BuildError
from .rowfile.hashes import ParquetSummary, hash_parquet
from .rowfile.schema import RowFormatError, UnreadableError
from .publish.manifest import manifest_path
from .publish.manifest_read import read_manifest
from .rowfile.write import partials
from .utils.files import file_sha256
from .utils.versions import library_versions

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3


class UsageError(BuildError):
    """An option verify cannot apply to the file it is given: refused (exit 2), never ignored."""
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


@dataclass
class Report:
    failures: list[str]
    warnings: list[str]
    unreadable: bool = False
    summary: ParquetSummary | None = None  # the file's figures, when its rows could be read

    @property
    def exit_code(self) -> int:
        if self.unreadable:
            return EXIT_UNREADABLE
        return EXIT_DIFFERENT if self.failures else EXIT_OK


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
    from .publish.recipe import read_dataset_block

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


def row_differences(expected: list[str], found: tuple[str, ...]) -> str:
    if len(expected) != len(found):
        extra = "missing" if len(found) < len(expected) else "extra"
        first = next((i for i, (a, b) in enumerate(zip(expected, found)) if a != b), min(len(expected), len(found)))
        return f"; {extra} rows: expected {len(expected)}, found {len(found)}, first differing row {first}"
    first = next((i for i, (a, b) in enumerate(zip(expected, found)) if a != b), None)
    if first is None:
        return ""
    where = {digest: i for i, digest in enumerate(expected)}
    if found[first] in where:
        return f"; first differing row {first}: it holds expected row {where[found[first]]} (rows reordered)"
    return f"; first differing row {first}"


def _compare(expectation: Expectation, found: Any) -> bool:
    if expectation.decimals is not None:
        return round(float(found), expectation.decimals) == round(float(expectation.value), expectation.decimals)
    return found == expectation.value


def differences(expected: Expected, summary: ParquetSummary | dict[str, Any]) -> list[str]:
    """One line per expectation that `summary` (a file's figures, or those of its bytes alone when
    its rows could not be read) does not meet; an expectation it cannot check is one of them."""
    if isinstance(summary, ParquetSummary):
        found = {field: getattr(summary, field) for field in FILE_FIELDS + ROW_FIELDS + (SEGMENT_FIELD,)}
    else:
        found = summary
    lines = []
    for expectation in expected.checks:
        if expectation.field not in found:  # fail closed: an expectation never goes unchecked
            why = "verify computes no such figure" if isinstance(summary, ParquetSummary) else \
                "the rows could not be read"
            lines.append(f"{expectation.field}: expected {expectation.value} ({expectation.origin}), not checked: {why}")
            continue
        value = found[expectation.field]
        if not _compare(expectation, value):
            line = f"{expectation.field}: expected {expectation.value}, found {value} ({expectation.origin})"
            if expectation.field == "rows_sha256" and expected.row_digests and isinstance(summary, ParquetSummary):
                line += row_differences(expected.row_digests, summary.row_digests)
            lines.append(line)
    return lines


def verify(parquet: Path, expected: Expected) -> Report:
    report = Report([], [])
    if not parquet.is_file():
        report.failures.append(f"{parquet}: no such file")
        report.unreadable = True
        return report
    for partial in partials(parquet):
        report.failures.append(f"{partial}: an incomplete build was left behind, or one is running "
                               "(an interrupted build: rerun make, which removes it)")
    digest, size = file_sha256(parquet)
    summary: ParquetSummary | None = None
    try:
        summary = hash_parquet(parquet, (digest, size), expected.token_ids_below)
    except UnreadableError as exc:
        report.failures.append(str(exc))
        report.unreadable = True
    except RowFormatError as exc:
        report.failures.append(str(exc))
    report.summary = summary
    report.failures += differences(expected, summary or {"parquet_sha256": digest, "parquet_bytes": size})
    if expected.validation:
        report.failures += validation_failures(parquet, expected)
    if expected.built_with:
        installed, built_with = library_versions(), expected.built_with
        for name in ("pyarrow", "numpy", "tokenizers", "transformers"):
            if built_with.get(name) and built_with.get(name) != installed.get(name):
                report.warnings.append(f"built with {name} {built_with[name]}, installed {installed.get(name)}: "
                                       "parquet bytes may differ across versions; rows_sha256 must not")
    return report


def validation_failures(parquet: Path, expected: Expected) -> list[str]:
    """The validation file a training manifest records, beside the training file: verified against its
    own manifest and against the hashes the training manifest records of it."""
    recorded = expected.validation
    path = parquet.with_name(recorded["file"])
    if not path.is_file():
        return [f"{path}: the validation file {expected.manifest} records is not there"]
    try:
        checks = gather(path)
    except BuildError as exc:
        return [f"validation file: {exc}"]
    checks.checks.extend(Expectation(field, recorded[field], f"{expected.manifest} (validation)")
                         for field in ("rows_sha256", "parquet_sha256", "parquet_bytes", "rows") if field in recorded)
    return [f"validation file {path.name}: {failure}" for failure in verify(path, checks).failures]


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


def diff_hint(parquet: Path, expected: Expected, report: Report) -> str | None:
    """The command that explains a failure, where a manifest says what was expected and the file is readable."""
    if not report.failures or report.unreadable or expected.manifest is None:
        return None
    return f"to see why: databuild diff {expected.manifest} {parquet}"
