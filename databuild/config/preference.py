"""The keys of a preference build (`task: preference`: chosen/rejected pairs, or unpaired labelled
completions, for DPO and KTO), and which keys belong to one task only.

A preference build writes one pair per row, never packed: the SFT row keys (row_tokens, packing and
its keys, separator) mean nothing to it and are refused, as are the SFT stream controls it does not
implement (train_turns: a completion trains every turn the strategy supervises; dedup; validation).
Its own keys declare the lengths a DPO trainer is configured with, and what a prompt over its maximum
gets; an SFT build refuses them.
"""

from __future__ import annotations

from typing import Any

from .checks import _choice, _fail, _take

TASKS = ("sft", "preference")
DEFAULT_TASK = "sft"
# What a prompt longer than prompt_tokens gets: the pair dropped, or the prompt's first tokens cut off
# (TRL's truncation_mode: keep_end on the prompt), counted either way.
OVERLONG_PROMPT_POLICIES = ("drop", "cut_left")
PREFERENCE_KEYS = ("prompt_tokens", "sequence_tokens", "overlong_prompt")
SFT_KEYS = ("row_tokens", "separator", "packing", "packing_window", "overlong", "pad_token", "train_turns", "dedup",
            "validation")
MOST_TOKENS = 2**31 - 1  # lengths are int32 list offsets, as row_tokens


def task_of(raw: dict, where: str) -> str:
    """The config's `task` (default sft); a key of the other task is refused in one line."""
    task = _choice(raw, "task", TASKS, where, DEFAULT_TASK)
    foreign = [key for key in (SFT_KEYS if task == "preference" else PREFERENCE_KEYS) if key in raw]
    if foreign:
        key = foreign[0]
        why = ("an SFT key: a preference build writes one pair per row, unpacked" if task == "preference" else
               "a preference key: set task: preference for a build of chosen/rejected pairs")
        raise _fail(where, key, raw[key], why)
    return task


def preference_keys(raw: dict, where: str) -> dict[str, Any]:
    """prompt_tokens and sequence_tokens (required, 1 <= prompt_tokens < sequence_tokens <= 2^31 - 1) and
    overlong_prompt (default drop)."""
    found = {key: _take(raw, key, int, where) for key in ("prompt_tokens", "sequence_tokens")}
    for key, value in found.items():
        if not 0 < value <= MOST_TOKENS:
            raise _fail(where, key, value, f"a count of tokens in 1..{MOST_TOKENS}")
    if found["prompt_tokens"] >= found["sequence_tokens"]:
        raise _fail(where, "prompt_tokens", found["prompt_tokens"],
                    f"must be below sequence_tokens ({found['sequence_tokens']}), which holds the prompt and a "
                    "completion")
    overlong = _choice(raw, "overlong_prompt", OVERLONG_PROMPT_POLICIES, where, "drop")
    return {**found, "overlong_prompt": overlong}

