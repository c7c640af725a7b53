"""Agentic pairs on real template families: a completion of tool calls, their results, reasoning and a final
answer after a prompt of earlier turns. Each pair's prompt is transformers' render with the generation
prompt, and each completion's tokens and targets are the `assistant` rule's on the whole conversation,
recomputed independently from transformers' renders (inference_reference.py), the prompt's own turns left
out; or the pair is refused with a reason. Never a third outcome; tool calls and reasoning are targets."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from agentic import conversation
from conftest import record_count
from databuild.encode.encoder import Encoder
from databuild.encode.preference import PairEncoder
from databuild.encode.render import Renderer
from families import FAMILIES, KWARGS, family_tokenizer, pin_transformers_clock
from inference_reference import reference_rows
from pairs import pair

NAMES = ("qwen2_5", "qwen3", "llama3_1", "qwen3_6")
# Templates whose every pair here builds. Qwen3 and Qwen3.6 rewrite a completion's earlier turn once another
# follows (an empty <think></think> block written for the last assistant turn only): such a completion is one
# sequence in no render a model generated, refused (history_rewritten); Qwen3.6's generation prompt ends in
# "<think>\n", whose newline merges with the next one in the whole render (prompt_tokens_not_prefix).
ALL_BUILT = ("qwen2_5", "llama3_1")
REFUSALS = ("prompt_not_prefix", "prompt_tokens_not_prefix", "history_rewritten", "mask_error", "stop_token_in_field",
            "template_error", "no_target")
CASES = 40


def agentic_pairs(family):
    """(prompt, chosen, rejected, tools): a generated conversation cut at its last user message; chosen is
    what follows (calls, results, the answer), rejected another conversation's last answer."""
    rng = random.Random(f"pairs-{family.name}")
    found = []
    while len(found) < CASES:
        messages, tools = conversation(rng, family.tool_calls, family.reasoning, False, family.arguments)
        users = [k for k, m in enumerate(messages) if m["role"] == "user"]
        if messages[-1]["role"] != "assistant" or not users:
            continue
        cut = users[-1] + 1
        other, _ = conversation(rng, "none", family.reasoning)
        rejected = next((m for m in reversed(other) if m["role"] == "assistant"), None)
        if rejected is not None:
            found.append((tuple(messages[:cut]), tuple(messages[cut:]), (rejected,), tools))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_agentic_pairs_equal_the_rule_or_are_refused(name, tmp_path, monkeypatch):
    pin_transformers_clock(monkeypatch)
    family = FAMILIES[name]
    tokenizer = family_tokenizer(family, tmp_path)
    encoder = PairEncoder(Encoder(tokenizer, Renderer.for_tokenizer(tokenizer, KWARGS), "assistant", family.stops,
                                  train_turns="flagged"))
    outcomes, targets_seen = Counter(), ""
    for prompt, chosen, rejected, tools in agentic_pairs(family):
        record = pair(0, prompt, chosen, rejected)
        record = type(record)(record.origin, prompt, (chosen, rejected), None, tools)
        [ours] = encoder.encode_batch([record])
        if ours.problem is not None:
            assert ours.problem.kind in REFUSALS and ours.problem.reason, ours.problem
            outcomes[f"refused: {ours.problem.kind}"] += 1
            continue
        prompt_ids = tokenizer.apply_chat_template(list(prompt), tools=tools, tokenize=True, add_generation_prompt=True,
                                                   return_dict=True, **KWARGS)["input_ids"]
        assert ours.prompt_ids.tolist() == prompt_ids
        for completion, ids, mask in zip((chosen, rejected), ours.completion_ids, ours.completion_masks):
            rows = reference_rows(tokenizer, list(prompt + completion), tools, KWARGS, {family.eos, *family.stops})
            assert not isinstance(rows, str), (rows, prompt + completion)
            whole_ids, whole_mask = rows[-1]  # the sample of the last turn: the whole conversation
            assert whole_ids[:len(prompt_ids)] == prompt_ids
            assert ids.tolist() == whole_ids[len(prompt_ids):]
            assert mask.tolist() == list(whole_mask[len(prompt_ids):]), (name, completion)
            targets_seen += tokenizer.decode(ids[mask.astype(bool)])
        outcomes["equal"] += 1
    for outcome, n in outcomes.items():
        for _ in range(n):
            record_count(f"preference pairs, {name}", outcome)
    assert outcomes["equal"] == CASES if name in ALL_BUILT else outcomes["equal"] > 0, outcomes
    if family.tool_calls != "none":
        assert "get_weather" in targets_seen or "search" in targets_seen  # tool calls are targets
