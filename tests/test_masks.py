"""Loss masks: proven placements, transformers' generation spans, and what each strategy supervises."""

from __future__ import annotations

import re
import numpy as np
import pytest

from conftest import PHI3, TEMPLATES, messages, needs_phi3, supervised_runs
from databuild.encode.encoder import Encoder
from databuild.errors import BuildError
from databuild.encode.render import Renderer
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from inference_reference import reference_rows

KWARGS = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
GENERATION_TAGS = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")
# The declared end of turn of each family, where it is not the tokenizer's EOS.
END_OF_TURN = {"chatml": ("<|im_end|>",), "llama3_trim": ("<|eot_id|>",), "phi3": ("<|end|>",),
               "harmony": ("<|end|>", "<|return|>"), "qwen_tools_think": ("<|im_end|>",)}


def family(name: str, tokenizer=None, tagged: bool = True) -> str:
    """A template family's text (the fixture tokenizer's own for harmony), with or without its tags."""
    text = tokenizer.chat_template if name == "harmony" else (TEMPLATES / f"{name}.jinja").read_text()
    return text if tagged else GENERATION_TAGS.sub("", text)


def encode(tokenizer, msgs, loss_mask="muse_spark", template=None, conversation_id="c-1", tools=None,
           end_of_turn=()):
    renderer = Renderer(template or tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, loss_mask, end_of_turn)
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, conversation_id, "s"), tuple(msgs), tools=tools)])
    return out


def transformers_mask(tokenizer, msgs, template, tools=None):
    """apply_chat_template's own tokens and generation mask."""
    out = tokenizer.apply_chat_template(list(msgs), tools=tools, chat_template=template, tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True, **KWARGS)
    return out["input_ids"], list(out["assistant_masks"])


def agrees_or_refuses(tokenizer, msgs, name, tools=None, tagged=False) -> str:
    """'equal' when the `assistant` rows on the family's template equal, tagged, transformers' generation
    mask, untagged, the inference rule recomputed from transformers' renders (inference_reference.py);
    a refusal's kind when refused with a reason; anything else fails."""
    template = family(name, tokenizer, tagged)
    renderer = Renderer(template, dict(tokenizer.special_tokens_map), KWARGS)
    parts = Encoder(tokenizer, renderer, "assistant", END_OF_TURN[name]).encode_batch(
        [Conversation(Origin(0, 0, "c-1", "s"), tuple(msgs), tools=tools)])
    if parts[0].problem is not None:
        assert parts[0].problem[0] in ("mask_error", "stop_token_in_field"), parts[0].problem
        return parts[0].problem[0]
    if tagged:
        expected = [transformers_mask(tokenizer, msgs, template, tools)]
    else:
        expected = reference_rows(tokenizer, msgs, tools, {**KWARGS, "chat_template": template},
                                  {tokenizer.eos_token, *END_OF_TURN[name]})
    assert [(p.input_ids.tolist(), p.loss_mask.tolist()) for p in parts] == expected, (msgs, name)
    return "equal"


def expected_runs(msgs, closings=("<|end|>", "<|return|>")) -> list[str]:
    last = len(msgs) - 1
    return [m["content"] + (closings[1] if i == last else closings[0])
            for i, m in enumerate(msgs) if m["role"] == "assistant" and m["content"]]


