"""Loss masks: exactly the assistant contents and their closing tokens, for both strategies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from databuild.encode.encoder import Encoder
from databuild.errors import BuildError
from databuild.encode.masks import _only_place
from databuild.encode.render import Renderer
from databuild.sources.reader import Conversation

KWARGS = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}{% if m.role == 'assistant' %}"
          "{% generation %}{{ m.content + '<|im_end|>' }}{% endgeneration %}{% else %}"
          "{{ m.content + '<|im_end|>' }}{% endif %}{{ '\\n' }}{% endfor %}")
LLAMA3 = ("{{ '<|begin_of_text|>' }}{% for m in messages %}"
          "{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' }}{% if m.role == 'assistant' %}"
          "{% generation %}{{ m.content + '<|eot_id|>' }}{% endgeneration %}{% else %}"
          "{{ m.content + '<|eot_id|>' }}{% endif %}{% endfor %}")
TRIMMING = "{% for m in messages %}{{ m.role + ': ' + (m.content | trim) + '<|im_end|>' }}{% endfor %}"
PHI3 = Path(__file__).resolve().parents[2] / "shared" / "reference-tokenizers" / "phi-3-mini"


def encode(tokenizer, messages, loss_mask="muse_spark", template=None, conversation_id="c-1"):
    renderer = Renderer(template or tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, loss_mask)
    [out] = encoder.encode_batch([Conversation(0, 0, conversation_id, "s", tuple(messages))])
    return out


def supervised_runs(tokenizer, ids, mask) -> list[str]:
    """The decoded text of each maximal run of supervised tokens."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    return [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)
            for a, b in zip(edges[::2], edges[1::2])]


def expected_runs(messages, closings=("<|end|>", "<|return|>")) -> list[str]:
    last = len(messages) - 1
    return [content + (closings[1] if i == last else closings[0])
            for i, (role, content) in enumerate(messages) if role == "assistant" and content]


CASES = {
    "single turn": [("user", "Hi there"), ("assistant", "Hello!")],
    "system and multi-turn": [("system", "Be brief."), ("user", "One?"), ("assistant", "1"),
                              ("user", "Two?"), ("assistant", "2")],
    "ends with a user turn": [("user", "a"), ("assistant", "b"), ("user", "c")],
    "empty assistant content": [("user", "Say nothing."), ("assistant", "")],
    "no assistant turn": [("system", "x"), ("user", "Anyone?")],
    "literal special tokens": [("user", "What does <|end|> do?"), ("assistant", "It ends a turn: <|end|> <|return|>")],
    "echo of the user": [("user", "Repeat after me: hello world"), ("assistant", "hello world")],
    "assistant text equal to template words": [("user", "final"), ("assistant", "assistant")],
    "unicode": [("user", "👩‍💻 e\u0301 مرحبا 你好\r\n"), ("assistant", "👨‍👩‍👧 שלום\tok\r\n")],
}


