"""A chat template that never ends: each render has a time limit (render_timeout), and a render past it stops
the build in one line naming the conversation, in the build's process and in worker processes alike, with
nothing written and nothing skipped (a skip would make the rows depend on the machine's speed)."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import pytest

from conftest import TINY_LOCK, TOKENIZER_DIR, write_config
from databuild.errors import BuildError
from source_folders import OK_ROWS, write_chat_source

def run_cli(*args):
    """The command line, stopped after two minutes: without the limit it ran for good."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "databuild", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)


# Nested ranges: Jinja's sandbox bounds each range to 100,000 items, not their product (10^10 iterations).
FOREVER = "{%- for i in range(100000) -%}{%- for j in range(100000) -%}{%- endfor -%}{%- endfor -%}"


def endless_tokenizer(tmp_path: Path, when: str = '"answer 1" in message.content', tagged: bool = True) -> dict:
    """The fixture tokenizer whose template never ends on an assistant message where `when` holds (every one,
    with "true"), as the config's `tokenizer` block; without its generation tags unless `tagged`."""
    directory = tmp_path / "endless-tokenizer"
    shutil.copytree(TOKENIZER_DIR, directory)
    template = (TOKENIZER_DIR / "chat_template.jinja").read_text().replace(
        '{{- "<|start|>assistant<|channel|>final<|message|>" -}}',
        f'{{%- if {when} -%}}{FOREVER}{{%- endif -%}}{{{{- "<|start|>assistant<|channel|>final<|message|>" -}}}}')
    assert template != (TOKENIZER_DIR / "chat_template.jinja").read_text()
    if not tagged:
        template = template.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    (directory / "chat_template.jinja").write_text(template)
    pins = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in ("tokenizer.json", "chat_template.jinja")}
    return {"dir": str(directory), "sha256": pins}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_render_that_never_ends_stops_the_build_in_one_line(tmp_path, sixteen_cores, workers):
    config = write_config(tmp_path / "c.yaml", source={"dir": str(write_chat_source(tmp_path, OK_ROWS))},
                          tokenizer=endless_tokenizer(tmp_path), rows=4, on_bad_conversation="skip")
    out = tmp_path / "out"
    result = run_cli("make", str(config), "--out", str(out), "--workers", workers, "--render-timeout", "1")
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert (r"error: conversation 'ok-1" in result.stderr and "(source row 1" in result.stderr
            and "a render of it took longer than 1 s (render_timeout)" in result.stderr
            and "raise render_timeout in the config or --render-timeout; nothing was written" in result.stderr)
    assert [p.name for p in out.iterdir()] == [TINY_LOCK]  # skip does not apply: nothing written


def test_the_limit_is_the_configs(tmp_path):
    from databuild.build import make
    from databuild.config import load_config

    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(write_chat_source(tmp_path, OK_ROWS))},
                                      tokenizer=endless_tokenizer(tmp_path), rows=4, render_timeout=0.5))
    assert config.render_timeout == 0.5
    with pytest.raises(BuildError, match=r"took longer than 0.5 s \(render_timeout\)"):
        make(config, tmp_path / "out", progress=False)


def test_the_inference_renders_are_limited_too(tmp_path):
    # The `assistant` strategy on a template without generation tags renders each turn's prompt too
    # (encode/inference.py): a template that never ends is stopped there, naming the conversation.
    config = write_config(tmp_path / "c.yaml", tokenizer=endless_tokenizer(tmp_path, "true", tagged=False),
                          loss_mask="assistant",
                          render_timeout=1)
    result = run_cli("make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: conversation ") and "took longer than 1 s (render_timeout)" in result.stderr


@pytest.mark.parametrize("value", [0, -1, "1", True, float("nan")])
def test_a_bad_limit_is_refused(tmp_path, value):
    from databuild.config import load_config

    with pytest.raises(BuildError, match="key 'render_timeout' = .*: expected a number of seconds above 0"):
        load_config(write_config(tmp_path / "c.yaml", render_timeout=value))


def test_one_long_operation_in_c_is_stopped_at_the_limit_too():
    """A render whose time goes into one operation of the interpreter's C code, not into the template's
    loops: a power of a big integer (~10^8 digits), minutes of CPython's long arithmetic, which checks for
    signals as it goes. On the main thread, where every executor renders, the limit stops it there."""
    from databuild.encode import transformers_private
    from databuild.encode.render_limit import RenderTimedOut, time_limit

    source = "{{ (10 ** (n * 10 ** 8)) % 7 }}"  # n: not a constant, so Jinja cannot fold it when compiling
    template = transformers_private.template_environment(source).from_string(source)
    started = time.perf_counter()
    with pytest.raises(RenderTimedOut), time_limit(0.5):
        template.render(n=1)
    assert time.perf_counter() - started < 5


def test_a_render_within_the_limit_is_not_disturbed(tokenizer):
    """The timer is disarmed after each render, and a SIGALRM outside a render raises nothing."""
    import os
    import signal

    from databuild.encode.render import Renderer

    renderer = Renderer.for_tokenizer(tokenizer, {"current_date": "2026-10-01"}, timeout=0.05)
    for _ in range(20):
        renderer.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    time.sleep(0.1)  # past every timer that could still be set
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    os.kill(os.getpid(), signal.SIGALRM)  # handled here, between two steps of this test: nothing raised


def test_a_build_on_a_thread_of_its_own_is_bounded_too(tmp_path):
    """Signals reach only the main thread: a build the Python API makes on another thread (a notebook's, a
    service's pool) has its renders bounded by the watchdog, and stops with the same line."""
    import threading

    from databuild.build import make
    from databuild.config import load_config

    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(write_chat_source(tmp_path, OK_ROWS))},
                                      tokenizer=endless_tokenizer(tmp_path), rows=4, render_timeout=0.5))
    raised = []

    def build():
        try:
            make(config, tmp_path / "out", progress=False)
        except BaseException as exc:  # noqa: BLE001 (what reaches the thread is what is checked)
            raised.append(exc)

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the render on a thread of its own was not bounded"
    assert len(raised) == 1 and isinstance(raised[0], BuildError), raised
    assert "a render of it took longer than 0.5 s (render_timeout)" in str(raised[0])


def test_renders_on_another_thread_within_the_limit_are_not_disturbed(tokenizer):
    """The watchdog fires only while its render runs: after renders that ended in time, nothing is raised
    on the thread later, however close to the limit they ended."""
    import threading

    from databuild.encode.render import Renderer

    renderer = Renderer.for_tokenizer(tokenizer, {"current_date": "2026-10-01"}, timeout=0.002)
    errors: list[BaseException] = []

    def renders():
        try:
            for _ in range(200):
                try:
                    renderer.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
                except BaseException as exc:  # noqa: BLE001 (a render may take longer than 2 ms under load)
                    if type(exc).__name__ != "RenderTimedOut":
                        raise
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:  # bytecodes, where a late exception would be raised
                pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=renders)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and errors == []
