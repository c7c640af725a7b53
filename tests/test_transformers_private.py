"""The private transformers and Jinja APIs (databuild/encode/transformers_private.py): each still
exists at the pinned versions and does what databuild relies on."""

from __future__ import annotations

import re
from importlib import metadata

from conftest import REPO

from databuild.encode import transformers_private as private


def test_the_pins_the_module_names_are_the_lock_and_the_installed_versions():
    lock = (REPO / "requirements.lock").read_text()
    named = re.findall(r"\b(transformers|Jinja2)==([\w.]+)", private.__doc__)
    assert {name for name, _ in named} == {"transformers", "Jinja2"}
    for name, version in named:
        assert f"\n{name}=={version}\n" in lock
        assert metadata.version(name) == version


def test_reasoning_fields_are_transformers_own():
    from transformers.utils.chat_template_utils import _REASONING_FIELDS

    from databuild.records.conversation import REASONING_FIELDS

    assert tuple(REASONING_FIELDS) == tuple(_REASONING_FIELDS)


def test_messages_lose_their_none_keys_and_have_reasoning_aliased():
    messages = [{"role": "user", "content": "hi", "name": None},
                {"role": "assistant", "content": "yes", "thinking": "because", "tool_calls": None}]
    prepared = private.template_messages(messages)
    assert prepared[0] == {"role": "user", "content": "hi"}
    assert prepared[1]["thinking"] == prepared[1]["reasoning_content"] == "because"
    assert "tool_calls" not in prepared[1] and messages[1]["tool_calls"] is None  # a copy, the input untouched
    assert private.template_tools([{"type": "function", "function": {"name": "f"}}]) == [
        {"type": "function", "function": {"name": "f"}}]


def test_blocks_render_with_shared_variables_and_the_tracker_records_generation_spans():
    text = "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}" \
           "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}{{ tail }}"
    template = private.template_environment(text).from_string(text)
    variables = {**template.globals, "messages": [{"role": "user", "content": "q"},
                                                  {"role": "assistant", "content": "answer"}], "tail": "."}
    assert "".join(private.render_blocks(template, variables)) == "<user>q<assistant>answer."
    rendered, spans = [], []
    with private.generation_tracker(template, rendered, spans):
        for block in private.render_blocks(template, variables):
            rendered.append(block)
    assert "".join(rendered) == "<user>q<assistant>answer." and spans == [(18, 24)]
