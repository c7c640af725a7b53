"""Which turns train (`train_turns`): the last assistant turn only, or the turns the data does not flag
`train: false`; masks recomputed from transformers' renders (token counts of the renders before each
turn) and compared token for token; every format carries the flag; history expansion writes only
the samples whose turn trains."""

from __future__ import annotations

import pytest

from conftest import messages, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.encode.encoder import Encoder
from databuild.encode.render import Renderer
from databuild.errors import BuildError
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from inference_reference import reference_rows
from test_masks import END_OF_TURN, HIDES_EARLIER_ANSWERS, KWARGS, expected_runs, family, supervised_runs, \
    transformers_mask
from test_mixture import SHARDS, build, entry, fixture_rows, mixture, sharegpt, write_copy

THREE_TURNS = messages(("system", "Be brief."), ("user", "One?"), ("assistant", "1"), ("user", "Two?"),
                       ("assistant", "Two it is"), ("user", "Three?"), ("assistant", "3, and done"))
ASSISTANTS = [k for k, m in enumerate(THREE_TURNS) if m["role"] == "assistant"]  # 2, 4, 6


def flagged(msgs, off: set[int]) -> tuple[dict, ...]:
    return tuple({**m, "train": False} if k in off else m for k, m in enumerate(msgs))


def encoded(tokenizer, msgs, template, loss_mask, train_turns, end_of_turn=(), history="expand"):
    renderer = Renderer(template, dict(tokenizer.special_tokens_map), KWARGS)
    return Encoder(tokenizer, renderer, loss_mask, end_of_turn, history=history, train_turns=train_turns).encode_batch(
        [Conversation(Origin(0, 0, "c", "s"), tuple(msgs))])


def tokens_before(tokenizer, template, msgs, k: int) -> int:
    """Tokens of transformers' render of the messages before message k (0 for k = len: the end)."""
    if k == 0:
        return 0
    text = tokenizer.apply_chat_template(list(msgs[:k]), chat_template=template, tokenize=False, **KWARGS)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def restricted(tokenizer, template, msgs, mask: list[int], off_turns: list[int]) -> list[int]:
    """`mask` with the tokens of each assistant message in `off_turns` cleared: those from the render
    before it to the render before the next assistant message (the messages between are no targets)."""
    mask = list(mask)
    for k in off_turns:
        following = [a for a in ASSISTANTS if a > k]
        low = tokens_before(tokenizer, template, msgs, k)
        high = tokens_before(tokenizer, template, msgs, following[0]) if following else len(mask)
        mask[low:high] = [0] * (high - low)
    return mask


CHOICES = [("last", set(), [2, 4]), ("flagged", {4}, [4]), ("flagged", {2, 6}, [2, 6])]


@pytest.mark.parametrize("train_turns, off, cleared", CHOICES)
@pytest.mark.parametrize("name", ["harmony", "chatml", "llama3_trim", "phi3"])
def test_tagged_masks_are_transformers_generation_mask_restricted(tokenizer, name, train_turns, off, cleared):
    template = family(name, tokenizer, tagged=True)
    ids, mask = transformers_mask(tokenizer, THREE_TURNS, template)
    [out] = encoded(tokenizer, flagged(THREE_TURNS, off), template, "assistant", train_turns)
    assert out.problem is None, out.problem
    expected = restricted(tokenizer, template, THREE_TURNS, mask, cleared)
    assert out.input_ids.tolist() == ids and out.loss_mask.tolist() == expected
    assert 0 < sum(expected) < sum(mask)
    assert out.turns_not_trained == len(cleared)


@pytest.mark.parametrize("train_turns, off, cleared", CHOICES)
@pytest.mark.parametrize("name", ["chatml", "llama3_trim", "phi3"])
def test_untagged_masks_are_the_inference_reference_restricted(tokenizer, name, train_turns, off, cleared):
    template = family(name, tokenizer, tagged=False)
    [(ids, mask)] = reference_rows(tokenizer, THREE_TURNS, None, {**KWARGS, "chat_template": template},
                                   {tokenizer.eos_token, *END_OF_TURN[name]})
    [out] = encoded(tokenizer, flagged(THREE_TURNS, off), template, "assistant", train_turns, END_OF_TURN[name])
    assert out.problem is None, out.problem
    assert out.input_ids.tolist() == ids
    assert out.loss_mask.tolist() == restricted(tokenizer, template, THREE_TURNS, mask, cleared)


@pytest.mark.parametrize("train_turns, off, cleared", CHOICES)
def test_muse_spark_keeps_the_chosen_answers(tokenizer, train_turns, off, cleared):
    [out] = encoded(tokenizer, flagged(THREE_TURNS, off), tokenizer.chat_template, "muse_spark", train_turns)
    kept = [m if k not in cleared else {**m, "content": ""} for k, m in enumerate(THREE_TURNS)]
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == expected_runs(kept)
    [whole] = encoded(tokenizer, THREE_TURNS, tokenizer.chat_template, "muse_spark", "all")
    assert out.input_ids.tolist() == whole.input_ids.tolist()  # the flag never reaches the template


