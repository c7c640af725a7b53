"""The render and masks against transformers' own apply_chat_template, case by case (issue 11): the
tokenizer.json's truncation and padding, the template's variables, named templates, tools and
reasoning, on the fixture tokenizers and, where present, the real Phi-3."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import PHI3, TOKENIZER_DIR, messages, needs_phi3
from databuild.encode.encoder import Encoder
from databuild.encode.render import Renderer, load_tokenizer
from databuild.errors import BuildError
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from test_masks import KWARGS, agrees_or_refuses, encode, family, supervised_runs, transformers_mask

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


def with_blocks(directory, tmp_path):
    """A copy of the tokenizer whose tokenizer.json truncates to 8 tokens and pads (BatchLongest)."""
    copy = tmp_path / f"{directory.name}-blocks"
    shutil.copytree(directory, copy)
    data = json.loads((copy / "tokenizer.json").read_text())
    pad = data["added_tokens"][0]
    data["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}
    data["padding"] = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": pad["id"], "pad_type_id": 0, "pad_token": pad["content"]}
    (copy / "tokenizer.json").write_text(json.dumps(data))
    return copy


@pytest.mark.parametrize("which", ["fixture", pytest.param("phi3", marks=needs_phi3)])
def test_truncation_and_padding_blocks_never_apply(which, tmp_path, source_conversations):
    directory = with_blocks(TOKENIZER_DIR if which == "fixture" else PHI3, tmp_path)
    tokenizer, reference = load_tokenizer(directory), load_tokenizer(directory)
    assert tokenizer.backend_tokenizer.truncation is not None  # transformers keeps them at load
    template = family("harmony", tokenizer) if which == "fixture" else family("phi3")
    renderer = Renderer(template, dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, "assistant")
    assert encoder.switched_off["truncation"]["max_length"] == 8 and encoder.switched_off["padding"]["length"] is None
    batch = [Conversation(Origin(i, i, cid, "s"), msgs) for i, (cid, msgs) in enumerate(source_conversations[:60])]
    whole = encoder.encode_batch(batch)
    for out, (_, msgs) in zip(whole, source_conversations):
        assert (out.input_ids.tolist(), out.loss_mask.tolist()) == transformers_mask(reference, msgs, template)
    for size in (1, 2, 7, 256):
        parts = [o for k in range(0, len(batch), size) for o in encoder.encode_batch(batch[k:k + size])]
        assert [o.input_ids.tolist() for o in parts] == [o.input_ids.tolist() for o in whole]


VARIABLES = ("{{ tools is defined }}|{{ tools is none }}|{{ documents is defined }}|{{ documents is none }}|"
             "{{ add_generation_prompt }}|{{ bos_token is defined }}|{{ eos_token }}|"
             "{% for m in messages %}{% for key in m %}{{ key }}={{ m[key] }};{% endfor %}{% endfor %}|"
             "{{ tools | tojson }}")


@pytest.mark.parametrize("tools", [None, [], TOOLS])
def test_the_template_sees_what_apply_chat_template_gives(tokenizer, tools):
    msgs = messages(("user", "Hi"), ("assistant", "Yo")) + (
        {"role": "assistant", "content": "x", "reasoning": "R", "extra": None},)
    ours = Renderer(VARIABLES, dict(tokenizer.special_tokens_map), KWARGS).render(msgs, tools)
    theirs = tokenizer.apply_chat_template(list(msgs), tools=tools, chat_template=VARIABLES, tokenize=False, **KWARGS)
    assert ours == theirs
    assert ours.startswith(f"True|{tools is None}|True|True|False|False|<|endoftext|>|content=Hi;role=user;")
    assert "thinking=R;role=assistant;content=x;reasoning=R;reasoning_content=R;" in ours  # None dropped


def named_tokenizer(tmp_path, layout: str):
    """The fixture tokenizer with two named templates, as a tokenizer_config.json list or as files."""
    directory = tmp_path / layout
    shutil.copytree(TOKENIZER_DIR, directory)
    (directory / "chat_template.jinja").unlink()
    default, tool_use = family("chatml"), "{{ (tools or []) | length }} tools\n" + family("chatml")
    if layout == "config list":
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config["chat_template"] = [{"name": "default", "template": default}, {"name": "tool_use", "template": tool_use}]
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        (directory / "chat_template.jinja").write_text(default)
        (directory / "additional_chat_templates").mkdir()
        (directory / "additional_chat_templates" / "tool_use.jinja").write_text(tool_use)
    return load_tokenizer(directory)


@pytest.mark.parametrize("layout", ["config list", "additional_chat_templates"])
@pytest.mark.parametrize("name", [None, "default", "tool_use"])
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_named_templates_are_chosen_as_transformers_chooses(tmp_path, layout, name, tools):
    tokenizer = named_tokenizer(tmp_path, layout)
    msgs = messages(("user", "Hi"), ("assistant", "Yo"))
    renderer = Renderer.for_tokenizer(tokenizer, KWARGS, name)
    theirs = tokenizer.apply_chat_template(list(msgs), tools=tools, chat_template=name, tokenize=False, **KWARGS)
    assert renderer.render(msgs, tools) == theirs
    assert set(renderer.pins()["sha256"]) == ({name} if name else {"default", "tool_use"})
    assert renderer.pins()["name"] == name


def test_a_missing_template_name_is_one_line(tmp_path):
    tokenizer = named_tokenizer(tmp_path, "config list")
    with pytest.raises(BuildError, match="no chat template named 'chatml' .it has: default, tool_use.; set "
                                         "chat_template_name"):
        Renderer.for_tokenizer(tokenizer, KWARGS, "chatml")


QWEN_CASES = {
    "tool call with object arguments, reasoning": (
        {"content": "Weather in Paris?", "role": "user"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need the tool.",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C, sunny"},
        {"role": "assistant", "content": "It is 18C and sunny.", "thinking": "Read the result."}),
    "tool call alone, string arguments": (
        {"content": "Weather in Rome?", "role": "user"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "content": "20C"},
        {"role": "assistant", "content": "20C in Rome."}),
    "earlier reasoning dropped by the template": (
        {"content": "1+1?", "role": "user"}, {"role": "assistant", "content": "2", "reasoning_content": "add"},
        {"content": "2+2?", "role": "user"}, {"role": "assistant", "content": "4", "reasoning_content": "add again"}),
}


@pytest.mark.parametrize("case", sorted(QWEN_CASES))
def test_tools_and_reasoning_on_a_qwen_style_template(tokenizer, case):
    """Tagged: transformers' mask exactly. Untagged: by inference, the same targets (the think opener and
    the tool-call markup included: before issue 18 they were left out), and where the template drops an
    earlier turn's reasoning, one sample per turn (history: expand)."""
    msgs = QWEN_CASES[case]
    assert agrees_or_refuses(tokenizer, msgs, "qwen_tools_think", TOOLS, tagged=True) == "equal"
    assert agrees_or_refuses(tokenizer, msgs, "qwen_tools_think", TOOLS, tagged=False) == "equal"


def test_a_field_the_template_changes_is_supervised_as_written(tokenizer):
    """Before issue 18 refused (placement could not follow the strip); the model writes the stripped form."""
    msgs = ({"content": "Hi", "role": "user"}, {"role": "assistant", "content": "Yo", "reasoning_content": "\nhm\n"})
    out = encode(tokenizer, msgs, "assistant", family("qwen_tools_think", tagged=False), end_of_turn=("<|im_end|>",))
    assert supervised_runs(tokenizer, out.input_ids, out.loss_mask) == ["<think>\nhm\n</think>\n\nYo<|im_end|>"]


def test_zero_token_render_leaves_no_segment(tokenizer):
    """A conversation the template renders to nothing: no tokens; the packer leaves it out (test_pack)."""
    skips_system = "{% for m in messages %}{% if m.role != 'system' %}{{ m.content }}<|endoftext|>{% endif %}{% endfor %}"
    out = encode(tokenizer, messages(("system", "only this")), "assistant", skips_system)
    assert out.problem is None and len(out.input_ids) == 0 and out.loss_mask.dtype == np.int8
