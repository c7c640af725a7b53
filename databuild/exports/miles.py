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

Beside the rows goes `OUT.miles.sh`, a bash array of the flags that read them, valid for both
parsers (radixark/miles miles/utils/arguments.py, THUDM/slime slime/utils/arguments.py; checked in
tests/support/trainer_configs.py). One Sample per row makes each row one THD sequence: the conversations
packed in a row attend to each other, as the recipe's concatenated rows are trained.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..rowfile.schema import EXPECTED_TYPES
from .recipe_text import absolute, comment, shell_array
from ..records.row import PADDING_ID
from ..rowfile.read import RowBlock
from .stream import Format, export_stem

METADATA = pa.struct([pa.field(name, kind) for name, kind in EXPECTED_TYPES.items()])
SCHEMA = pa.schema([("messages", pa.string()), ("metadata", METADATA)])
ROLLOUT = "databuild.integrations.miles.generate_rollout"
SHOWN_IDS = 3
ROWS_PER_STEP = 128  # the recipe's global batch (rows); the fragment's default, never more than the file holds


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
    why = {"target_at_row_start": "with generate_rollout (one Sample per row, the default): a target on a row's "
                                  "first token, which a Sample's first position has nothing before it to predict",
           "target_at_segment_start": "with generate_rollout_per_segment (one Sample per segment) instead: a target "
                                      "on a segment's first token, for the same reason; only the rollout you pick "
                                      "loses its count"}
    padding_why = "the file keeps each row whole; the rollout leaves a row's padding segment out of its Sample"

    def convert(self, block: RowBlock) -> pa.Table:
        self.count("target_at_row_start", block.targets_at_row_starts())
        self.count("target_at_segment_start", block.targets_at_segment_starts())
        columns = [block.table.column(name).combine_chunks() for name in EXPECTED_TYPES]
        messages = [describe(block.first_row + r, block.conversation_ids[r]) for r in range(block.rows)]
        return pa.Table.from_arrays([pa.array(messages, type=pa.string()),
                                     pa.StructArray.from_arrays(columns, fields=list(METADATA))], schema=SCHEMA)

    def trainer_config(self, out: Path, row_tokens: int, rows: int, validation: Path | None = None) -> dict[str, str]:
        batch = f'"${{DATABUILD_ROWS_PER_STEP:-{max(1, min(ROWS_PER_STEP, rows))}}}"'
        flags = [("--prompt-data", absolute(out)), ("--input-key", "messages"), ("--metadata-key", "metadata"),
                 ("--rollout-function-path", ROLLOUT), ("--n-samples-per-prompt", "1"),
                 ("--rollout-batch-size", batch), ("--global-batch-size", batch), ("--num-epoch", "1"),
                 ("--loss-type", "sft_loss"), ("--calculate-per-token-loss", None),
                 ("--disable-compute-advantages-and-returns", None), ("--debug-train-only", None),
                 ("--use-dynamic-batch-size", None), ("--max-tokens-per-gpu", str(row_tokens))]
        header = [f"miles / slime flags that read {absolute(out)} ({rows} rows of at most {row_tokens} tokens),",
                  "written by `databuild export --to miles`. Source this file, then pass \"${DATABUILD_ARGS[@]}\"",
                  "with your model, checkpoint, parallelism and optimizer flags to train.py / train_async.py.",
                  "One Sample per row (a row is one THD sequence: its conversations attend to each other, as the",
                  "recipe trains them); a step is DATABUILD_ROWS_PER_STEP rows, at most one row per micro-batch",
                  "(--max-tokens-per-gpu = row_tokens; divide it by the context-parallel size when CP > 1).",
                  "An epoch is num_epoch * rows // rollout_batch_size rollouts: the rows past its last full step are not reached.",
                  "One Sample per segment instead (miles only): --rollout-function-path",
                  f"{ROLLOUT}_per_segment and add --use-dynamic-global-batch-size."]
        return {f"{export_stem(out)}.miles.sh": comment(header) + shell_array("DATABUILD_ARGS", flags)}
