"""The Python API, re-exported at the package level: make, verify, diff, export, load.

Every failure is a BuildError carrying the same one line the CLI prints (an OSError becomes one
too, naming the file); a file that does not verify raises, it is never returned or loaded.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from .errors import BuildError, os_error_line

if TYPE_CHECKING:
    import datasets

    from .build import BuildResult
    from .compare import Diff
    from .exports import ExportResult
    from .verification import Report

Result = TypeVar("Result")


def _one_exception(function: Callable[..., Result]) -> Callable[..., Result]:
    @functools.wraps(function)
    def wrapper(*args, **kwargs) -> Result:
        try:
            return function(*args, **kwargs)
        except OSError as exc:
            raise BuildError(os_error_line(exc)) from exc
    return wrapper


@_one_exception
def make(config: str | Path, out_dir: str | Path = "build", *, offline: bool = False, workers: int | None = None,
         batch_size: int = 256, executor: str = "local", ray_address: str | None = None,
         progress: bool | None = False) -> BuildResult:
    """Build the rows of `config` (a config name, as `databuild list` shows, or a YAML path) into
    `out_dir`/NAME.parquet with its manifest; returns the paths and the manifest's content."""
    from .executors.fork_server import refuse_in_starting_child

    refuse_in_starting_child("databuild.make()")  # named as the user called it, before the build's imports
    from .build import make as run_make
    from .config import resolve_config

    resolved = resolve_config(str(config))
    if resolved.task == "preference":  # pairs, one per row (databuild/preference)
        from .preference.build import make_preference

        return make_preference(resolved, Path(out_dir), offline=offline, workers=workers, batch_size=batch_size)
    return run_make(resolved, Path(out_dir), offline=offline, workers=workers,
                    batch_size=batch_size, progress=progress, executor=executor, ray_address=ray_address)


@_one_exception
def verify(file: str | Path, *, manifest: str | Path | None = None, recipe: str | Path | None = None,
           rows_sha256: str | None = None, parquet_sha256: str | None = None,
           segments_sha256: str | None = None, source: str | Path | None = None) -> Report:
    """Check a row file (or an export, with `source` its native file to re-derive it from and to check
    the hashes or recipe given on) as `databuild verify` does. Returns the report when every check holds
    (its warnings may be non-empty); raises BuildError with the first failure otherwise."""
    report, _, hint = verify_file(Path(file), *(Path(p) if p is not None else None for p in (manifest, recipe)),
                            rows_sha256, parquet_sha256, segments_sha256, Path(source) if source is not None else None)
    if report.failures:
        more = f" (and {len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        raise BuildError(f"{file} does not verify: {report.failures[0]}{more}" + (f"; {hint}" if hint else ""))
    return report


@_one_exception
def diff(a: str | Path, b: str | Path) -> Diff:
    """Why two builds differ, as `databuild diff A B` says it: each of `a` and `b` a row file (with
    its manifest beside it), a manifest, or a config name or YAML (its pins, resolved offline, nothing
    built). Returns the comparison (`Diff.identical`, its pin `changes` and `causes`, `rows`, the
    `first` differing row read back from both files); raises BuildError when a side cannot be read."""
    from .compare import diff as run_diff

    return run_diff(a, b)


@_one_exception
def export(file: str | Path, to: str, out: str | Path) -> ExportResult:
    """Write a verified row file in a trainer's format ("megatron-bridge", "miles", "hf") to `out`
    (a name ending in .parquet), with a manifest and the trainer's configuration beside it; nothing
    is written when `file` does not verify."""
    from .exports import export as run_export

    return run_export(Path(file), to, Path(out))


@_one_exception
def load(file: str | Path) -> datasets.Dataset:
    """The rows of a row file, verified against its manifest first, as a `datasets.Dataset` in the
    layout of its export: `hf` for packed rows (input_ids, labels with -100 where not a target,
    seq_lengths), `trl-dpo` for a pair file, `trl-kto` for an unpaired one. Held in memory; for files
    larger than memory, export and load that parquet with `datasets`."""
    import datasets
    import pyarrow as pa

    from .exports.hf import HfFormat
    from .exports.stream import source_kind, verified_source
    from .exports.trl_preference import DpoFormat, KtoFormat

    file = Path(file)
    layout = {"packed": HfFormat, "paired": DpoFormat, "unpaired": KtoFormat}[source_kind(verified_source(file))]()
    tables = [layout.convert(block) for block in layout.blocks(file)]
    return datasets.Dataset(pa.concat_tables(tables) if tables else layout.schema.empty_table())


def verify_file(parquet: Path, manifest: Path | None = None, recipe: Path | None = None,
                rows_sha256: str | None = None, parquet_sha256: str | None = None,
                segments_sha256: str | None = None, source: Path | None = None) -> tuple[Report, str, str | None]:
    """`databuild verify` and `databuild.verify`: a row file against the expectations given (the native
    verifier, verify.gather), or an export against its manifest and, with `source`, the native file it
    comes from, the expectations checked on that one (export.check). Which of the two applies is the
    command's choice, made here, above both, so that exports import the native verifier downward.
    Returns the report, what was checked, in words, and the `databuild diff` command that explains a
    failure (diff_hint); raises UsageError for an option that does not
    apply, UnreadableError for a file that is not there."""
    from .exports.check import export_manifest_of, verify_export
    from .verification import Expected, UsageError, diff_hint, gather, verify

    from .verification.preference import is_preference_file, refuse_options, verify_preference

    described = export_manifest_of(parquet, manifest)
    if described is not None and source is not None and is_preference_file(source):  # a trl-dpo, trl-kto export
        refuse_options(source, segments_sha256=segments_sha256)
        report, checked = verify_export(parquet, described, source), "the export manifest"
        if any(x is not None for x in (recipe, rows_sha256, parquet_sha256)):  # pins of the preference file
            pinned, what = verify_preference(source, None, rows_sha256, parquet_sha256, recipe)
            report.failures += [f"{source.name}: {line}" for line in pinned.failures]
            checked += f", {what} of {source}"
        return report, checked, None
    if described is not None:
        expected = Expected([])
        if any(x is not None for x in (recipe, rows_sha256, parquet_sha256, segments_sha256)):
            expected = gather(source or parquet, None, recipe, rows_sha256, parquet_sha256, segments_sha256)
        report = verify_export(parquet, described, source, expected)
        return report, "the export manifest" + "".join(f", {e.field} of {source}" for e in expected.checks), None
    if source is not None:
        raise UsageError(f"{parquet}: --from checks an export against the native file it comes from, and no "
                         "export manifest describes this file")
    if is_preference_file(parquet):
        refuse_options(parquet, segments_sha256=segments_sha256)
        report, checked = verify_preference(parquet, manifest, rows_sha256, parquet_sha256, recipe)
        return report, checked, None
    expected = gather(parquet, manifest, recipe, rows_sha256, parquet_sha256, segments_sha256)
    report = verify(parquet, expected)
    return report, ", ".join(sorted({e.field for e in expected.checks})), diff_hint(parquet, expected, report)
