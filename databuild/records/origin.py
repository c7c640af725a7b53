"""Where a conversation came from, carried unchanged from the source read to the row: its place in the
permuted stream, its row in the concatenated source, its id and its source. One record, so that no stage
copies the four by hand."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Origin:
    position: int  # place in the permuted stream
    index: int  # row in the concatenated source (files in sorted name order)
    id: str
    source: str  # the config's repo of its source
