"""The `assistant` strategy on real template families with tools and reasoning (issue 18): the rows equal
the inference rule recomputed independently from transformers' renders (inference_reference.py), or the
conversation is refused with a reason; on templates carrying their authors' generation tags, the rows
equal transformers' return_assistant_tokens_mask. Never a third outcome."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentic import TOOLS, conversation
from conftest import record_count
from databuild.encode.encoder import Encoder
from databuild.encode.render import Renderer
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from families import FAMILIES, KWARGS, family_tokenizer, pin_transformers_clock
from inference_reference import reference_rows

REFUSALS = ("mask_error", "stop_token_in_field", "history_rewritten")
CASES_PER_FAMILY = 120


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (tokenizer, encoder under history: expand)."""
    root, out = tmp_path_factory.mktemp("families"), {}
    for name, family in FAMILIES.items():
        tokenizer = family_tokenizer(family, root)
        renderer = Renderer.for_tokenizer(tokenizer, KWARGS)
        out[name] = tokenizer, Encoder(tokenizer, renderer, "assistant", family.stops)
    return out


def outcome(tokenizer, encoder, family, messages, tools) -> str:
    """'equal' (one sample) or 'expanded' when ours equals the reference ('..., prompt tokens differ' when a
    turn's prompt tokenizes otherwise alone); 'template_error' when the template raises on it (transformers'
    render too); 'refused: KIND' when ours refuses with a reason."""
    ours = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), tuple(messages), tools=tools)])
    try:
        if family.tagged:
            out = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                                return_assistant_tokens_mask=True, **KWARGS)
            expected = [(out["input_ids"], list(out["assistant_masks"]))]
        else:
            expected = reference_rows(tokenizer, messages, tools, KWARGS, {family.eos, *family.stops})
    except Exception as exc:  # the template's own raise_exception, through transformers
        assert ours[0].problem is not None and ours[0].problem.kind == "template_error", (messages, exc)
        return "template_error"
    if ours[0].problem is not None:
        assert ours[0].problem.kind in REFUSALS and ours[0].problem.reason, ours[0].problem
        return f"refused: {ours[0].problem.kind}"
    assert not isinstance(expected, str), (expected, messages)  # databuild built what the rule cannot answer
    assert [(o.input_ids.tolist(), o.loss_mask.tolist()) for o in ours] == expected, messages
    differ = ", prompt tokens differ" if any(o.prompt_tokens_differ for o in ours) else ""
    return ("equal" if len(ours) == 1 else "expanded") + differ


def corpus(family, leading_space: bool = False, seed: int = 18):
    rng = random.Random(f"{family.name}-{seed}")
    return [conversation(rng, family.tool_calls, family.reasoning, leading_space, family.arguments) for _ in range(CASES_PER_FAMILY)]


@pytest.mark.parametrize("leading_space", [False, True])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_rows_equal_the_rule_or_are_refused(built, name, leading_space, monkeypatch):
    """Every generated conversation: equal to the independent reference, or refused with a reason; the
    refusal rate (the template's own raises excluded) under 5% where answers start as models write them.
    Answers starting with whitespace the tokenizer joins to the prompt's last token are refused (the
    model never sees that token at inference): counted, not bounded."""
    pin_transformers_clock(monkeypatch)
    family, (tokenizer, encoder) = FAMILIES[name], built[name]
    counts = Counter(outcome(tokenizer, encoder, family, m, t) for m, t in corpus(family, leading_space))
    group = f"family {name}" + (" (answers may start with whitespace)" if leading_space else "")
    for kind in counts.elements():
        record_count(group, kind)
    considered = sum(counts.values()) - counts["template_error"]
    refused = sum(n for kind, n in counts.items() if kind.startswith("refused"))
    assert sum(n for kind, n in counts.items() if kind.startswith(("equal", "expanded"))) > 0
    if not leading_space and not family.unbounded:
        assert refused < 0.05 * considered, counts


@pytest.mark.parametrize("name", ["qwen3", "gptoss", "llama3_1"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_generated_conversations_property(built, name, rng, monkeypatch):
    pin_transformers_clock(monkeypatch)
    family, (tokenizer, encoder) = FAMILIES[name], built[name]
    messages, tools = conversation(rng, family.tool_calls, family.reasoning, arguments=family.arguments)
    assert outcome(tokenizer, encoder, family, messages, tools).split(",")[0] in (
        "equal", "expanded", "template_error", *(f"refused: {k}" for k in REFUSALS))


def supervised(tokenizer, part) -> list[str]:
    ids, mask = part.input_ids.tolist(), part.loss_mask.tolist()
    runs, current = [], []
    for token, m in zip(ids + [None], mask + [0]):
        if m:
            current.append(token)
        elif current:
            runs.append(tokenizer.decode(current, skip_special_tokens=False))
            current = []
    return runs


AGENT = [{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": None, "reasoning_content": "Need the tool.",
          "tool_calls": [{"id": "c1", "type": "function",
                          "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
         {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"},
         {"role": "assistant", "content": "18C and sunny.", "reasoning_content": "Read it."}]


@pytest.mark.parametrize("name, expected", [
    ("qwen2_5", [['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
                  "18C and sunny.<|im_end|>"]]),
    ("qwen3", [['<think>\nNeed the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
                '{"city": "Paris"}}\n</tool_call><|im_end|>', "<think>\nRead it.\n</think>\n\n18C and sunny.<|im_end|>"]]),
    ("gptoss", [["<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant to=functions.get_weather"
                 '<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'],
                ["<|channel|>analysis<|message|>Read it.<|end|><|start|>assistant<|channel|>final<|message|>"
                 "18C and sunny.<|return|>"]]),
])
def test_targets_are_what_the_model_generates(built, name, expected, monkeypatch):
    """The think opener, the tool-call markup and JSON, the channel markers and the stop token are targets;
    what follows the stop (ChatML's newline) and the tool result are not. gpt-oss drops the earlier
    analysis once a final answer follows, so the conversation expands into one sample per turn."""
    family, (tokenizer, encoder) = FAMILIES[name], built[name]
    # the reasoning under the key the family's template reads, or none where it writes none (Qwen2.5)
    messages = [{(family.reasoning if k == "reasoning_content" else k): v for k, v in m.items()
                 if k != "reasoning_content" or family.reasoning} for m in AGENT]
    parts = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), tuple(messages), tools=TOOLS)])
    assert parts[0].problem is None, parts[0].problem
    assert [supervised(tokenizer, p) for p in parts] == expected


@pytest.mark.parametrize("name, extra, field", [
    ("cohere2", {"tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}]},
     "tool call 'search'"),
    ("llama3_1", {"reasoning_content": "Let me think."}, "reasoning"),
])
def test_a_field_the_template_drops_is_refused_not_silently_lost(built, name, extra, field):
    """Cohere 2's template writes no tool calls and Llama 3.1's no reasoning: training on what they write
    would teach the model to answer without them."""
    tokenizer, encoder = built[name]
    messages = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", **extra})
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), messages)])
    assert out.problem[:2] == ("mask_error", f"assistant message 1: the template does not write its {field} in its turn: "
                                         "the model would be trained to answer without it")