CASES = {
    "single turn": messages(("user", "Hi there"), ("assistant", "Hello!")),
    "system and multi-turn": messages(("system", "Be brief."), ("user", "One?"), ("assistant", "1"),
                                      ("user", "Two?"), ("assistant", "2")),
    "ends with a user turn": messages(("user", "a"), ("assistant", "b"), ("user", "c")),
    "empty assistant content": messages(("user", "Say nothing."), ("assistant", "")),
    "no assistant turn": messages(("system", "x"), ("user", "Anyone?")),
    "literal special tokens": messages(("user", "What does <|end|> do? And <|return|>, <|im_end|>?"),
                                       ("assistant", "It ends a turn.")),
    "echo of the user": messages(("user", "Repeat after me: hello world"), ("assistant", "hello world")),
    "assistant text equal to template words": messages(("user", "final"), ("assistant", "assistant")),
    "unicode": messages(("user", "👩‍💻 e\u0301 مرحبا 你好\r\n"), ("assistant", "👨‍👩‍👧 שלום\tok\r\n")),
    "sentinel characters in the text": messages(("user", "\ue000" + "1\ue001 and \ue0010\ue000"),
                                                ("assistant", "\ue000" + "1\ue001")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_muse_spark_masks(tokenizer, name):
    msgs = CASES[name]
    out = encode(tokenizer, msgs, "muse_spark")
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected_runs(msgs)
    assert out.input_ids.dtype == np.int32 and out.loss_mask.dtype == np.int8
    assert set(np.unique(out.loss_mask)) <= {0, 1}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("template", ["harmony", "chatml", "llama3_trim", "phi3"])
def test_assistant_follows_generation_tags_exactly(tokenizer, name, template):
    """On a tagged template the `assistant` mask is transformers' mask, empty answers included."""
    assert agrees_or_refuses(tokenizer, CASES[name], template, tagged=True) == "equal"


def test_echo_is_placed_after_the_user_turn(tokenizer):
    out = encode(tokenizer, CASES["echo of the user"])
    first = int(np.flatnonzero(out.loss_mask)[0])
    header = tokenizer.decode(out.input_ids[:first].tolist(), skip_special_tokens=False)
    assert header.endswith("hello world<|end|><|start|>assistant<|channel|>final<|message|>")


@pytest.mark.parametrize("stop_tokens", ["refuse", "train"])
def test_every_fixture_conversation_muse_spark(tokenizer, source_conversations, stop_tokens):
    """Decode the supervised spans of all fixture conversations: assistant contents plus closings; the four
    whose answer spells <|return|> or <|end|> are refused, unless stop_tokens_in_fields: train (the tiny
    config's, as the recipe's builder trained them)."""
    renderer = Renderer(tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, "muse_spark", stop_tokens_in_fields=stop_tokens)
    batch = [Conversation(Origin(i, i, cid, "s"), msgs) for i, (cid, msgs) in enumerate(source_conversations)]
    unsupervised, refused = 0, []
    for (cid, msgs), out in zip(source_conversations, encoder.encode_batch(batch)):
        if out.problem is not None:
            assert out.problem.kind == "stop_token_in_field", cid
            refused.append(cid)
            continue
        assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected_runs(msgs), cid
        unsupervised += not out.loss_mask.any()
    assert unsupervised >= 3  # the fixtures' no-assistant and empty-answer conversations
    assert refused == ([] if stop_tokens == "train" else ["tiny-0095", "tiny-0177", "tiny-0203", "tiny-0249"])


@pytest.mark.parametrize("template", ["harmony", "chatml", "llama3_trim", "phi3"])
@pytest.mark.parametrize("tagged", [True, False])
def test_every_fixture_conversation_agrees_with_transformers_or_is_refused(tokenizer, source_conversations,
                                                                            template, tagged):
    """Tagged: transformers' mask token for token, but for the answers that spell the family's stop token
    (refused under every strategy). Untagged (inference, declared end of turn): the rule recomputed from
    transformers' renders, or a refusal with its reason; never a third outcome."""
    outcomes = [agrees_or_refuses(tokenizer, msgs, template, tagged=tagged) for _, msgs in source_conversations]
    stops = {tokenizer.eos_token, *END_OF_TURN[template]}
    spelled = sum(any(stop in (m["content"] or "") for m in msgs if m["role"] == "assistant" for stop in stops)
                  for _, msgs in source_conversations)
    if tagged:
        assert outcomes.count("stop_token_in_field") == spelled
    assert outcomes.count("equal") >= (300 - spelled if tagged else 250)


def test_empty_assistant_content(tokenizer):
    """`assistant` = transformers: the closing token of an empty answer is a target (with or without
    tags); `muse_spark`: nothing. Either way the turn is counted."""
    msgs = CASES["empty assistant content"]
    for loss_mask, template, runs in [("assistant", family("chatml"), ["<|im_end|>"]),
                                      ("assistant", family("chatml", tagged=False), ["<|im_end|>"]),
                                      ("muse_spark", None, [])]:
        out = encode(tokenizer, msgs, loss_mask, template, end_of_turn=("<|im_end|>",))
        assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == runs
        assert out.empty_assistant_turns == 1


UPPER = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content | upper) + '<|im_end|>\\n' }}"
         "{% endfor %}")
HIDES_EARLIER_ANSWERS = ("{% for m in messages %}{% if m.role != 'assistant' or loop.last %}"
                         "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}")
