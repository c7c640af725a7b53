"""Loss-mask strategies: which tokens of a rendered conversation are training targets.

A strategy turns the render into character spans, and every token whose character range overlaps a
span is marked: transformers' rule for `return_assistant_tokens_mask`. A strategy that cannot place or
close a span raises MaskError, naming the message: no build trains on a mask it could not justify.

- `assistant`: on a template with `{% generation %}` tags, exactly the tagged spans (the encoder
  records them as transformers does: the template author's declaration, empty answers included).
  Without tags, what the model writes at inference after the generation prompt, through its stop
  token (inference.py).
- `muse_spark`: the recipe's harmony-style template, whose trainer supervises final-channel answers.
  Each non-empty assistant content written as `<|start|>assistant<|channel|>final<|message|>CONTENT`
  and closed by `<|end|>`, or by `<|return|>` when it is the conversation's last message; the
  content and that closing token. Empty content supervises nothing. A conversation with a tool call,
  a tool result or an assistant reasoning field is refused (mask_error, naming the message): the
  recipe's template writes none of them, so nothing the model would generate for them can be
  proven; `loss_mask: assistant` supervises them.
"""

from __future__ import annotations

import numpy as np

from .placement import Placed, fail
from ..records.conversation import REASONING_FIELDS

Spans = list[tuple[int, int]]
MUSE_ASSISTANT_HEADER = "<|start|>assistant<|channel|>final<|message|>"
MUSE_REFUSED = ("tool_calls", *REASONING_FIELDS)
MUSE_CLOSINGS = ("<|end|>", "<|return|>")  # the tokens that close a supervised answer


def check_final_answers_only(messages) -> None:
    """muse_spark's refusal of what its trainer does not supervise, before anything is placed."""
    for index, message in enumerate(messages):
        role = message.get("role")
        found = "a tool result" if role == "tool" else next(
            (key for key in MUSE_REFUSED if message.get(key) is not None), None) if role == "assistant" else None
        if found:
            raise fail(index, f"muse_spark supervises final-channel answers only, and this message has {found} "
                              "(tool calls, tool results and reasoning are refused: use loss_mask: assistant)")


def muse_spark_spans(messages, text: str, placed: list[Placed]) -> Spans:
    spans: Spans = []
    last = len(messages) - 1
    contents = {p.message: p for p in placed if p.kind == "content"}
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("content"):
            continue
        closing = MUSE_CLOSINGS[1] if index == last else MUSE_CLOSINGS[0]
        if index not in contents:
            raise fail(index, "the template does not write its content exactly once, verbatim")
        start, end = contents[index].start, contents[index].end
        if not text.startswith(closing, end) or text[max(0, start - len(MUSE_ASSISTANT_HEADER)):start] != \
                MUSE_ASSISTANT_HEADER:
            raise fail(index, f"not written as '{MUSE_ASSISTANT_HEADER}CONTENT{closing}' (not a harmony template?)")
        spans.append((start, end + len(closing)))
    return spans


STRATEGIES = ("assistant", "muse_spark")


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
