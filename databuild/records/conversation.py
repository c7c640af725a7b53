"""A conversation as it crosses the stages: the one record every format's adapter produces and the spill
hands on (`Conversation`), then, past the tokenizer, its tokens and loss mask (`TokenizedConversation`:
one per sample, more than one when the history policy expands it). Both carry where the
conversation came from (its `Origin`: records/origin.py), handed on unchanged from stage to stage,
and, when it cannot be built, its problem (records/problems.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .origin import Origin
from .problems import Problem

# transformers' _REASONING_FIELDS (tests/test_transformers_private.py checks it): the message keys a
# reasoning trace may come in. A constant here, so that reading it never imports transformers.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


@dataclass(frozen=True)
class Conversation:
    """One conversation as every stage from the spill on sees it, whatever the source's schema.

    Each message is a dict of plain JSON values (str, int, float, bool, list, dict, None), the way
    `apply_chat_template` receives it: `content` (None beside tool calls or reasoning) and `role`,
    then the fields of sources/record.py that the source gives it, in the source's order
    (`tool_calls`, `tool_call_id`, `name`, `reasoning_content` / `thinking` / `reasoning`). `tools`
    is the conversation's tool list (the template's `tools` variable), None when it has none.
    """
    origin: Origin
    messages: tuple[dict, ...]
    problem: Problem | None = None  # when it cannot be built; no messages then
    tools: list | None = None


@dataclass(frozen=True)
class TokenizedConversation:
    origin: Origin
    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # int8, 1 = target
    problem: Problem | None = None  # when it cannot be built; no tokens then
    empty_assistant_turns: int = 0  # assistant messages whose content is ""
    unclosed_turns: int = 0  # turns the render ends in before any stop token (encode/inference.py)
    prompt_tokens_differ: int = 0  # turns whose prompt tokenized alone is not the start of these tokens
    part: int = 0  # its sample among those of a conversation expanded by the history policy
    parts: int = 1  # the conversation's samples: more than one when expanded
    turns_not_trained: int = 0  # on its first sample: turns the strategy supervises that train_turns leaves out
    samples_not_written: int = 0  # on its first sample: expanded samples left out, their turn not trained
