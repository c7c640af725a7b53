"""Loss masks from character spans: every token whose character range overlaps a span a strategy
(encode/strategies/) gives is a target, transformers' rule for `return_assistant_tokens_mask`."""

from __future__ import annotations

import numpy as np


Spans = list[tuple[int, int]]


def spans_to_mask(spans: Spans, encoding, n_tokens: int) -> np.ndarray:
    """1 for every token whose character range [ts, te) overlaps a span [start, end), i.e.
    ts < end and te > start (an empty span marks a token strictly around it), else 0 (int8).

    For spans in order and disjoint (every strategy's, and every template's but one that nests
    generation blocks), the tokens overlapping a span are a contiguous run: from the first token holding
    a character of the span, to the last token that starts before `end` (a character that byte fallback
    splits into several tokens maps to the first of them, so the run is extended over the rest). Asking
    the tokenizer's own char/token maps at the span edges costs O(spans), where reading every token's
    offsets back into Python would cost O(tokens). Other spans take transformers' loop as it is.
    """
    if any(following[0] < previous[1] for previous, following in zip(spans, spans[1:])):
        return _transformers_loop(spans, encoding.offsets, n_tokens)
    mask = np.zeros(n_tokens, dtype=np.int8)
    char_to_token, token_to_chars = encoding.char_to_token, encoding.token_to_chars
    for start, end in spans:
        if start == end:
            around = char_to_token(start)
            first = around if around is not None and token_to_chars(around)[0] < start else None
            last, end = first, start
        else:
            first = next((t for c in range(start, end) if (t := char_to_token(c)) is not None), None)
            last = None if first is None else \
                next(t for c in range(end - 1, start - 1, -1) if (t := char_to_token(c)) is not None)
        if first is None:
            continue
        while last + 1 < n_tokens and (chars := token_to_chars(last + 1)) is not None and chars[0] < end:
            last += 1
        mask[first:last + 1] = 1
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