def test_an_expanded_sample_whose_turn_does_not_train_is_not_written(tokenizer):
    msgs = messages(("user", "Hi"), ("assistant", "Hello there"), ("user", "You said: Hello there"),
                    ("assistant", "Yes"))
    parts = encoded(tokenizer, msgs, HIDES_EARLIER_ANSWERS, "assistant", "last", ("<|im_end|>",))
    assert [supervised_runs(tokenizer, p.input_ids, p.loss_mask) for p in parts] == [
        ["<|im_start|>assistant\nYes<|im_end|>"]]
    assert (parts[0].samples_not_written, parts[0].turns_not_trained) == (1, 1)
    parts = encoded(tokenizer, flagged(msgs, {3}), HIDES_EARLIER_ANSWERS, "assistant", "flagged", ("<|im_end|>",))
    assert [supervised_runs(tokenizer, p.input_ids, p.loss_mask) for p in parts] == [
        ["<|im_start|>assistant\nHello there<|im_end|>"]]


def test_no_turn_left_drops_the_conversation_and_a_flag_unread_is_refused(tokenizer):
    [out] = encoded(tokenizer, flagged(THREE_TURNS, set(ASSISTANTS)), tokenizer.chat_template, "muse_spark", "flagged")
    assert out.problem[0] == "no_trained_turn"
    [out] = encoded(tokenizer, flagged(THREE_TURNS, {4}), tokenizer.chat_template, "muse_spark", "all")
    assert out.problem[0] == "mask_error" and "train_turns: flagged" in out.problem[2]


@pytest.fixture(scope="module")
def flagged_sources(tmp_path_factory):
    """The second shard with every first assistant message of a multi-turn conversation flagged
    train: false, as messages and as ShareGPT (whose items carry the field too)."""
    tmp = tmp_path_factory.mktemp("flags")
    rows = fixture_rows(SHARDS[1])
    flagged_turns = 0
    for row in rows:
        answers = [k for k, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        row["messages"] = [{**m, "train": None} for m in row["messages"]]
        if len(answers) > 1:
            row["messages"][answers[0]]["train"] = False
            flagged_turns += bool(row["messages"][answers[0]]["content"])
    as_messages = write_copy(tmp / "m", {"train-00000-of-00001.parquet": rows})

    def shared(messages):
        out = sharegpt(messages)
        for item, message in zip(out["conversations"], messages):
            item["train"] = message["train"]
        return out

    as_sharegpt = write_copy(tmp / "s", {"train-00000-of-00001.parquet": [
        {"id": r["id"], **shared(r["messages"]), "source": r["source"]} for r in rows]})
    return tmp, as_messages, as_sharegpt, flagged_turns


def test_every_format_carries_the_flag(flagged_sources):
    tmp, as_messages, as_sharegpt, flagged_turns = flagged_sources
    assert flagged_turns > 5
    one = build(mixture(tmp, entry(as_messages), name="m.yaml", rows="all", train_turns="flagged"), tmp / "m")
    other = build(mixture(tmp, entry(as_sharegpt, format="sharegpt"), name="s.yaml", rows="all",
                          train_turns="flagged"), tmp / "s")
    assert one.data["output"]["rows_sha256"] == other.data["output"]["rows_sha256"]
    assert one.data["build"]["train_turns"] == "flagged"
    assert one.data["counts"]["train_turns"]["turns_not_trained"] == flagged_turns
    with pytest.raises(BuildError, match="says train: false, which train_turns: all does not read; set train_turns: "
                                         "flagged"):
        build(mixture(tmp, entry(as_messages), name="a.yaml", rows="all"), tmp / "a")


def test_last_builds_and_records(tmp_path, tiny_build):
    config = load_config(write_config(tmp_path / "c.yaml", train_turns="last"))
    result = make(config, tmp_path / "out", progress=False)
    assert result.data["build"]["train_turns"] == "last"
    assert result.data["counts"]["train_turns"]["turns_not_trained"] > 0
    assert result.data["output"]["supervised_token_ratio"] < tiny_build.data["output"]["supervised_token_ratio"]
    with pytest.raises(BuildError, match="key 'train_turns' = 'first': expected one of all, last, flagged"):
        load_config(write_config(tmp_path / "d.yaml", train_turns="first"))


def test_the_same_bytes_whatever_the_workers_and_batches(flagged_sources, sixteen_cores):
    tmp, as_messages, _, _ = flagged_sources
    config = mixture(tmp, entry(as_messages), name="w.yaml", rows="all", train_turns="flagged")
    one = build(config, tmp / "w1")
    other = make(load_config(config), tmp / "w2", workers=2, batch_size=3, window=16, progress=False)
    assert one.parquet.read_bytes() == other.parquet.read_bytes()
    assert one.manifest.read_bytes() == other.manifest.read_bytes()


def test_show_names_the_turns_that_train(tmp_path):
    from test_build import run_cli

    result = make(load_config(write_config(tmp_path / "c.yaml", train_turns="last")), tmp_path / "out",
                  progress=False)
    done = run_cli("show", str(result.parquet), "--row", "0")
    assert done.returncode == 0, done.stderr
    assert "controls: train_turns: last (targets of the other turns off)" in done.stdout
