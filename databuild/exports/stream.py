"""The part every export shares: verify the native file, stream it a row group at a time through a
format, write under temporary names, rename, and write the export's manifest last.

Memory holds one row group of the source and of the export at a time. The export keeps the
source's row groups (one export row group per source row group) and the native writer's fixed
settings, so the same source and the same pyarrow give the same bytes.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..publish.manifest import manifest_path, write_manifest
from ..rowfile.hashes import ParquetSummary
from ..rowfile.write import WRITER_OPTIONS, partial_path
from ..utils.files import file_sha256, replace_durably
from ..utils.versions import library_versions
from ..verification import gather, verify
from ..verification.preference import is_preference_file
from .preference_source import PreferenceSummary, verified_preference
from .content import ContentHasher
from ..rowfile.read import RowBlock, read_blocks

FORMAT = "databuild-export/1"


# Why a layout that runs each segment as a sequence of its own cannot train a target on the segment's first
# token; each such layout says after it what restarts there.
SEGMENT_START_WHY = ("a target on a segment's first token: the trainer runs each segment as a sequence of its own, "
                     "so no position of it comes before that token to predict it")


class Format:
    """One trainer's layout. Subclasses convert a block of native rows into a table of theirs and
    count, by kind, the targets that layout cannot represent."""
    name: str
    schema: pa.Schema
    convention: str
    reads: tuple[str, ...] = ("packed",)  # the row files it exports: packed (SFT), paired or unpaired (preference)
    # What each count means, in the words `export` prints beside it: why a kind of target cannot be
    # trained in this layout, and what the padding count is.
    why: dict[str, str] = {}
    padding_why = ("the tokens of the padding segment that ends a padded row (conversation id \"\"), left out of "
                   "OUT: the trainer packs without padding")

    def __init__(self) -> None:
        self.unrepresentable: Counter[str] = Counter()
        self.padding_dropped = 0

    def count(self, kind: str, n: int) -> None:
        self.unrepresentable[kind] += n

    def convert(self, block: RowBlock) -> pa.Table:
        raise NotImplementedError

    def blocks(self, source: Path) -> Iterator[Any]:
        """What `convert` takes, one row group of the source at a time: a native row file's blocks."""
        return read_blocks(source)

    def more_counts(self) -> dict[str, int]:
        """Counts of this format beside unrepresentable and padding_tokens_dropped, for the manifest."""
        return {}

    def sidecars(self, out: Path, row_tokens: int, rows: int) -> dict[str, bytes]:
        """Files the trainer reads as data beside the rows: name (in OUT's directory) -> bytes.
        Each is named after OUT, so that two exports into one directory never share one."""
        return {}

    def trainer_config(self, out: Path, row_tokens: int, rows: int, validation: Path | None = None) -> dict[str, str]:
        """The trainer's configuration that reads OUT (at its absolute path) correctly: name -> text;
        with `validation`, the export of the build's validation file, as the trainer's validation input."""
        raise NotImplementedError


def export_stem(out: Path) -> str:
    """OUT's name without `.parquet`: the stem every file written beside OUT is named after."""
    return Path(out).name.removesuffix(".parquet")


@dataclass(frozen=True)
class ExportResult:
    path: Path
    manifest: Path
    data: dict[str, Any]  # the manifest's content


def verified_source(source: Path) -> ParquetSummary | PreferenceSummary:
    """The native file's figures, once it verifies against the manifest beside it; else one line. A
    preference row file is verified by its own checks (verification/preference.py)."""
    source = Path(source)
    if is_preference_file(source):
        return verified_preference(source)
    try:
        expected = gather(source)
    except BuildError as exc:
        raise BuildError(f"{source}: refused, not verified: {exc}") from None
    report = verify(source, expected)
    if report.failures:
        more = f" (and {len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        first = report.failures[0].removeprefix(f"{source}: ")
        raise BuildError(f"{source}: refused, does not verify: {first}{more}")
    return report.summary


