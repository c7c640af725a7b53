"""What a build's manifest is made of (`BuildRecord`): read by the manifest and the funnel alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import BuildConfig
    from ..inputs.resolve import ResolvedInputs
    from ..pack.rows import Packing, PackStats
    from ..records.problems import BadConversation


@dataclass(frozen=True)
class BuildRecord:
    """What a build's manifest is made of: what it was built from, and what building it gave. Before
    the first row, the results are those of no row (empty stats and hashes, no parquet)."""
    config: BuildConfig
    inputs: ResolvedInputs
    packing: Packing
    encoder_pins: dict[str, Any]  # the render and mask set-up (build.encoder_pins)
    parquet_writer: dict[str, Any]  # the writer's options
    file_name: str  # of the parquet, without its directory
    stats: PackStats
    rows_sha256: str
    segments_sha256: str
    row_digests: list[str] = field(default_factory=list)
    skipped: tuple[BadConversation, ...] = ()  # in the order the packer met them
    malformed: tuple[BadConversation, ...] = ()  # every malformed conversation the stream holds
    parquet_sha256: str = ""
    parquet_bytes: int = 0
    record_counts: tuple[dict[str, int], ...] = ()  # per source: the spill's RECORD_COUNTS (before the build: none)
    duplicates: tuple[BadConversation, ...] = ()  # dedup: exact's, in source order (before the build: none)
    held_out: tuple[BadConversation, ...] = ()  # the training stream's rows the validation split takes
    validation: dict[str, Any] | None = None  # the training build's validation file (build.validation_record)
    # per source, in config order: the conversations the stream handed the packer (read, skipped or rendered
    # to no token; an expanded one once), as the build counted them (sources.mixture.counting_by_source)
    read: tuple[int, ...] = ()
