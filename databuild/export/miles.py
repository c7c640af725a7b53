"""miles: rows that slime's Dataset (THUDM/slime, slime/utils/data.py; radixark/miles the same)
loads with `--input-key messages --metadata-key metadata`, for the rollout function
`databuild.integrations.miles.generate_rollout`.

slime keeps of each row only the input key (the Sample's prompt), the metadata key (the Sample's
metadata, a dict) and the label. So `metadata` carries the native row unchanged (input_ids,
loss_mask in databuild's token-aligned convention, seq_start_id, conversation_ids, padding segment
included) and `messages` a one-line description of the row, never its conversations. The rollout
turns each row (or each segment) into a Sample in slime's response-only convention, where a target
at a Sample's position 0 cannot be trained: counted here for both ways of cutting Samples,
`target_at_row_start` (one Sample per row, the default) and `target_at_segment_start` (one per
segment).
"""

from __future__ import annotations

import pyarrow as pa

from ..rowfile.hashes import EXPECTED_TYPES
from .rows import PADDING_ID, RowBlock
from .stream import Format

METADATA = pa.struct([pa.field(name, kind) for name, kind in EXPECTED_TYPES.items()])
SCHEMA = pa.schema([("messages", pa.string()), ("metadata", METADATA)])
ROLLOUT = "databuild.integrations.miles.generate_rollout"
SHOWN_IDS = 3


def describe(row: int, conversation_ids: tuple[str, ...]) -> str:
    real = [c for c in conversation_ids if c != PADDING_ID]
    shown = ", ".join(real[:SHOWN_IDS]) + (", ..." if len(real) > SHOWN_IDS else "")
    return (f"databuild row {row}: {len(real)} segment(s) ({shown}); tokens and targets are in metadata, "
            f"for --rollout-function-path {ROLLOUT}")


class MilesFormat(Format):
    name = "miles"
    schema = SCHEMA
    convention = ("slime Dataset rows: metadata = the native row (token-aligned loss_mask); the rollout "
                  f"{ROLLOUT} makes Samples with a response-only loss_mask")

    def convert(self, block: RowBlock) -> pa.Table:
        self.count("target_at_row_start", block.targets_at_row_starts())
        self.count("target_at_segment_start", block.targets_at_segment_starts())
        columns = [block.table.column(name).combine_chunks() for name in EXPECTED_TYPES]
        messages = [describe(block.first_row + r, block.conversation_ids[r]) for r in range(block.rows)]
        return pa.Table.from_arrays([pa.array(messages, type=pa.string()),
                                     pa.StructArray.from_arrays(columns, fields=list(METADATA))], schema=SCHEMA)
