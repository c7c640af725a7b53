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
from .stream import ExportResult, Format, verified_source, write_export

FORMATS: dict[str, type[Format]] = {f.name: f for f in (BridgeFormat, MilesFormat, HfFormat)}


def make_format(name: str) -> Format:
    if name not in FORMATS:
        raise BuildError(f"unknown export format {name!r}: one of {', '.join(FORMATS)}")
    return FORMATS[name]()


def export(source: Path, to: str, out: Path) -> ExportResult:
    """Verify `source` against its manifest, then write it to `out` in format `to`, with
    `out`'s manifest beside it. Nothing is written when `source` does not verify."""
    fmt = make_format(to)
    return write_export(Path(source), fmt, Path(out), verified_source(Path(source)))
