"""A preference pair past the tokenizer (`TokenizedPair`): its prompt's token ids, rendered once and
shared by both completions, and each completion's ids and target mask without the prompt (chosen and
rejected, or one unpaired completion and its label); or the problem that keeps it out. And the kinds
of problem only a pair can have: those the encoder finds (the policy of on_bad_conversation applies,
as to a conversation's) and those the length policy drops (always dropped, and counted; chosen and
rejected the same tokens are problems.IDENTICAL_COMPLETIONS, as the same messages are).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .origin import Origin
from .problems import Problem

PROMPT_LAST_ROLE = "prompt_last_role"  # the prompt ends on a turn other than user or tool: no generation prompt
PROMPT_NOT_PREFIX = "prompt_not_prefix"  # the prompt's render is not the start of a completion's render
PROMPT_TOKENS_NOT_PREFIX = "prompt_tokens_not_prefix"  # its tokens are not the start of the sequence's tokens
TARGET_IN_PROMPT = "target_in_prompt"  # a completion's target begins inside the prompt's tokens
NO_TARGET = "no_target"  # a completion with no target token: nothing for the trainer to score
PAIR_REFUSED_KINDS = (PROMPT_LAST_ROLE, PROMPT_NOT_PREFIX, PROMPT_TOKENS_NOT_PREFIX, TARGET_IN_PROMPT, NO_TARGET)
PROMPT_TOO_LONG = "prompt_too_long"  # over prompt_tokens under overlong_prompt: drop
SEQUENCE_TOO_LONG = "sequence_too_long"  # prompt and a completion over sequence_tokens
LENGTH_DROPPED_KINDS = (PROMPT_TOO_LONG, SEQUENCE_TOO_LONG)  # dropped whatever the policy (as DROPPED_KINDS)
COMPLETION_NAMES = {2: ("chosen", "rejected"), 1: ("completion",)}


@dataclass(frozen=True)
class TokenizedPair:
    origin: Origin
    prompt_ids: np.ndarray  # int32, the prompt's render with its generation prompt
    completion_ids: tuple[np.ndarray, ...]  # int32 each: (chosen, rejected) or (completion,), without the prompt
    completion_masks: tuple[np.ndarray, ...]  # int8 each, 1 = target, aligned with completion_ids
    label: bool | None = None  # an unpaired completion's label (KTO: desirable or not); None for a pair
    problem: Problem | None = None  # when it cannot be built or is dropped; no tokens then
    prompt_tokens_cut: int = 0  # tokens cut from the prompt's start (overlong_prompt: cut_left)

    @property
    def names(self) -> tuple[str, ...]:
        return COMPLETION_NAMES[len(self.completion_ids)]


def unbuilt(origin: Origin, problem: Problem, label: bool | None = None) -> TokenizedPair:
    """A pair that is not built: no tokens, its problem's reason on one line (for the manifest)."""
    return TokenizedPair(origin, np.zeros(0, dtype=np.int32), (), (), label,
                         problem._replace(reason=problem.reason.replace("\n", " ")))