def source_kind(summary: ParquetSummary | PreferenceSummary) -> str:
    """packed (an SFT row file), paired or unpaired (a preference row file)."""
    return summary.kind if isinstance(summary, PreferenceSummary) else "packed"


def write_export(source: Path, fmt: Format, out: Path, summary: ParquetSummary | PreferenceSummary,
                 validation: Path | None = None) -> ExportResult:
    """Stream `source` (already verified, `summary` its figures) into `out` through `fmt`; `validation`:
    the export of its validation file, which the trainer configuration reads as the validation input."""
    out = Path(out)
    if not out.name.endswith(".parquet"):  # miles and slime take prompt data by that name, Bridge .parquet or .pq
        raise BuildError(f"{out}: an export's file name ends in .parquet (the trainers read it by that name)")
    if out.resolve() == Path(source).resolve():
        raise BuildError(f"{out}: the export would overwrite the file it is made from")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial, content, rows = partial_path(out), ContentHasher(), 0
    written: list[Path] = [partial]
    try:
        with pq.ParquetWriter(partial, fmt.schema, **WRITER_OPTIONS) as writer:
            for block in fmt.blocks(source):
                table = fmt.convert(block)
                content.update(table)
                writer.write_table(table, row_group_size=max(1, table.num_rows))
                rows += table.num_rows
        _fsync(partial)
        sidecars = {}  # final path -> (its partial path, its bytes)
        configs = {name: text.encode() for name, text in fmt.trainer_config(out, summary.row_tokens, rows,
                                                                                      validation).items()}
        for name, data in {**fmt.sidecars(out, summary.row_tokens, rows), **configs}.items():
            path = out.with_name(name)
            sidecar_partial = partial_path(path)
            written.append(sidecar_partial)
            sidecar_partial.write_bytes(data)
            _fsync(sidecar_partial)
            sidecars[path] = sidecar_partial, data
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    digest, size = file_sha256(partial)
    manifest_file = manifest_path(out)
    manifest_file.unlink(missing_ok=True)
    for path, (sidecar_partial, _) in sidecars.items():
        replace_durably(sidecar_partial, path)
    replace_durably(partial, out)
    manifest = export_manifest(fmt, source, summary, out, digest, size, rows, content,
                               {p.name: d for p, (_, d) in sidecars.items() if p.name not in configs}, list(configs))
    if validation is not None:
        manifest["validation"] = Path(validation).name  # its own export, manifest beside it
    write_manifest(manifest, manifest_file)
    return ExportResult(out, manifest_file, manifest)


def export_manifest(fmt: Format, source: Path, summary: ParquetSummary, out: Path, digest: str, size: int,
                    rows: int, content: ContentHasher, sidecars: dict[str, bytes],
                    trainer_config: list[str]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "export": fmt.name,
        "convention": fmt.convention,
        "source": {"file": Path(source).name, **(summary.record() if isinstance(summary, PreferenceSummary) else {
            "rows_sha256": summary.rows_sha256,
            "segments_sha256": summary.segments_sha256,
            "parquet_sha256": summary.parquet_sha256,
            "parquet_bytes": summary.parquet_bytes,
            "rows": summary.rows,
            "row_tokens": summary.row_tokens,
            "targets": summary.supervised_tokens,
        })},
        "output": {
            "file": out.name,
            "sha256": digest,
            "bytes": size,
            "rows": rows,
            "content_sha256": content.hexdigest(),
        },
        "sidecars": [{"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                     for name, data in sidecars.items()],
        # Named, not hashed: they hold OUT's absolute path. verify rewrites them for OUT's place and compares.
        "trainer_config": trainer_config,
        "counts": {
            "unrepresentable": dict(sorted(fmt.unrepresentable.items())),
            "padding_tokens_dropped": fmt.padding_dropped,
            **fmt.more_counts(),
        },
        "versions": library_versions(),
        "row_digests": content.row_digests,
    }


def _fsync(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
