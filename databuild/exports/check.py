"""`databuild verify OUT` for an export: OUT against the manifest beside it and, with `--from FILE`,
against a fresh export of the native file it claims to come from. Fails closed, naming what differs.

Hashes and recipes (`--rows-sha256`, `--parquet-sha256`, `--segments-sha256`, `--recipe`) pin the
native build, whose rows an export does not hold whole (masks shifted, padding dropped): on an export
they are checked on the native file given by `--from`, which the export must then match; without
`--from` they are refused (exit 2), never ignored.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..publish.manifest import manifest_path
from ..rowfile.write import partials
from ..utils import json_depth
from ..utils.files import file_sha256
from ..verification import Expected, Report, UsageError, differences, row_differences
from .content import ContentHasher
from .stream import FORMAT

# The type of every manifest field verify reads: a hand-edited manifest is refused in one line.
SHAPE = {"export": str, "source": dict, "output": dict, "sidecars": list, "trainer_config": list,
         "row_digests": list, "source.rows_sha256": str, "source.parquet_sha256": str, "source.row_tokens": int,
         "output.file": str, "output.sha256": str, "output.bytes": int, "output.rows": int,
         "output.content_sha256": str}


def export_manifest_of(parquet: Path, manifest: Path | None = None) -> dict[str, Any] | None:
    """The export manifest that describes `parquet` (given, or the one beside it), or None when
    that manifest is not an export's."""
    path = manifest or manifest_path(parquet)
    try:
        data = json_depth.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not an export's: the native verifier reports it
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    for field, kind in SHAPE.items():
        value = data
        for key in field.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BuildError(f"{path}: export manifest field {field} is {value!r:.40}, expected {kind.__name__}")
    return data


def verify_export(out: Path, manifest: dict[str, Any], source: Path | None = None,
                  native: Expected | None = None) -> Report:
    """OUT against its manifest; with `source`, against a fresh export of it, and `native` (the
    native build's expectations) checked on `source`."""
    from . import FORMATS

    if native is not None and native.checks and source is None:
        fields = ", ".join(sorted({e.field for e in native.checks}))
        raise UsageError(f"{out}: {fields} pin the native row file, and this is a {manifest['export']} export of it "
                         f"({manifest['source'].get('file', 'its source')}): add --from NATIVE.parquet to check them "
                         "on that file and the export against it")
    report = Report([], [])
    output = manifest["output"]
    if manifest["export"] not in FORMATS:
        report.failures.append(f"export: {manifest['export']!r} is not a format this databuild writes")
        return report
    if output["file"] != out.name:
        report.failures.append(f"output.file: the manifest describes {output['file']}, not {out.name} "
                               "(a manifest of another export)")
    if not out.is_file():
        report.failures.append(f"{out}: no such file")
        report.unreadable = True
        return report
    for leftover in partials(out):  # any process's: partial_path names one per process, at random
        report.failures.append(f"{leftover}: an incomplete export was left behind")
    digest, size = file_sha256(out)
    hashed = {out: digest}  # each file hashed once, whatever checks read it (the manifest's, a fresh export's)

    def sha256_of(path: Path) -> str | None:
        if path not in hashed:
            hashed[path] = file_sha256(path)[0] if path.is_file() else None
        return hashed[path]

    for field, expected, found in (("sha256", output["sha256"], digest), ("bytes", output["bytes"], size)):
        if expected != found:
            report.failures.append(f"{field}: expected {expected}, found {found} (the manifest)")
    _check_content(out, manifest, FORMATS[manifest["export"]].schema, report)
    for sidecar in manifest["sidecars"]:
        path = out.with_name(str(sidecar.get("file")))
        found = sha256_of(path) or "no such file"
        if found != sidecar.get("sha256"):
            report.failures.append(f"{path.name}: expected sha256 {sidecar.get('sha256')}, found {found}")
    _check_trainer_config(out, manifest, FORMATS[manifest["export"]](), report)
    if source is not None:
        _check_against_source(out, manifest, Path(source), report, native, sha256_of)
    return report


def _check_trainer_config(out: Path, manifest: dict[str, Any], fmt: Any, report: Report) -> None:
    """The configuration files name OUT's absolute path: each must be what the export writes for OUT
    where it lies now (a moved export, or an edited file, is named)."""
    validation = out.with_name(manifest["validation"]) if manifest.get("validation") else None
    expected = fmt.trainer_config(out, manifest["source"]["row_tokens"], manifest["output"]["rows"], validation)
    if sorted(expected) != sorted(manifest["trainer_config"]):
        report.failures.append(f"trainer_config: expected {sorted(expected)}, the manifest lists "
                               f"{sorted(map(str, manifest['trainer_config']))}")
        return
    for name, text in expected.items():
        path = out.with_name(name)
        if not path.is_file():
            report.failures.append(f"{name}: no such file")
        elif path.read_bytes() != text.encode():
            report.failures.append(f"{name}: differs from the configuration the export writes for {out.resolve()} "
                                   "(moved, or edited: export again)")


def _check_content(out: Path, manifest: dict[str, Any], schema: pa.Schema, report: Report) -> None:
    output, content, rows = manifest["output"], ContentHasher(), 0
    try:
        parquet = pq.ParquetFile(out)
        if not parquet.schema_arrow.equals(schema):
            report.failures.append(f"schema: expected {schema.to_string(show_schema_metadata=False)!r}, "
                                   f"found {parquet.schema_arrow.to_string(show_schema_metadata=False)!r}")
            return
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group)
            content.update(table)
            rows += table.num_rows
    except (OSError, pa.ArrowException) as exc:
        report.failures.append(f"{out}: not readable as parquet: {exc}")
        report.unreadable = True
        return
    if rows != output["rows"]:
        report.failures.append(f"rows: expected {output['rows']}, found {rows} (the manifest)")
    if content.hexdigest() != output["content_sha256"]:
        report.failures.append(f"content_sha256: expected {output['content_sha256']}, found {content.hexdigest()} "
                               f"(the manifest){row_differences(manifest['row_digests'], tuple(content.row_digests))}")


def _check_against_source(out: Path, manifest: dict[str, Any], source: Path, report: Report,
                          native: Expected | None, sha256_of: Callable[[Path], str | None]) -> None:
    from . import make_format
    from .stream import verified_source, write_export

    summary = verified_source(source)
    if native is not None:  # a packed source's pins (a preference source's are verification/preference.py's: api)
        report.failures += [f"{source.name}: {line}" for line in differences(native, summary)]
    for field in ("rows_sha256", "parquet_sha256"):
        if manifest["source"][field] != getattr(summary, field):
            report.failures.append(f"source.{field}: the export says it comes from {manifest['source'][field]}, "
                                   f"{source} has {getattr(summary, field)}")
    with tempfile.TemporaryDirectory(prefix="databuild-export-") as scratch:
        validation = Path(scratch) / manifest["validation"] if manifest.get("validation") else None
        fresh = write_export(source, make_format(manifest["export"]), Path(scratch) / out.name, summary,
                             validation).data
    if fresh["output"]["sha256"] != sha256_of(out):
        report.failures.append(f"{out.name}: differs from a fresh export of {source} "
                               f"(content_sha256 {fresh['output']['content_sha256']} there)")
    for sidecar in fresh["sidecars"]:
        path = out.with_name(sidecar["file"])
        if sha256_of(path) != sidecar["sha256"]:
            report.failures.append(f"{sidecar['file']}: differs from a fresh export of {source}")