NO_END_MARKER = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content }}{% endfor %}"
WRITES_ANSWERS_TWICE = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                        "{% endfor %}{{ 'Answers: ' + messages | selectattr('role', 'eq', 'assistant') "
                        "| map(attribute='content') | join(' ') }}")
COUNTS_THE_LAST_ANSWER = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
                          "{% endfor %}{{ '(' ~ (messages[-1].content | length) ~ ' characters)' }}")
# the message after an assistant turn written inside that turn, before its end-of-turn token
FOLDS_THE_NEXT_MESSAGE_IN = ("{% for m in messages %}{% if m.role == 'assistant' %}{{ '<|im_start|>assistant\\n' + m.content }}"
                             "{% elif loop.index0 and messages[loop.index0 - 1].role == 'assistant' %}"
                             "{{ '\\n' + m.content + '<|im_end|>\\n' }}"
                             "{% else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}")


# Untagged, by inference (encode/inference.py): what the model writes after the generation prompt, through
# its first stop token. Before issue 18, placement refused the trimmed, upper-cased and EOS-only cases and the
# two that write text after the last message (it could not prove where the content went), and supervised only
# the last answer where earlier answers are hidden.
@pytest.mark.parametrize("msgs, template, end_of_turn, expected", [
    # the template trims: the model, prompted with it, writes the trimmed answer
    (messages(("user", "Repeat after me: OK"), ("assistant", " OK")), family("chatml", tagged=False).replace(
        "message.content", "message.content | trim"), ("<|im_end|>",), [["OK<|im_end|>"]]),
    (messages(("user", "yes"), ("assistant", "yes")), UPPER, ("<|im_end|>",), [["<|im_start|>assistant\nYES<|im_end|>"]]),
    # no declared end of turn: the model stops on EOS only, which this template writes after the last turn
    (messages(("user", "Hi"), ("assistant", "Hello")), family("phi3", tagged=False), (),
     [["Hello<|end|>\n<|endoftext|>"]]),
    # these write text after the last message, the inference prompt too: no prompt the model would answer
    (messages(("user", "Hi"), ("assistant", "Hello")), WRITES_ANSWERS_TWICE, ("<|im_end|>",),
     "assistant message 1: the render with it does not start with the generation prompt before it"),
    (messages(("user", "Hi"), ("assistant", "Hello")), COUNTS_THE_LAST_ANSWER, ("<|im_end|>",),
     "assistant message 1: the render with it does not start with the generation prompt before it"),
    # a hidden earlier answer: the template rewrites history, so each turn is its own sample (history: expand)
    (messages(("user", "Hi"), ("assistant", "Hello there"), ("user", "You said: Hello there"), ("assistant", "Yes")),
     HIDES_EARLIER_ANSWERS, ("<|im_end|>",),
     [["<|im_start|>assistant\nHello there<|im_end|>"], ["<|im_start|>assistant\nYes<|im_end|>"]]),
    (messages(("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")), NO_END_MARKER, ("<|im_end|>",),
     "assistant message 1: no stop token closes its turn"),
    (messages(("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")), FOLDS_THE_NEXT_MESSAGE_IN, ("<|im_end|>",),
     "assistant message 1: no stop token closes its turn"),
    (messages(("user", "Hi"), ("assistant", "It ends here <|im_end|> or not")), family("chatml", tagged=False),
     ("<|im_end|>",), "assistant message 1: its content spells the stop token '<|im_end|>'"),
])
def test_untagged_targets_by_inference(tokenizer, msgs, template, end_of_turn, expected):
    renderer = Renderer(template, dict(tokenizer.special_tokens_map), KWARGS)
    parts = Encoder(tokenizer, renderer, "assistant", end_of_turn).encode_batch([Conversation(Origin(0, 0, "c", "s"), msgs)])
    if isinstance(expected, str):
        assert parts[0].problem[1].startswith(expected), parts[0].problem
        assert len(parts) == 1 and len(parts[0].input_ids) == len(parts[0].loss_mask) == 0
    else:
        assert [supervised_runs(tokenizer, p.input_ids, p.loss_mask) for p in parts] == expected
        assert [(p.part, p.parts) for p in parts] == [(k, len(expected)) for k in range(len(expected))]


