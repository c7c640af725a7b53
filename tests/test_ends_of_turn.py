"""Ends of turn found: on a template without generation tags and a config that declares no
end_of_turn, the tokens generation_config.json's eos_token_id names (plus EOS) close assistant turns;
they build the same rows as the declared end_of_turn; a template no exchange of which can be masked
is refused at its first conversation, or under skip when every conversation was, in one line naming
the token to declare."""

from __future__ import annotations

import json
import re
import shutil

import pyarrow.parquet as pq

import pytest

from conftest import PHI3, TEMPLATES, TOKENIZER_DIR, needs_phi3, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.encode.ends import generation_stops
from databuild.encode.render import load_tokenizer
from databuild.errors import BuildError
from databuild.inputs.pins import tokenizer_files

UNTAGGED_CHATML = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", (TEMPLATES / "chatml.jinja").read_text())


def chatml_tokenizer(tmp_path, eos_token_id=None):
    """The fixture tokenizer with an untagged ChatML template (turns closed by <|im_end|>, id 7; EOS
    <|endoftext|>, id 5), and a generation_config.json when eos_token_id is given."""
    directory = tmp_path / "chatml-tok"
    shutil.copytree(TOKENIZER_DIR, directory)
    (directory / "chat_template.jinja").write_text(UNTAGGED_CHATML)
    if eos_token_id is not None:
        (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_token_id}))
    return directory


def build(tmp_path, directory, name, **changes):
    from databuild.utils.files import file_sha256

    pins = {f: file_sha256(directory / f)[0] for f in tokenizer_files(directory)}
    config = write_config(tmp_path / f"{name}.yaml", **{"name": name, "loss_mask": "assistant", "rows": 6,
                                                        "tokenizer": {"dir": str(directory), "sha256": pins}, **changes})
    return make(load_config(config), tmp_path / name, progress=False)


@pytest.mark.parametrize("eos_token_id", [7, [5, 7]])
def test_inferred_ends_of_turn_build_the_declared_rows(tmp_path, eos_token_id):
    directory = chatml_tokenizer(tmp_path, eos_token_id)
    inferred = build(tmp_path, directory, "inferred")
    declared = build(tmp_path, directory, "declared", end_of_turn=["<|im_end|>"])
    assert inferred.data["output"]["rows_sha256"] == declared.data["output"]["rows_sha256"]
    assert inferred.data["output"]["supervised_tokens"] > 0
    assert inferred.data["build"]["end_of_turn"] == ["<|endoftext|>", "<|im_end|>"]
    assert inferred.data["build"]["end_of_turn_from"] == "generation_config"
    assert declared.data["build"]["end_of_turn_from"] == "config"
    assert "generation_config.json" in inferred.data["inputs"]["tokenizer"]["sha256"]


def test_a_template_wide_mask_error_is_one_line_naming_the_fix(tmp_path):
    """Refused at the first conversation it meets (not guessed before the first row, issue 29), naming the token."""
    directory = chatml_tokenizer(tmp_path)  # no generation_config.json: EOS alone, which never closes a turn
    with pytest.raises(BuildError) as error:
        build(tmp_path, directory, "none")
    message = str(error.value)
    assert "\n" not in message and message.startswith("conversation cannot be built (mask_error): ")
    assert "set end_of_turn: ['<|im_end|>'] in the config" in message
    assert not (tmp_path / "none" / "none.parquet").exists()
    with pytest.raises(BuildError) as error:  # skipping does not hide it: no row kept, all refused alike
        build(tmp_path, directory, "skip", on_bad_conversation="skip")
    message = str(error.value)
    assert message.startswith("the source ran out: 0 rows kept") and "\n" not in message
    assert "all 294 conversations refused were refused the same way (mask_error" in message
    assert "set end_of_turn: ['<|im_end|>'] in the config" in message


def test_a_tagged_template_takes_no_stops(tmp_path):
    directory = chatml_tokenizer(tmp_path, [5, 7])
    (directory / "chat_template.jinja").write_text((TEMPLATES / "chatml.jinja").read_text())
    result = build(tmp_path, directory, "tagged")
    assert (result.data["build"]["end_of_turn"], result.data["build"]["end_of_turn_from"]) == (["<|endoftext|>"], "eos")


