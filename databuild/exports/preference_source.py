"""A preference row file as an export's source: verified against its manifest (verification/preference.py)
before a row is read, and the figures the export's manifest records of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from ..publish.manifest import manifest_path
from ..publish.preference import read_preference_manifest
from ..verification.preference import verify_preference


@dataclass(frozen=True)
class PreferenceSummary:
    """What an export records of its preference source (from its verified manifest's output section)."""
    kind: str  # paired or unpaired
    rows: int
    rows_sha256: str
    parquet_sha256: str
    parquet_bytes: int
    row_tokens: int  # the longest sequence, prompt and its longer completion: the most tokens a trainer's row holds
    supervised_tokens: int  # every completion's targets

    def record(self) -> dict:
        return {"kind": self.kind, "rows_sha256": self.rows_sha256, "parquet_sha256": self.parquet_sha256,
                "parquet_bytes": self.parquet_bytes, "rows": self.rows, "row_tokens": self.row_tokens,
                "targets": self.supervised_tokens}


def verified_preference(source: Path) -> PreferenceSummary:
    """The preference file's figures once it verifies against the manifest beside it; else one line."""
    manifest = manifest_path(source)
    if not manifest.exists():
        raise BuildError(f"{source}: refused, not verified: no manifest beside it ({manifest.name})")
    report, _ = verify_preference(source, manifest)
    if report.failures:
        more = f" (and {len(report.failures) - 1} more)" if len(report.failures) > 1 else ""
        raise BuildError(f"{source}: refused, does not verify: {report.failures[0].removeprefix(f'{source}: ')}{more}")
    output = read_preference_manifest(manifest)["output"]
    targets = sum(value for key, value in output.items() if key.endswith("_supervised_tokens"))
    return PreferenceSummary(output["kind"], output["rows"], output["rows_sha256"], output["parquet_sha256"],
                             output["parquet_bytes"], output["longest_sequence"], targets)