def test_an_expanded_conversation_is_tokenized_as_its_samples_alone(tokenizer):
    """The tokenizer encodes what is written: in an expanded conversation's place, its samples (a list of
    encodings), never its whole render as well; a caller that tokenized the whole renders instead
    (encode/preference.py) gets the same rows from finish."""
    encoder = Encoder(tokenizer, Renderer(HIDES_EARLIER_ANSWERS, dict(tokenizer.special_tokens_map), KWARGS),
                      "assistant", ("<|im_end|>",))
    batch = [Conversation(Origin(0, 0, "e", "s"), messages(("user", "Hi"), ("assistant", "Hello there"),
                                                           ("user", "You said: Hello there"), ("assistant", "Yes"))),
             Conversation(Origin(1, 1, "p", "s"), messages(("user", "Hi"), ("assistant", "Hello")))]
    rendered = encoder.render(batch)
    encodings = encoder.tokenize(rendered)
    samples, alone = rendered[0].chosen[0], tokenizer.backend_tokenizer.encode
    assert len(samples) == 2 and samples[0].text != rendered[0].text  # the first turn as it was generated
    assert [e.ids for e in encodings[0]] == [alone(s.text, add_special_tokens=False).ids for s in samples]
    assert encodings[1].ids == alone(rendered[1].text, add_special_tokens=False).ids
    ours = encoder.finish(batch, rendered, encodings)
    assert [(o.origin.id, o.part, o.parts, o.problem) for o in ours] == [("e", 0, 2, None), ("e", 1, 2, None),
                                                                         ("p", 0, 1, None)]
    whole = encoder.finish(batch, rendered, encoder.tokenize([(item.text, None) for item in rendered]))
    assert [(o.input_ids.tolist(), o.loss_mask.tolist()) for o in whole] == \
        [(o.input_ids.tolist(), o.loss_mask.tolist()) for o in ours]
    assert [supervised_runs(tokenizer, o.input_ids, o.loss_mask) for o in ours][:2] == \
        [["<|im_start|>assistant\nHello there<|im_end|>"], ["<|im_start|>assistant\nYes<|im_end|>"]]


def test_a_prompt_tokenized_otherwise_alone_is_counted(tokenizer):
    """The fixture tokenizer's GPT-2 split cuts the prompt's "\n\n" as "\n" + "\n" before a word, but as
    one piece at the end of the prompt alone: the answer's tokens are targets all the same, and the turn
    is counted (manifest counts.prompt_tokens_differ); ChatML's "\n" is one piece either way."""
    msgs = messages(("user", "Hi"), ("assistant", "OK"))
    for name, eot, differ in [("llama3_trim", "<|eot_id|>", 1), ("chatml", "<|im_end|>", 0)]:
        out = encode(tokenizer, msgs, "assistant", family(name, tagged=False), end_of_turn=(eot,))
        assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == [f"OK{eot}"]
        assert out.prompt_tokens_differ == differ


def test_history_refuse_names_the_policy(tokenizer):
    msgs = messages(("user", "Hi"), ("assistant", "Hello there"), ("user", "Again"), ("assistant", "Yes"))
    renderer = Renderer(HIDES_EARLIER_ANSWERS, dict(tokenizer.special_tokens_map), KWARGS)
    [out] = Encoder(tokenizer, renderer, "assistant", ("<|im_end|>",), history="refuse").encode_batch(
        [Conversation(Origin(0, 0, "c", "s"), msgs)])
    assert out.problem[0] == "history_rewritten" and "history: expand" in out.problem[1]


def test_muse_spark_refuses_tool_calls_tool_results_and_reasoning(tokenizer):
    """The recipe's trainer supervises final-channel answers, and its template writes none of these."""
    call = [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
    for extra in ({"tool_calls": call}, {"thinking": "hm"}, {"reasoning_content": "hm"}):
        msgs = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", **extra})
        out = encode(tokenizer, msgs, "muse_spark")
        assert out.problem[0] == "mask_error" and out.problem[1].startswith(
            "assistant message 1: muse_spark supervises final-channel answers only"), out.problem
    msgs = ({"role": "user", "content": "Hi"}, {"role": "tool", "content": "18C"}, {"role": "assistant", "content": "Yo"})
    out = encode(tokenizer, msgs, "muse_spark")
    assert out.problem[0] == "template_error" and "Unsupported role: tool" in out.problem[1]


def test_muse_spark_refuses_a_non_harmony_template(tokenizer):
    out = encode(tokenizer, CASES["single turn"], "muse_spark", family("chatml"), "c-7")
    assert out.problem[0] == "mask_error" and out.problem[1].startswith("assistant message 1: not written as")
    assert len(out.input_ids) == len(out.loss_mask) == 0


def test_a_template_that_raises_refuses_that_conversation_only(tokenizer):
    strict = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role, please') }}"
              "{% endif %}{{ m.role }}: {{ m.content }}<|endoftext|>{% endfor %}")
    renderer = Renderer(strict, dict(tokenizer.special_tokens_map), KWARGS)
    refused, fine = Encoder(tokenizer, renderer, "assistant").encode_batch([
        Conversation(Origin(0, 0, "c-1", "s"), messages(("system", "be brief"), ("user", "hi"), ("assistant", "hello"))),
        Conversation(Origin(1, 1, "c-2", "s"), messages(("user", "hi"), ("assistant", "hello"))),
    ])
    assert refused.problem[:2] == ("template_error", "the chat template raised TemplateError: no system role, please")
    assert fine.problem is None and fine.loss_mask.sum() > 0


