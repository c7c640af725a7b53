"""Loss-mask strategies: which tokens of a rendered conversation are training targets.

Each strategy finds the assistant spans in the rendered text by character offsets, then marks
every token whose character range overlaps a span (the rule transformers uses for
`return_assistant_tokens_mask`). Messages are placed in order, each after the previous one, so
content that repeats an earlier message cannot be mistaken for it. A strategy that cannot place a
span raises, naming the conversation: no build trains on a mask it could not justify.

- `assistant`: template-agnostic. Each non-empty assistant content, plus the special token the
  template writes right after it (its end-of-turn marker), which must be there.
- `muse_spark`: harmony-style templates. Each non-empty assistant content written as
  `<|start|>assistant<|channel|>final<|message|>CONTENT` and closed by `<|end|>`, or by
  `<|return|>` when it is the conversation's last message; the content and that closing token.

Empty assistant content supervises nothing: the turn stays in the stream, unsupervised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .errors import BuildError

Spans = list[tuple[int, int]]
MUSE_ASSISTANT_HEADER = "<|start|>assistant<|channel|>final<|message|>"


@dataclass(frozen=True)
class TokenView:
    """What a strategy may look at besides the text: token starts/ends and the special tokens."""
    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    special_tokens: tuple[str, ...]  # longest first


class MaskError(BuildError):
    pass


def _fail(conversation_id: str, message_index: int, why: str) -> MaskError:
    return MaskError(f"conversation {conversation_id!r}: assistant message {message_index}: {why}")


def _find_after(text: str, needle: str, cursor: int, accept: Callable[[int], bool]) -> int:
    """First position >= cursor where needle occurs and accept(position) holds, else -1."""
    position = text.find(needle, cursor)
    while position >= 0 and not accept(position):
        position = text.find(needle, position + 1)
    return position


def _leading_special(text: str, at: int, special_tokens: tuple[str, ...]) -> str | None:
    return next((token for token in special_tokens if text.startswith(token, at)), None)


def assistant_spans(conversation_id: str, messages, text: str, view: TokenView) -> Spans:
    spans: Spans = []
    cursor = 0
    for index, (role, content) in enumerate(messages):
        if not content:
            continue
        if role != "assistant":
            found = text.find(content, cursor)
            if found >= 0:  # templates may rewrite non-assistant turns; only assistant turns must be found
                cursor = found + len(content)
            continue
        found = _find_after(text, content, cursor,
                            lambda p: _leading_special(text, p + len(content), view.special_tokens) is not None)
        if found < 0:
            raise _fail(conversation_id, index, "its content, followed by an end-of-turn special token, "
                                                "is not in the rendered text after the previous message")
        end = found + len(content)
        closing = _leading_special(text, end, view.special_tokens)
        spans.append((found, end + len(closing)))
        cursor = end + len(closing)
    return spans


def muse_spark_spans(conversation_id: str, messages, text: str, view: TokenView) -> Spans:
    spans: Spans = []
    cursor = 0
    last = len(messages) - 1
    for index, (role, content) in enumerate(messages):
        if role != "assistant":
            if content:
                found = text.find(content, cursor)
                cursor = found + len(content) if found >= 0 else cursor
            continue
        closing = "<|return|>" if index == last else "<|end|>"
        needle = MUSE_ASSISTANT_HEADER + content + closing
        found = text.find(needle, cursor)
        if found < 0:
            raise _fail(conversation_id, index, f"'{MUSE_ASSISTANT_HEADER}CONTENT{closing}' is not in the "
                                                "rendered text after the previous message (not a harmony template?)")
        start = found + len(MUSE_ASSISTANT_HEADER)
        cursor = start + len(content) + len(closing)
        if content:
            spans.append((start, cursor))
    return spans


STRATEGIES: dict[str, Callable[..., Spans]] = {
    "assistant": assistant_spans,
    "muse_spark": muse_spark_spans,
}


def spans_to_mask(spans: Spans, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """1 for every token whose [start, end) character range overlaps a span, else 0 (int8)."""
    mask = np.zeros(len(starts), dtype=np.int8)
    if not spans:
        return mask
    span_starts = np.fromiter((s for s, _ in spans), dtype=np.int64, count=len(spans))
    span_ends = np.fromiter((e for _, e in spans), dtype=np.int64, count=len(spans))
    # The last span starting before each token ends; the token overlaps it iff that span ends after
    # the token starts. Spans are disjoint and sorted, so one searchsorted covers all tokens.
    candidate = np.searchsorted(span_starts, ends, side="left") - 1
    valid = candidate >= 0
    overlaps = np.zeros(len(starts), dtype=bool)
    overlaps[valid] = span_ends[candidate[valid]] > starts[valid]
    mask[overlaps] = 1
    return mask
