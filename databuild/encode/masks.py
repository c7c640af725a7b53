"""Loss-mask strategies: which tokens of a rendered conversation are training targets.

Assistant contents are placed in the rendered text by character offsets (place_assistant_contents:
exact even where a content also occurs elsewhere in the text); a strategy turns them into spans, and
every token whose character range overlaps a span is marked (the rule transformers uses for
`return_assistant_tokens_mask`). A strategy that cannot place or close a span raises MaskError,
naming the message: no build trains on a mask it could not justify (the build names the conversation).

- `assistant`: template-agnostic. Each non-empty assistant content, plus the special token the
  template writes right after it (its end-of-turn marker), which must be there.
- `muse_spark`: harmony-style templates. Each non-empty assistant content written as
  `<|start|>assistant<|channel|>final<|message|>CONTENT` and closed by `<|end|>`, or by
  `<|return|>` when it is the conversation's last message; the content and that closing token.

Empty assistant content supervises nothing: the turn stays in the stream, unsupervised.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ..errors import BuildError

Spans = list[tuple[int, int]]
Placed = list[tuple[int, int, int]]  # (message index, start, end) of each non-empty assistant content
MUSE_ASSISTANT_HEADER = "<|start|>assistant<|channel|>final<|message|>"
SENTINEL = "\ue000{}\ue001"  # private-use characters: never written by a template


class MaskError(BuildError):
    pass


def _fail(message_index: int, why: str) -> MaskError:
    return MaskError(f"assistant message {message_index}: {why}")


def place_assistant_contents(messages, text: str, render: Callable[[tuple], str]) -> Placed:
    """Where the template wrote each non-empty assistant content, in character offsets of text.

    When every content occurs exactly once in the text, in message order, that is its place. Otherwise
    (short answers, echoes of the user, words the template also writes) the conversation is rendered
    again with each assistant content replaced by a unique sentinel: the sentinels' places, shifted by
    the length differences, are the contents' places, and substituting the contents back must give the
    rendered text exactly, or the template does not write assistant contents verbatim and we raise.
    """
    wanted = [i for i, (role, content) in enumerate(messages) if role == "assistant" and content]
    if not wanted:
        return []
    found = [_only_place(text, messages[i][1]) for i in wanted]
    if all(f >= 0 for f in found) and \
            all(found[k] + len(messages[wanted[k]][1]) <= found[k + 1] for k in range(len(found) - 1)):
        return [(i, f, f + len(messages[i][1])) for i, f in zip(wanted, found)]
    sentinels = {i: SENTINEL.format(i) for i in wanted}
    try:
        marked = render(tuple((role, sentinels.get(i, content)) for i, (role, content) in enumerate(messages)))
    except (BuildError, RecursionError, MemoryError):  # the config's or the machine's, not the conversation's
        raise
    except Exception as exc:  # the template rendered the real contents, so it objects to the placeholders
        raise _fail(wanted[0], f"the template refuses placeholder contents ({type(exc).__name__}: {exc})") from None
    placed, pieces, cursor, shift = [], [], 0, 0
    for i in wanted:
        at = marked.find(sentinels[i], cursor)
        if at < 0 or marked.find(sentinels[i], at + 1) >= 0:
            raise _fail(i, "the template does not write its content exactly once, verbatim")
        content = messages[i][1]
        placed.append((i, at + shift, at + shift + len(content)))
        pieces += [marked[cursor:at], content]
        cursor = at + len(sentinels[i])
        shift += len(content) - len(sentinels[i])
    if "".join(pieces) + marked[cursor:] != text:
        raise _fail(wanted[0], "the rendered text depends on assistant content in a way character spans "
                               "cannot follow")
    return placed


def _only_place(text: str, content: str, probe_chars: int = 32) -> int:
    """Where content occurs in text when a cheap test proves it occurs there only, else -1 (the caller
    then places it by sentinels). Every occurrence of content starts with an occurrence of its first
    characters, so one place for those, with content there, is the one place for content; searching
    for a short probe is about twice as fast as for the whole."""
    probe = content[:probe_chars]
    at = text.find(probe)
    return at if at >= 0 and text.startswith(content, at) and text.find(probe, at + 1) < 0 else -1


def assistant_spans(messages, text: str, placed: Placed, special_tokens: re.Pattern) -> Spans:
    spans: Spans = []
    for index, start, end in placed:
        closing = special_tokens.match(text, end)
        if closing is None:
            raise _fail(index, "no end-of-turn special token right after its content")
        spans.append((start, closing.end()))
    return spans


def muse_spark_spans(messages, text: str, placed: Placed, special_tokens: re.Pattern) -> Spans:
    spans: Spans = []
    last = len(messages) - 1
    for index, start, end in placed:
        closing = "<|return|>" if index == last else "<|end|>"
        if not text.startswith(closing, end) or text[max(0, start - len(MUSE_ASSISTANT_HEADER)):start] != \
                MUSE_ASSISTANT_HEADER:
            raise _fail(index, f"not written as '{MUSE_ASSISTANT_HEADER}CONTENT{closing}' (not a harmony template?)")
        spans.append((start, end + len(closing)))
    return spans


STRATEGIES: dict[str, Callable[..., Spans]] = {
    "assistant": assistant_spans,
    "muse_spark": muse_spark_spans,
}


def spans_to_mask(spans: Spans, encoding, n_tokens: int) -> np.ndarray:
    """1 for every token whose character range overlaps a span, else 0 (int8).

    The tokens overlapping [start, end) are a contiguous run: from the first token holding a
    character of the span, to the last token that starts before `end` (a character that byte
    fallback splits into several tokens maps to the first of them, so the run is extended over the
    rest). Asking the tokenizer's own char/token maps at the span edges costs O(spans), where
    reading every token's offsets back into Python would cost O(tokens).
    """
    mask = np.zeros(n_tokens, dtype=np.int8)
    char_to_token, token_to_chars = encoding.char_to_token, encoding.token_to_chars
    for start, end in spans:
        first = next((t for c in range(start, end) if (t := char_to_token(c)) is not None), None)
        if first is None:
            continue
        last = next(t for c in range(end - 1, start - 1, -1) if (t := char_to_token(c)) is not None)
        while last + 1 < n_tokens and (chars := token_to_chars(last + 1)) is not None and chars[0] < end:
            last += 1
        mask[first:last + 1] = 1
    return mask
