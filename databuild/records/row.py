"""A row as the packer yields it and the row file stores it: its tokens and mask, and its segments
(where each conversation's tokens start, whose they are, from which source and stream position), the
last one padding (PADDING_ID) when the row has room left.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PADDING_ID = ""  # the conversation id of a row's final padding segment (real ids are never empty)
NO_SUPERVISED_TOKEN = "no_supervised_token"  # why a row is skipped (the manifest's counts.rows_skipped)


@dataclass(frozen=True)
class Row:
    input_ids: np.ndarray  # int32, row_tokens long
    loss_mask: np.ndarray  # int8
    seq_start_id: np.ndarray  # int32, starts with 0, increasing
    conversation_ids: tuple[str, ...]  # one per segment: whose tokens start at seq_start_id[k]; "" = padding
    sources: tuple[str, ...]  # the source of each segment's conversation ("" for padding)
    continues: bool  # its first segment's conversation began in an earlier row (kept or skipped)
    positions: tuple[int, ...]  # each segment's conversation by its stream position (Origin.position); -1 padding
