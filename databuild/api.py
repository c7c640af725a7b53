"""The Python API, re-exported at the package level: make, verify, export, load.

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
    from .export import ExportResult
    from .verify import Report

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
    from .build import make as run_make
    from .config import resolve_config

    return run_make(resolve_config(str(config)), Path(out_dir), offline=offline, workers=workers,
                    batch_size=batch_size, progress=progress, executor=executor, ray_address=ray_address)


@_one_exception
def verify(file: str | Path, *, manifest: str | Path | None = None, recipe: str | Path | None = None,
           rows_sha256: str | None = None, parquet_sha256: str | None = None,
           segments_sha256: str | None = None, source: str | Path | None = None) -> Report:
    """Check a row file (or an export, with `source` its native file to re-derive it from) as
    `databuild verify` does. Returns the report when every check holds (its warnings may be non-empty);
    raises BuildError with the first failure otherwise."""
    from .export.check import export_manifest_of, verify_export
    from .verify import gather, verify as run_verify

    file = Path(file)
    manifest = Path(manifest) if manifest is not None else None
    described = export_manifest_of(file, manifest)
    if described is not None:
        report = verify_export(file, described, Path(source) if source is not None else None)
    else:
        report = run_verify(file, gather(file, manifest, Path(recipe) if recipe else None, rows_sha256,
                                         parquet_sha256, segments_sha256))
    if report.failures:
        more = f" (and {len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        raise BuildError(f"{file} does not verify: {report.failures[0]}{more}")
    return report


@_one_exception
def export(file: str | Path, to: str, out: str | Path) -> ExportResult:
    """Write a verified row file in a trainer's format ("megatron-bridge", "miles", "hf") to `out`,
    with a manifest beside it; nothing is written when `file` does not verify."""
    from .export import export as run_export

    return run_export(Path(file), to, Path(out))


@_one_exception
def load(file: str | Path) -> datasets.Dataset:
    """The rows of a row file, verified against its manifest first, as a `datasets.Dataset` in the
    `hf` export's layout (input_ids, labels with -100 where not a target, seq_lengths). Held in
    memory; for files larger than memory, export to hf and load that parquet with `datasets`."""
    import datasets
    import pyarrow as pa

    from .export.hf import HfFormat
    from .export.rows import read_blocks
    from .export.stream import verified_source

    file = Path(file)
    verified_source(file)
    hf = HfFormat()
    tables = [hf.convert(block) for block in read_blocks(file)]
    return datasets.Dataset(pa.concat_tables(tables) if tables else hf.schema.empty_table())