@pytest.mark.parametrize("loss_mask", ["muse_spark", "assistant"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_expected_masks(tokenizer, name, loss_mask):
    messages = CASES[name]
    out = encode(tokenizer, messages, loss_mask)
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected_runs(messages)
    assert out.input_ids.dtype == np.int32 and out.loss_mask.dtype == np.int8
    assert set(np.unique(out.loss_mask)) <= {0, 1}


def test_echo_is_placed_after_the_user_turn(tokenizer):
    out = encode(tokenizer, CASES["echo of the user"])
    first = int(np.flatnonzero(out.loss_mask)[0])
    header = tokenizer.decode(out.input_ids[:first].tolist(), skip_special_tokens=False)
    assert header.endswith("hello world<|end|><|start|>assistant<|channel|>final<|message|>")


@pytest.mark.parametrize("loss_mask", ["muse_spark", "assistant"])
def test_every_fixture_conversation(tokenizer, source_conversations, loss_mask):
    """Decode the supervised spans of all fixture conversations: assistant contents plus closings."""
    renderer = Renderer(tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, loss_mask)
    batch = [Conversation(i, i, cid, "s", messages) for i, (cid, messages) in enumerate(source_conversations)]
    unsupervised = 0
    for (cid, messages), out in zip(source_conversations, encoder.encode_batch(batch)):
        assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected_runs(messages), cid
        unsupervised += not out.loss_mask.any()
    assert unsupervised >= 3  # the fixtures' no-assistant and empty-answer conversations


@pytest.mark.parametrize("template", ["fixture harmony", "chatml", "llama3"])
def test_assistant_strategy_agrees_with_transformers(tokenizer, source_conversations, template):
    """Token for token equal to apply_chat_template(return_assistant_tokens_mask=True)."""
    chat_template = {"fixture harmony": tokenizer.chat_template, "chatml": CHATML, "llama3": LLAMA3}[template]
    compared = 0
    for cid, messages in source_conversations:
        if any(role == "assistant" and not content for role, content in messages):
            continue  # transformers would train on the closing token of an empty answer; we do not
        ours = encode(tokenizer, messages, "assistant", chat_template, cid)
        theirs = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                               chat_template=chat_template, tokenize=True, return_dict=True,
                                               return_assistant_tokens_mask=True, **KWARGS)
        assert ours.input_ids.tolist() == theirs["input_ids"], cid
        assert ours.loss_mask.tolist() == theirs["assistant_masks"], cid
        compared += 1
    assert compared > 250


def test_muse_spark_refuses_a_non_harmony_template(tokenizer):
    out = encode(tokenizer, CASES["single turn"], "muse_spark", CHATML, "c-7")
    assert out.problem[0] == "mask_error" and out.problem[1].startswith("assistant message 1: not written as")
    assert len(out.input_ids) == len(out.loss_mask) == 0


def test_assistant_strategy_refuses_a_content_it_cannot_place(tokenizer):
    out = encode(tokenizer, [("user", "hi"), ("assistant", "  padded answer  ")], "assistant", TRIMMING, "c-8")
    assert out.problem == ("mask_error", "assistant message 1: the rendered text depends on assistant content in "
                                         "a way character spans cannot follow")


def test_a_template_that_raises_refuses_that_conversation_only(tokenizer):
    strict = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role, please') }}"
              "{% endif %}{{ m.role }}: {{ m.content }}<|end|>{% endfor %}")
    renderer = Renderer(strict, dict(tokenizer.special_tokens_map), KWARGS)
    refused, fine = Encoder(tokenizer, renderer, "assistant").encode_batch([
        Conversation(0, 0, "c-1", "s", (("system", "be brief"), ("user", "hi"), ("assistant", "hello"))),
        Conversation(1, 1, "c-2", "s", (("user", "hi"), ("assistant", "hello"))),
    ])
    assert refused.problem == ("template_error", "the chat template raised TemplateError: no system role, please")
    assert fine.problem is None and fine.loss_mask.sum() > 0


@pytest.mark.skipif(not (PHI3 / "tokenizer.json").exists(), reason="reference tokenizer not beside the repo")
def test_real_tokenizer_phi3(source_conversations):
    from databuild.encode.render import load_tokenizer

    phi3 = load_tokenizer(PHI3)
    for cid, messages in source_conversations[:80]:
        out = encode(phi3, messages, "assistant", None, cid)
        expected = [content + "<|end|>" for role, content in messages if role == "assistant" and content]
        assert supervised_runs(phi3, out.input_ids, out.loss_mask) == expected, cid
        assert out.input_ids[-1] == phi3.eos_token_id  # its template ends with EOS: the packer reuses it


@pytest.mark.parametrize("text", ["ab \U0001F600<|end|>", "x \u00e9\U0001F469\u200d\U0001F4BB<|end|>"])
def test_span_edges_follow_the_overlap_rule(tokenizer, text):
    """A span ending inside a character split over several byte tokens still covers all of them:
    the same tokens as transformers' rule over every token's offsets."""
    from databuild.encode.masks import spans_to_mask

    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    end = text.index("<|end|>")
    for span in [(0, end), (1, end - 1), (end - 1, end), (2, len(text))]:
        expected = [int(a < span[1] and b > span[0]) for a, b in encoding.offsets]
        assert spans_to_mask([span], encoding, len(encoding.ids)).tolist() == expected, span


@pytest.mark.parametrize("text, content, place", [
    ("u: hi<|end|>a: hello<|end|>", "hello", 15),
    ("u: hello<|end|>a: hello<|end|>", "hello", -1),  # twice
    ("aaa", "aa", -1),  # twice, overlapping
    ("u: " + "x" * 40 + "1 a: " + "x" * 40 + "2", "x" * 40 + "2", -1),  # its first 32 characters twice
    ("u: hi", "hello", -1),
])
def test_only_place_is_the_place_of_a_unique_occurrence(text, content, place):
    assert _only_place(text, content) == place


def test_a_machine_limit_stops_the_build_rather_than_skipping(tokenizer):
    """Where recursion runs out depends on the thread's stack, not on the conversation: counting it
    as a bad conversation would let the number of workers change the output."""
    deep = "{%- macro down(n) -%}{%- if n > 0 -%}{{- down(n - 1) -}}{%- endif -%}{%- endmacro -%}{{- down(100000) -}}"
    renderer = Renderer(deep + tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    with pytest.raises(BuildError, match=r"^conversation 'c-1' \(source row 0\): rendering it hit a RecursionError"):
        Encoder(tokenizer, renderer, "muse_spark").encode_batch([Conversation(0, 0, "c-1", "s", CASES["single turn"])])