@pytest.mark.parametrize("content, message", [
    ('{"eos_token_id": "7"}', "eos_token_id = '7': expected a token id or a list of them"),
    ('{"eos_token_id": [7, 99999]}', "eos_token_id 99999 is not an id of the tokenizer (3500 ids)"),
    ("[1", "not a JSON object"),
])
def test_a_bad_generation_config_is_named(tmp_path, content, message):
    directory = chatml_tokenizer(tmp_path)
    (directory / "generation_config.json").write_text(content)
    with pytest.raises(BuildError, match=re.escape(message)):
        generation_stops(directory, load_tokenizer(directory))


@needs_phi3
def test_phi3_inferred_ends_of_turn_build_the_declared_rows(tmp_path):
    """Phi-3-mini: no tags, EOS <|endoftext|>; its generation_config stops on <|endoftext|>,
    <|assistant|> and <|end|>, and <|end|> closes its turns."""
    assert generation_stops(PHI3, load_tokenizer(PHI3)) == ("<|assistant|>", "<|endoftext|>", "<|end|>")
    inferred = build(tmp_path, PHI3, "phi3-inferred")
    declared = build(tmp_path, PHI3, "phi3-declared", end_of_turn=["<|end|>"])
    assert inferred.data["output"]["rows_sha256"] == declared.data["output"]["rows_sha256"]
    assert inferred.data["output"]["supervised_tokens"] > 0
    assert inferred.data["build"]["end_of_turn_from"] == "generation_config"


def test_every_conversation_refused_the_same_way_is_said_with_the_fix(tmp_path):
    """A template the one-exchange check lets through but whose turns in the source all end otherwise
    (contrived: after a first message 'Hi', as the check's, it closes turns with EOS; else with <|im_end|>,
    which is not declared)."""
    directory = chatml_tokenizer(tmp_path)
    (directory / "chat_template.jinja").write_text(UNTAGGED_CHATML.replace(
        "message.content + '<|im_end|>'", "message.content + (eos_token if messages[0].content == 'Hi' "
                                          "else '<|im_end|>')"))
    with pytest.raises(BuildError) as error:
        build(tmp_path, directory, "refused", on_bad_conversation="skip")
    message = str(error.value)
    assert message.startswith("the source ran out: 0 rows kept") and "\n" not in message
    assert "no row kept, and all 294 conversations refused were refused the same way (mask_error, e.g. " in message
    assert "if '<|im_end|>' closes the template's assistant turns, set end_of_turn: ['<|im_end|>']" in message


# A template that refuses plain exchanges and builds others (issue 29): made to write an assistant turn as
# Nemotron 3's does (an empty think block in a plain answer, `<think>\n` opening the generation prompt), not its
# text. make no longer refuses it before the first row: it builds what the encoder builds.
THINK_ALWAYS = ("{%- for m in messages %}{%- if m.role == 'assistant' %}<|im_start|>assistant\n"
                "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n{% else %}<think></think>"
                "{% endif %}{{ m.content }}<|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endif %}{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


def test_a_template_that_refuses_plain_exchanges_builds_the_others(tmp_path):
    import pyarrow as pa

    from databuild.prepare import prepare
    from databuild.encode.ends import probe_problem

    directory = chatml_tokenizer(tmp_path)
    (directory / "chat_template.jinja").write_text(THINK_ALWAYS)
    rows = []
    for k in range(20):
        turn = {"role": "assistant", "content": f"Answer {k}."}
        if k % 2:
            turn["reasoning_content"] = f"Think {k}."
        rows.append({"id": f"c{k:02d}", "messages": [{"role": "user", "content": f"Question {k}?"}, turn]})
    (tmp_path / "src" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "src" / "data" / "train-00000-of-00001.parquet")
    changes = {"source": {"dir": str(tmp_path / "src"), "sha256": None}, "end_of_turn": ["<|im_end|>"],
               "rows": "all", "row_tokens": 32, "on_bad_conversation": "skip"}
    result = build(tmp_path, directory, "think", **changes)
    config = load_config(tmp_path / "think.yaml")
    with prepare(config) as prepared:
        assert probe_problem(prepared.encoder) is not None  # what refused the template before the first row
        refused = sorted(out.origin.id for out in prepared.encoder.encode_batch(list(prepared.conversations()))
                         if out.problem is not None)
    assert refused == [f"c{k:02d}" for k in range(0, 20, 2)]  # the plain ones
    manifest = result.data
    assert sorted(s["id"] for s in manifest["skipped_conversations"]) == refused
    assert manifest["counts"]["conversations_skipped"]["mask_error"] == 10
    assert manifest["output"]["supervised_tokens"] > 0
