"""Rendering: transformers' template environment, with the clock pinned to current_date."""

import os
import subprocess
import sys

import pytest

from conftest import messages
from databuild.errors import BuildError
from databuild.encode.render import Renderer, pinned_strftime

MESSAGES = messages(("system", "Be kind."), ("user", "Hi"), ("assistant", "Hello"))
CLOCK = "{{ strftime_now('%Y-%m-%d %A %d %B %Y') }}|{% for m in messages %}{{ m.content }}{% endfor %}"


def test_same_text_as_apply_chat_template(tokenizer):
    kwargs = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
    ours = Renderer.for_tokenizer(tokenizer, kwargs).render(MESSAGES)
    theirs = tokenizer.apply_chat_template(list(MESSAGES), tokenize=False,
                                           **kwargs)
    assert ours == theirs
    assert "Current date: 2026-10-01" in ours and "Reasoning: xhigh" in ours
    assert not ours.endswith("<|start|>assistant")  # no generation prompt in a training render


def test_the_clock_is_the_pinned_date(tokenizer):
    # The fixture template falls back to strftime_now when current_date is not passed.
    renderer = Renderer(tokenizer.chat_template, {}, {"current_date": "2026-10-01"})
    renderer.variables.pop("current_date")
    assert "Current date: 2026-10-01" in renderer.render(MESSAGES)
    text = Renderer(CLOCK, {}, {"current_date": "2026-10-01"}).render(MESSAGES)
    assert text == "2026-10-01 Thursday 01 October 2026|Be kind.HiHello"


def test_a_template_reading_the_clock_needs_a_pinned_date():
    with pytest.raises(BuildError, match="reads the clock"):
        Renderer(CLOCK, {}, {}).render(MESSAGES)


@pytest.mark.parametrize("env", [{"TZ": "Pacific/Kiritimati", "LC_ALL": "de_DE.UTF-8"},
                                 {"TZ": "America/Adak", "LANG": "fr_FR.UTF-8", "PYTHONHASHSEED": "7"}])
def test_render_independent_of_zone_and_locale(env):
    code = ("import locale\ntry: locale.setlocale(locale.LC_ALL, '')\nexcept locale.Error: pass\n"
            "from databuild.encode.render import Renderer\n"
            f"print(Renderer({CLOCK!r}, {{}}, {{'current_date': '2026-10-01'}}).render(({{'content': 'x', 'role': 'user'}},)))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "2026-10-01 Thursday 01 October 2026|x"


def test_pinned_strftime_formats():
    assert pinned_strftime("2024-02-29")("%d %b %Y (%a)") == "29 Feb 2024 (Thu)"
