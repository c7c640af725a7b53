"""Loss masks from character spans: every token whose character range overlaps a span a strategy
(encode/strategies/) gives is a target, transformers' rule for `return_assistant_tokens_mask`."""

from __future__ import annotations

import numpy as np


Spans = list[tuple[int, int]]


def spans_to_mask(spans: Spans, placed, n_tokens: int) -> np.ndarray:
    """1 for every token whose character range [ts, te) overlaps a span [start, end), i.e.
    ts < end and te > start (an empty span marks a token strictly around it), else 0 (int8).
    `placed`: the text's encoding as encode/positions.py places it.

    For spans in order and disjoint (every strategy's, and every template's but one that nests
    generation blocks), the tokens overlapping a span are a contiguous run (positions' `run`), found
    from the span's edges alone. Other spans take transformers' loop over every token's offsets.
    """
    if any(following[0] < previous[1] for previous, following in zip(spans, spans[1:])):
        return _transformers_loop(spans, placed.offsets, n_tokens)
    mask = np.zeros(n_tokens, dtype=np.int8)
    for start, end in spans:
        run = placed.run(start, end)
        if run is not None:
            mask[run[0]:run[1] + 1] = 1
    return mask


def _transformers_loop(spans: Spans, offsets, n_tokens: int) -> np.ndarray:
    """apply_chat_template's own loop (transformers 5.24, tokenization_utils_base.py), token by token."""
    mask = np.zeros(n_tokens, dtype=np.int8)
    k = 0
    for token, (token_start, token_end) in enumerate(offsets):
        while k < len(spans) and token_start >= spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if token_end > spans[k][0]:
            mask[token] = 1
    return mask
