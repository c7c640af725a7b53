"""Property: over generated pairs (prompts of several turns, one- or multi-message completions, texts that
may start with whitespace or be empty) and template variants (a generation prompt the whole render does not
hold, one whose last token merges with the answer's first, a generation block of the content alone), every
pair's tokens and targets equal an independent reference from transformers' renders
(apply_chat_template(add_generation_prompt=True) for the prompt, return_assistant_tokens_mask=True on a
{% generation %} template for prompt + completion), or the pair is refused with the kind the reference
predicts. Never a third outcome."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import record_count
from pairs import GENERATION, TAGGED, pair, pair_encoder

VARIANTS = {
    "plain": TAGGED.replace("GENERATION", GENERATION),
    "think": TAGGED.replace("GENERATION", GENERATION + "<think>"),  # not in the whole render: prompt_not_prefix
    "space": TAGGED.replace("GENERATION", GENERATION + " ").replace("<|message|>{% generation %}",
                                                                  "<|message|> {% generation %}"),
    "content": TAGGED.replace("GENERATION", GENERATION).replace("{{ m.content }}<|end|>{% endgeneration %}",
                                                               "{{ m.content }}{% endgeneration %}<|end|>"),
}
ENCODERS: dict = {}

text = st.text(alphabet="ab cdé.\n", max_size=12)
user_turn = text.map(lambda t: {"role": "user", "content": t})
assistant_turn = text.map(lambda t: {"role": "assistant", "content": t})
tool_turn = text.map(lambda t: {"role": "tool", "content": t})


@st.composite
def pairs(draw):
    earlier = draw(st.lists(st.tuples(user_turn, assistant_turn), max_size=2))
    prompt = [m for turn in earlier for m in turn] + [draw(st.one_of(user_turn, tool_turn))]
    def completion():
        first = [draw(assistant_turn)]
        more = draw(st.lists(st.tuples(tool_turn, assistant_turn), max_size=1))
        return tuple(first + [m for turn in more for m in turn])
    count = draw(st.sampled_from([1, 2]))
    return tuple(prompt), tuple(completion() for _ in range(count)), draw(st.sampled_from(sorted(VARIANTS)))


def reference(tokenizer, template: str, prompt, completions):
    """('refused', kind) or ('built', prompt ids, [(ids, mask)]) from transformers alone."""
    prompt_text = tokenizer.apply_chat_template(list(prompt), chat_template=template, tokenize=False,
                                                add_generation_prompt=True)
    prompt_ids = tokenizer.apply_chat_template(list(prompt), chat_template=template, tokenize=True,
                                               add_generation_prompt=True, return_dict=True)["input_ids"]
    built = []
    for completion in completions:
        whole_text = tokenizer.apply_chat_template(list(prompt + completion), chat_template=template, tokenize=False)
        whole = tokenizer.apply_chat_template(list(prompt + completion), chat_template=template, tokenize=True,
                                              return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = whole["input_ids"], list(whole["assistant_masks"])
        if not whole_text.startswith(prompt_text):
            return "refused", "prompt_not_prefix"
        if ids[:len(prompt_ids)] != prompt_ids:
            return "refused", "prompt_tokens_not_prefix"
        if not any(mask[len(prompt_ids):]):
            return "refused", "no_target"
        built.append((ids[len(prompt_ids):], mask[len(prompt_ids):]))
    return "built", prompt_ids, built


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs())
def test_targets_equal_transformers_or_a_refusal_with_its_kind(case):
    prompt, completions, variant = case
    if variant not in ENCODERS:
        ENCODERS[variant] = pair_encoder(VARIANTS[variant])
    tokenizer, encoder = ENCODERS[variant]
    [ours] = encoder.encode_batch([pair(0, prompt, *completions, label=True if len(completions) == 1 else None)])
    expected = reference(tokenizer, VARIANTS[variant], prompt, completions)
    if expected[0] == "refused":
        assert ours.problem is not None and ours.problem.kind == expected[1], (ours.problem, expected, case)
        assert ours.problem.reason
        record_count("preference pairs", f"refused: {expected[1]}")
        return
    assert ours.problem is None, (ours.problem, case)
    assert ours.prompt_ids.tolist() == expected[1]
    for (ids, mask), got_ids, got_mask in zip(expected[2], ours.completion_ids, ours.completion_masks):
        assert got_ids.tolist() == ids and got_mask.tolist() == mask, case
        assert got_mask.dtype == np.int8 and got_ids.dtype == np.int32
    record_count("preference pairs", "equal")
