"""The keep step of a preference build: what the config's lengths and the pair itself leave out.

In this order, the first that applies: chosen and rejected the same tokens and targets
(`identical_completions`: nothing for DPO to prefer; never made so by a cut, as only the prompt is cut);
a prompt over prompt_tokens, dropped (`prompt_too_long`) or, under overlong_prompt: cut_left, its first
tokens cut off (TRL's truncation_mode: keep_end, applied to the prompt alone); a prompt and a completion
over sequence_tokens (`sequence_too_long`), the completion never cut (a cut completion would lose its
stop token, and could make chosen and rejected the same: OpenRLHF #1313). Each drop is counted by kind,
each cut counted with its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..records.pair import PROMPT_TOO_LONG, SEQUENCE_TOO_LONG, TokenizedPair
from ..records.problems import IDENTICAL_COMPLETIONS, Problem


@dataclass(frozen=True)
class Lengths:
    prompt_tokens: int
    sequence_tokens: int
    overlong_prompt: str  # drop or cut_left

    @classmethod
    def of(cls, config) -> Lengths:
        return cls(config.prompt_tokens, config.sequence_tokens, config.overlong_prompt)


def kept(pair: TokenizedPair, lengths: Lengths) -> TokenizedPair:
    """The pair as the length policy keeps it (its prompt cut from the left, counted in prompt_tokens_cut), or
    with the problem that drops it. A pair with a problem already is returned as it is."""
    if pair.problem is not None:
        return pair
    if len(pair.completion_ids) == 2 and all(np.array_equal(a, b) for a, b in (
            pair.completion_ids, pair.completion_masks)):
        return _dropped(pair, Problem(IDENTICAL_COMPLETIONS, f"chosen and rejected are the same "
                                                             f"{len(pair.completion_ids[0])} tokens and targets"))
    prompt = pair.prompt_ids
    if len(prompt) > lengths.prompt_tokens:
        if lengths.overlong_prompt == "drop":
            return _dropped(pair, Problem(PROMPT_TOO_LONG, f"its prompt has {len(prompt)} tokens, over "
                                                           f"prompt_tokens ({lengths.prompt_tokens})"))
        pair = replace(pair, prompt_ids=prompt[len(prompt) - lengths.prompt_tokens:],
                       prompt_tokens_cut=len(prompt) - lengths.prompt_tokens)
    longest = max(len(c) for c in pair.completion_ids)
    if len(pair.prompt_ids) + longest > lengths.sequence_tokens:
        name = pair.names[[len(c) for c in pair.completion_ids].index(longest)]
        return _dropped(pair, Problem(SEQUENCE_TOO_LONG, f"its prompt ({len(pair.prompt_ids)} tokens) and {name} "
                                                         f"({longest}) are over sequence_tokens "
                                                         f"({lengths.sequence_tokens})"))
    return pair


def _dropped(pair: TokenizedPair, problem: Problem) -> TokenizedPair:
    return replace(pair, prompt_ids=pair.prompt_ids[:0], completion_ids=(), completion_masks=(), problem=problem,
                   prompt_tokens_cut=0)
