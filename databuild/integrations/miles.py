"""The rollout function for miles / slime SFT on rows exported with `databuild export --to miles`:

    --prompt-data ROWS.parquet --input-key messages --metadata-key metadata \
    --rollout-function-path databuild.integrations.miles.generate_rollout

It keeps slime's signature and contract (THUDM/slime, slime/rollout/sft_rollout.py: the samples of
`data_buffer.get_samples(args.rollout_batch_size)`, groups of one, returned filled in) but takes the
tokens and targets from each Sample's metadata instead of re-tokenizing messages.

slime's convention (slime/backends/megatron_utils/loss.py, get_responses): of a Sample's `tokens`
(L long), the last `response_length` (R) are the response, and `loss_mask[k]` weights token
L - R + k, predicted from position L - R + k - 1. The response starts at the first target; a target
at position 0 has no position before it and cannot be trained. It is not trained, and it is counted:
`UNTRAINABLE` here (logged once per rollout) and, for the whole file, in the export's manifest
(`target_at_row_start`, `target_at_segment_start`).

One Sample per row (`generate_rollout`, as the recipe trains: one row per micro-batch), or one per
segment (`generate_rollout_per_segment`: each conversation piece its own Sample; a segment with no
trainable target is left out, so the number of Samples varies: run miles with
--use-dynamic-global-batch-size or --disable-rollout-trim-samples, or it trims to the batch size).
A row's final padding segment (conversation id "") is never part of a Sample.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

logger = logging.getLogger(__name__)

PADDING_ID = ""  # records.row.PADDING_ID: copied, as this module imports nothing of databuild in the trainer (tests/test_export.py)
UNTRAINABLE: Counter[str] = Counter()  # targets at a Sample's position 0, by kind, since the process began


def response(tokens: list[int], mask: list[int]) -> tuple[int, list[int]]:
    """(response_length, response-only loss_mask) of a Sample whose token-aligned targets are `mask`.
    A sample with no trainable target keeps a one-token response of weight 0, as slime needs R >= 1."""
    first = next((k for k in range(1, len(mask)) if mask[k]), None)
    if first is None:
        return 1, [0]
    return len(tokens) - first, [int(m) for m in mask[first:]]


def _pieces(metadata: dict[str, Any], per_segment: bool) -> list[tuple[list[int], list[int]]]:
    """(tokens, token-aligned mask) of each Sample to make of a row: the row, or its segments."""
    ids, mask = list(metadata["input_ids"]), list(metadata["loss_mask"])
    starts, conversations = list(metadata["seq_start_id"]), list(metadata["conversation_ids"])
    if conversations and conversations[-1] == PADDING_ID:
        ids, mask, starts = ids[:starts[-1]], mask[:starts[-1]], starts[:-1]
    if not per_segment:
        return [(ids, mask)]
    ends = starts[1:] + [len(ids)]
    return [(ids[b:e], mask[b:e]) for b, e in zip(starts, ends)]


def _fill(sample: Any, tokens: list[int], mask: list[int], kind: str) -> bool:
    """Set the Sample's fields; False when it has nothing to train."""
    if mask and mask[0]:
        UNTRAINABLE[kind] += 1
    sample.tokens = tokens
    sample.response_length, sample.loss_mask = response(tokens, mask)
    sample.reward = 0
    return any(sample.loss_mask)


def _rollout(args: Any, data_buffer: Any, evaluation: bool, per_segment: bool) -> list[list[Any]]:
    if evaluation:
        raise ValueError("databuild rows are for training: no evaluation rollout")
    if not getattr(args, "rollout_global_dataset", False):
        raise ValueError("databuild rows are read through the global dataset (the default of miles and slime): "
                         "drop --disable-rollout-global-dataset")
    before = sum(UNTRAINABLE.values())
    groups = data_buffer.get_samples(args.rollout_batch_size)
    filled = []
    for group in groups:
        if len(group) != 1:
            raise ValueError(f"one sample per prompt expected (--n-samples-per-prompt 1), got {len(group)}")
        (sample,) = group
        if not isinstance(sample.metadata, dict) or "input_ids" not in sample.metadata:
            raise ValueError("a Sample without databuild metadata: load an export made with "
                             "`databuild export --to miles` with --metadata-key metadata")
        if not per_segment:
            tokens, mask = _pieces(sample.metadata, False)[0]
            _fill(sample, tokens, mask, "target_at_row_start")
            filled.append([sample])
            continue
        pieces = []
        for tokens, mask in _pieces(sample.metadata, True):
            piece = copy.copy(sample)
            if _fill(piece, tokens, mask, "target_at_segment_start"):
                pieces.append(piece)
        if pieces:
            filled.append(pieces)
    if sum(UNTRAINABLE.values()) > before:
        logger.info("databuild: %d targets at a Sample's position 0 not trained so far (%s)",
                    sum(UNTRAINABLE.values()), dict(UNTRAINABLE))
    return filled


def generate_rollout(args: Any, rollout_id: int, data_buffer: Any, evaluation: bool = False) -> list[list[Any]]:
    """One Sample per row: tokens = the row (its padding left out), the response from its first target."""
    return _rollout(args, data_buffer, evaluation, per_segment=False)


def generate_rollout_per_segment(args: Any, rollout_id: int, data_buffer: Any,
                                 evaluation: bool = False) -> list[list[Any]]:
    """One Sample per segment of each row, those with a trainable target, grouped by row."""
    return _rollout(args, data_buffer, evaluation, per_segment=True)