def test_end_of_turn_must_be_a_special_token(tokenizer):
    renderer = Renderer(family("chatml"), dict(tokenizer.special_tokens_map), KWARGS)
    with pytest.raises(BuildError, match="key 'end_of_turn' = 'im_end': not a special token of the tokenizer"):
        Encoder(tokenizer, renderer, "assistant", ("im_end",))


@needs_phi3
def test_real_tokenizer_phi3(source_conversations):
    """The real Phi-3: its own (untagged) template with <|end|> declared; the tagged copy exactly."""
    from databuild.encode.render import load_tokenizer

    phi3 = load_tokenizer(PHI3)
    for cid, msgs in source_conversations[:80]:
        out = encode(phi3, msgs, "assistant", None, cid, end_of_turn=("<|end|>",))
        expected = [m["content"] + "<|end|>" for m in msgs if m["role"] == "assistant"]
        runs = supervised_runs(phi3, out.input_ids, out.loss_mask)
        assert [r.replace("<|end|>\n", "<|end|>") for r in runs] == [e for e in expected if e], cid
        assert out.input_ids[-1] == phi3.eos_token_id  # its template ends with EOS: the packer reuses it
        assert agrees_or_refuses(phi3, msgs, "phi3", tagged=True) == "equal"
        assert agrees_or_refuses(phi3, msgs, "phi3", tagged=False) in ("equal", "mask_error")


@pytest.mark.parametrize("text", ["ab \U0001F600<|end|>", "x \u00e9\U0001F469\u200d\U0001F4BB<|end|>",
                                  "a\n\nb  c<|end|>"])
def test_spans_follow_transformers_overlap_rule(tokenizer, text):
    """Spans ending inside a character split over several byte tokens, empty spans inside a token, and
    spans out of order: the same tokens as transformers' own loop over every token's offsets."""
    from databuild.encode.masks import _transformers_loop, spans_to_mask
    from databuild.encode.positions import AddedTokens, Offsets, Split

    backend = tokenizer.backend_tokenizer
    encoding = backend.encode(text, add_special_tokens=False)
    fast = backend.encode_batch_fast([text], add_special_tokens=False)[0]
    added = AddedTokens.of(backend)
    assert added.reason is None  # placed without offsets: each case below asks both ways
    end = text.index("<|end|>")
    cases = [[(0, end)], [(1, end - 1)], [(end - 1, end)], [(2, len(text))], [(2, 2)], [(1, 2), (3, 3), (4, 6)],
             [(0, end), (1, 2)], [(3, 3)]]
    for spans in cases:
        expected = [int(any(a < e and b > s for s, e in spans)) for a, b in encoding.offsets]
        for placed in (Offsets(encoding, text, backend), Split(fast, text, added, backend)):
            if all(f[0] >= p[1] for p, f in zip(spans, spans[1:])):
                assert spans_to_mask(spans, placed, len(encoding.ids)).tolist() == expected, spans
            assert spans_to_mask(spans, placed, len(encoding.ids)).tolist() == \
                _transformers_loop(spans, encoding.offsets, len(encoding.ids)).tolist(), spans


