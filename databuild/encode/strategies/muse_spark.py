"""`loss_mask: muse_spark`: the recipe's harmony-style template, whose trainer supervises final-channel
answers. Each non-empty assistant content written as `<|start|>assistant<|channel|>final<|message|>CONTENT`
and closed by `<|end|>`, or by `<|return|>` when it is the conversation's last message; the content
and that closing token. Empty content supervises nothing. A conversation with a tool call, a tool
result or an assistant reasoning field is refused (mask_error, naming the message): the recipe's
template writes none of them, so nothing the model would generate for them can be proven;
`loss_mask: assistant` supervises them.
"""

from __future__ import annotations

from ...records.conversation import REASONING_FIELDS
from ..inference import Sample
from ..placement import Placed, fail, place_fields
from .strategy import Strategy

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


def samples(encoder, conversation, text: str, generation: list | None) -> list[Sample]:
    messages = conversation.messages
    check_final_answers_only(messages)
    placed = place_fields(messages, conversation.tools, text, encoder.renderer.render)
    answers = tuple((k, k) for k, m in enumerate(messages) if m.get("role") == "assistant" and m.get("content"))
    return [Sample(text, tuple(muse_spark_spans(messages, text, placed)), declared=True, turns=answers)]


def untracked(renderer, tools) -> bool:
    """Its spans are proven from the render's text, never taken from a template's tags."""
    return False


STRATEGY = Strategy("muse_spark", untracked, samples, frozenset(MUSE_CLOSINGS))
