"""A row as the packer yields it and the row file stores it: its tokens and mask, and its segments
(where each conversation's tokens start, and the origin of each: its id, source and stream position),
the last one padding (PADDING) when the row has room left.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .origin import Origin

PADDING_ID = ""  # the conversation id of a row's final padding segment (real ids are never empty)
PADDING = Origin(position=-1, index=-1, id=PADDING_ID, source=PADDING_ID)  # the padding segment's origin
NO_SUPERVISED_TOKEN = "no_supervised_token"  # why a row is skipped (the manifest's counts.rows_skipped)


@dataclass(frozen=True)
class Row:
    input_ids: np.ndarray  # int32, row_tokens long
    loss_mask: np.ndarray  # int8
    seq_start_id: np.ndarray  # int32, starts with 0, increasing
    origins: tuple[Origin, ...]  # one per segment: whose tokens start at seq_start_id[k]; PADDING for padding
    continues: bool  # its first segment's conversation began in an earlier row (kept or skipped)

    @property
    def conversation_ids(self) -> tuple[str, ...]:
        """The row file's conversation_ids: each segment's id, PADDING_ID for padding."""
        return tuple(origin.id for origin in self.origins)