def test_a_machine_limit_stops_the_build_rather_than_skipping(tokenizer):
    """Where recursion runs out depends on the thread's stack, not on the conversation: counting it
    as a bad conversation would let the number of workers change the output."""
    deep = "{%- macro down(n) -%}{%- if n > 0 -%}{{- down(n - 1) -}}{%- endif -%}{%- endmacro -%}{{- down(100000) -}}"
    renderer = Renderer(deep + tokenizer.chat_template, dict(tokenizer.special_tokens_map), KWARGS)
    with pytest.raises(BuildError, match=r"^conversation 'c-1' \(source row 0\): rendering it hit a RecursionError"):
        Encoder(tokenizer, renderer, "muse_spark").encode_batch([Conversation(Origin(0, 0, "c-1", "s"), CASES["single turn"])])


# harmony-style: an analysis message and the final answer after it, closed by <|end|> when another assistant
# message follows, else by <|return|>; the model stops on <|return|> only (gpt-oss's generation config)
CHANNELS = ("{% for m in messages %}{% if m.role == 'assistant' %}{{ '<|start|>assistant<|channel|>' + m.channel + "
            "'<|message|>' + m.content }}{{ '<|end|>' if not loop.last and messages[loop.index0 + 1].role == "
            "'assistant' else '<|return|>' }}{% else %}{{ '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' }}"
            "{% endif %}{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}")


def test_a_run_of_assistant_messages_inference_writes_as_one_is_one_turn(tokenizer):
    """The analysis message's prompt, followed by the final answer, is not the render with the final answer
    (<|end|> there, <|return|> when it was last): no generation prompt stands between them, so the two are
    one generation, supervised from the first's prompt through the final <|return|>."""
    msgs = ({"role": "user", "content": "Hi"}, {"role": "assistant", "channel": "analysis", "content": "think"},
            {"role": "assistant", "channel": "final", "content": "Hello"})
    renderer = Renderer(CHANNELS, dict(tokenizer.special_tokens_map), KWARGS)
    [out] = Encoder(tokenizer, renderer, "assistant", ("<|return|>",)).encode_batch([Conversation(Origin(0, 0, "c", "s"), msgs)])
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == [
        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hello<|return|>"]
    # with <|end|> a stop token too, the model would have stopped after the analysis: refused
    [out] = Encoder(tokenizer, renderer, "assistant", ("<|return|>", "<|end|>")).encode_batch(
        [Conversation(Origin(0, 0, "c", "s"), msgs)])
    assert out.problem[:2] == ("mask_error", "assistant message 2: a stop token stands in its turn before it: the model "
                                         "would have stopped there")


def test_an_empty_set_of_stop_tokens_matches_nothing():
    """A tokenizer without EOS or special tokens and no end_of_turn: no stop, rather than an empty match
    at every position (which would close every turn where it starts)."""
    from databuild.encode.inference import stop_pattern

    assert stop_pattern(frozenset()).search("<|im_end|> any text") is None
    assert stop_pattern(frozenset({"<|a|>", "<|a|>b"})).search("x<|a|>b").group() == "<|a|>b"


STOP_IN_FIELD = [
    ("content", {"role": "assistant", "content": "It ends a turn: <|end|> here"}, "<|end|>"),
    ("content", {"role": "assistant", "content": "Done<|return|>"}, "<|return|>"),
    ("content", {"role": "assistant", "content": "Done<|endoftext|>more"}, "<|endoftext|>"),
]


@pytest.mark.parametrize("key, message, token", STOP_IN_FIELD)
@pytest.mark.parametrize("strategy, template", [("muse_spark", "harmony"), ("assistant", "harmony"),
                                                ("assistant", "chatml"), ("assistant", "phi3")])
def test_a_stop_token_in_an_assistant_field_is_refused_under_every_strategy(tokenizer, strategy, template, key,
                                                                            message, token):
    """Issue 29: the model would stop there, so no strategy trains past it: muse_spark (its closings
    and EOS), and the tagged templates (EOS and the declared ends of turn), not only the inference rule."""
    ends = (*END_OF_TURN[template], "<|end|>", "<|return|>")  # the tokens each build declares here
    renderer = Renderer(family(template, tokenizer, tagged=True), dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, strategy, () if strategy == "muse_spark" else ends)
    assert strategy == "muse_spark" or all(renderer.tagged.values())
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, "c-1", "s"), ({"role": "user", "content": "Hi"}, message))])
    assert out.problem is not None and out.problem.kind == "stop_token_in_field"
    assert out.problem.reason == (f"assistant message 1: its {key} spells the stop token {token!r}: the model would "
                                  "have stopped there")
