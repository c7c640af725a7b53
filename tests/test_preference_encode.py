"""The encode stage of a preference build: the prompt rendered once with its generation prompt, a prefix
of each whole render byte for byte and token for token, each completion's targets those of the SFT rule
on the whole conversation; every way a pair fails refused with its kind, never re-aligned."""

import numpy as np
import pytest

from pairs import assistant, pair, pair_encoder, tagged_template, user


@pytest.fixture(scope="module")
def tagged():
    return pair_encoder(tagged_template())


def test_a_pair_is_its_prompt_then_each_completion_with_transformers_masks(tagged):
    """Against transformers: the prompt's ids are apply_chat_template's with the generation prompt, and
    each sequence (prompt + completion) and its targets are apply_chat_template's with
    return_assistant_tokens_mask, the prompt's own assistant turn left untrained."""
    tokenizer, encoder = tagged
    prompt = (user("hi"), assistant("hello"), user("tell me more"))
    record = pair(0, prompt, (assistant("more, then"),), (assistant("no"),))
    [out] = encoder.encode_batch([record])
    assert out.problem is None and out.names == ("chosen", "rejected")
    expected_prompt = tokenizer.apply_chat_template(list(prompt), chat_template=tagged_template(), tokenize=True,
                                                    add_generation_prompt=True, return_dict=True)["input_ids"]
    assert out.prompt_ids.tolist() == expected_prompt
    for completion, ids, mask in zip(record.completions, out.completion_ids, out.completion_masks):
        whole = tokenizer.apply_chat_template(list(prompt + completion), chat_template=tagged_template(),
                                              tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        size = len(expected_prompt)
        assert whole["input_ids"][:size] == expected_prompt
        assert ids.tolist() == whole["input_ids"][size:]
        assert mask.tolist() == list(whole["assistant_masks"][size:])  # the completion's targets
        assert any(whole["assistant_masks"][:size])  # the prompt's assistant turn: a target there, not here
        assert tokenizer.decode(ids[mask.astype(bool)]) == completion[0]["content"] + "<|end|>"


def test_unpaired_completion_keeps_its_label(tagged):
    _, encoder = tagged
    [out] = encoder.encode_batch([pair(0, (user("hi"),), (assistant("yes"),), label=False)])
    assert out.problem is None and out.names == ("completion",) and out.label is False


def test_muse_spark_strategy_on_the_fixture_template():
    """The config's strategy (muse_spark on the fixture tokenizer) gives the targets SFT gives the whole
    conversation, from the generation prompt's end on."""
    tokenizer, encoder = pair_encoder()
    record = pair(0, (user("hi"),), (assistant("hello"),), (assistant("go away"),))
    [out] = encoder.encode_batch([record])
    assert out.problem is None
    decoded = [tokenizer.decode(ids[mask.astype(bool)]) for ids, mask in zip(out.completion_ids, out.completion_masks)]
    assert decoded == ["hello<|return|>", "go away<|return|>"]
    assert tokenizer.decode(out.prompt_ids).endswith("<|start|>assistant")


@pytest.mark.parametrize("generation, kind", [
    ("<|start|>assistant<|message|><think>", "prompt_not_prefix"),  # DeepSeek-R1's kind of generation prompt
    ("<|start|>assistant<|message|> ", "prompt_tokens_not_prefix"),  # " " and the answer's "hello" merge
])
def test_a_prompt_that_is_not_a_prefix_is_refused_never_realigned(generation, kind):
    template = tagged_template(generation).replace("<|message|>{% generation %}", "<|message|> {% generation %}") \
        if kind == "prompt_tokens_not_prefix" else tagged_template(generation)
    _, encoder = pair_encoder(template)
    [out] = encoder.encode_batch([pair(0, (user("hi"),), (assistant("hello"),), (assistant("bye"),))])
    assert out.problem is not None and out.problem.kind == kind, out.problem
    assert out.problem.reason.startswith("chosen: ") and not out.completion_ids


def test_a_prompt_must_end_on_a_user_or_tool_turn(tagged):
    _, encoder = tagged
    [out] = encoder.encode_batch([pair(0, (user("hi"), assistant("yo")), (assistant("a"),), (assistant("b"),))])
    assert out.problem.kind == "prompt_last_role" and "'assistant'" in out.problem.reason


def test_a_completion_without_target_is_refused():
    """An empty answer on a template whose generation block holds the content alone: no token to score."""
    _, encoder = pair_encoder(tagged_template().replace("{{ m.content }}<|end|>{% endgeneration %}",
                                                        "{{ m.content }}{% endgeneration %}<|end|>"))
    [out] = encoder.encode_batch([pair(0, (user("hi"),), (assistant("a"),), (assistant(""),))])
    assert out.problem is not None and out.problem.kind == "no_target", out.problem
    assert out.problem.reason.startswith("rejected: ")


def test_a_completion_opening_on_a_tool_turn_is_not_after_the_generation_prompt(tagged):
    _, encoder = tagged
    [out] = encoder.encode_batch([pair(0, (user("hi"),), ({"role": "tool", "content": "x"},), (assistant("b"),))])
    assert out.problem.kind == "prompt_not_prefix" and "character 42" in out.problem.reason


def test_a_batch_is_the_same_as_its_records_one_by_one(tagged):
    _, encoder = tagged
    records = [pair(k, (user(f"q{k}"),), (assistant(f"a{k}"),), (assistant(f"b{k} " * k),)) for k in range(6)]
    records.insert(3, pair(9, (user("q"), assistant("x")), (assistant("a"),), (assistant("b"),)))
    together = encoder.encode_batch(records)
    alone = [encoder.encode_batch([r])[0] for r in records]
    for a, b in zip(together, alone):
        assert a.problem == b.problem and np.array_equal(a.prompt_ids, b.prompt_ids)
        assert all(np.array_equal(x, y) for x, y in zip(a.completion_ids + a.completion_masks,
                                                         b.completion_ids + b.completion_masks))
