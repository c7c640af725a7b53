"""Where a decoded row shows tool calls, tool results and reasoning, read from the markup the chat
template wrote around them: the fallback of views/record_marks.py, for the segments whose
conversation cannot be re-rendered from its source here.

The row file holds tokens, masks and conversation boundaries, not which message each token came
from, so `show` and `report` cannot know a message's role exactly. They find the markup that the
common template families write around these parts, in the decoded text of each conversation
segment: a region opens at an opening spelling and closes at the end of the next closing one (at
the segment's end if none follows; from the segment's start if a closing of its own, not one that
ends other turns too, comes first: a region begun in an earlier row). A template whose markup is not in MARKUP gets no marks; text in a message
that spells the markup is marked too. data/README.md ("show and report") lists the spellings.
"""

from __future__ import annotations

import re
from typing import NamedTuple

REASONING, TOOL_CALL, TOOL_RESULT = "reasoning", "tool call", "tool result"

# (kind, opening, closing): regular expressions over the decoded text
MARKUP = (
    # Qwen 2.5/3, QwQ, GLM-4.5, SmolLM3, Hermes, DeepSeek-R1 (reasoning)
    (REASONING, r"<think>", r"</think>"),
    (TOOL_CALL, r"<tool_call>", r"</tool_call>"),
    (TOOL_RESULT, r"<tool_response>", r"</tool_response>"),
    # harmony (gpt-oss): the analysis channel, a call addressed to a function, a function's answer
    (REASONING, r"<\|channel\|>analysis<\|message\|>", r"<\|end\|>"),
    (TOOL_CALL, r"to=functions\.", r"<\|call\|>"),
    (TOOL_RESULT, r"<\|start\|>functions\.", r"<\|end\|>"),
    # Llama 3.1/3.2: a JSON call as the assistant's answer, the ipython turn
    (TOOL_CALL, r"(?<=<\|start_header_id\|>assistant<\|end_header_id\|>\n\n)\{\"name\": ", r"<\|eot_id\|>"),
    (TOOL_RESULT, r"<\|start_header_id\|>ipython<\|end_header_id\|>", r"<\|eot_id\|>"),
    # Mistral, DeepSeek-V3, Cohere 2, Phi-4-mini
    (TOOL_CALL, r"\[TOOL_CALLS\]", r"</s>|\[/TOOL_CALLS\]"),
    (TOOL_RESULT, r"\[TOOL_RESULTS\]", r"\[/TOOL_RESULTS\]"),
    (TOOL_CALL, r"<｜tool▁calls▁begin｜>", r"<｜tool▁calls▁end｜>"),
    (TOOL_RESULT, r"<｜tool▁outputs▁begin｜>", r"<｜tool▁outputs▁end｜>"),
    (REASONING, r"<\|START_THINKING\|>", r"<\|END_THINKING\|>"),
    (TOOL_CALL, r"<\|START_ACTION\|>", r"<\|END_ACTION\|>"),
    (TOOL_RESULT, r"<\|START_TOOL_RESULT\|>", r"<\|END_TOOL_RESULT\|>"),
    (TOOL_CALL, r"<\|tool_call\|>", r"<\|/tool_call\|>"),
)
_COMPILED = [(kind, re.compile(opening), re.compile(closing)) for kind, opening, closing in MARKUP]
# closings that end other turns too (harmony's <|end|>, Llama's <|eot_id|>, </s>) tell nothing about
# a region begun in an earlier row: only the others open one at a segment's start
_OWN_CLOSING = [(kind, opening, closing) for kind, opening, closing in _COMPILED
                if closing.pattern not in (r"<\|end\|>", r"<\|eot_id\|>", r"</s>|\[/TOOL_CALLS\]")]


class Region(NamedTuple):
    start: int
    end: int
    kind: str


def regions(text: str) -> list[Region]:
    """The marked regions of one conversation segment's text, in order, never overlapping."""
    found: list[Region] = []
    at = 0
    # a closing before any opening: the region began before this segment (a continued conversation)
    firsts = []
    for kind, opening, closing in _OWN_CLOSING:
        close, open_ = closing.search(text), opening.search(text)
        if close is not None and (open_ is None or close.start() < open_.start()):
            firsts.append(Region(0, close.end(), kind))
    if firsts:
        found.append(min(firsts, key=lambda r: r.end))
        at = found[0].end
    while True:
        matches = [(m, kind, closing) for kind, opening, closing in _COMPILED
                   if (m := opening.search(text, at)) is not None]
        if not matches:
            return found
        match, kind, closing = min(matches, key=lambda item: item[0].start())
        close = closing.search(text, match.end())
        end = close.end() if close is not None else len(text)
        found.append(Region(match.start(), end, kind))
        at = max(end, match.end() + (end == match.start()))
