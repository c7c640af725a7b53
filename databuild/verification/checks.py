"""Checking a row file against its expectations (verification/expectations.py), failing closed: every check that
fails is reported with what was expected and what was found; with a manifest's row digests, the first
differing row is named too. Exit codes: 0 verified, 1 a difference, 2 a usage error (an option that
does not apply is refused, never ignored), 3 the file is unreadable (missing included)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BuildError
from ..rowfile.hashes import ParquetSummary, hash_parquet
from ..rowfile.schema import RowFormatError, UnreadableError
from ..rowfile.write import partials
from ..utils.files import file_sha256
from ..utils.versions import library_versions
from .expectations import FILE_FIELDS, ROW_FIELDS, SEGMENT_FIELD, Expectation, Expected, gather

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3


class UsageError(BuildError):
    """An option verify cannot apply to the file it is given: refused (exit 2), never ignored."""


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


def diff_hint(parquet: Path, expected: Expected, report: Report) -> str | None:
    """The command that explains a failure, where a manifest says what was expected and the file is readable."""
    if not report.failures or report.unreadable or expected.manifest is None:
        return None
    return f"to see why: databuild diff {expected.manifest} {parquet}"
