"""Trainer formats: a verified native row file converted, streaming, into the layout a trainer
reads (one module per format, each naming its consumer's convention), with a manifest beside it
that `databuild verify` checks. `stream` and `content` are the parts every format shares;
`check` verifies an export.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError
from .bridge import BridgeFormat
from .hf import HfFormat
from .miles import MilesFormat
from .trl_preference import DpoFormat, KtoFormat
from ..publish.manifest_read import manifest_beside
from .stream import ExportResult, Format, export_stem, source_kind, verified_source, write_export

FORMATS: dict[str, type[Format]] = {f.name: f for f in (BridgeFormat, MilesFormat, HfFormat, DpoFormat, KtoFormat)}


def make_format(name: str) -> Format:
    if name not in FORMATS:
        raise BuildError(f"unknown export format {name!r}: one of {', '.join(FORMATS)}")
    return FORMATS[name]()


def export(source: Path, to: str, out: Path) -> ExportResult:
    """Verify `source` against its manifest, then write it to `out` in format `to`, with
    `out`'s manifest beside it. Nothing is written when `source` does not verify."""
    fmt, source, out = make_format(to), Path(source), Path(out)
    summary = verified_source(source)  # the validation file beside it included (verify.validation_failures)
    kind = source_kind(summary)
    if kind not in fmt.reads:
        formats = " or ".join(f"--to {name}" for name, f in FORMATS.items() if kind in f.reads)
        raise BuildError(f"{source}: refused: --to {to} exports {' or '.join(fmt.reads)} row files, and this is a "
                         f"{kind} one: export it {formats}")
    validation = None
    split = (manifest_beside(source) or {}).get("validation") if kind == "packed" else None  # none in a preference build
    if split:  # first, so that the training export's configuration can name it
        validation = out.with_name(f"{export_stem(out)}.validation.parquet")
        held = source.with_name(split["file"])
        write_export(held, make_format(to), validation, verified_source(held))
    return write_export(source, fmt, out, summary, validation)
