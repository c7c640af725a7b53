"""A script that builds at its top level, without `if __name__ == "__main__":`, with encode processes:
multiprocessing runs the script again in each process it starts (the tokenizer's loader, the workers), where
it would build again and wait for the output's lock held by the build that waits for it, both for good.
The build fails instead, in seconds, saying the fix; the guarded script builds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO, TINY, TINY_CONFIG

SCRIPT = """
import sys
from pathlib import Path
from databuild.config import load_config
from databuild.build import make
{guard}make(load_config(Path(sys.argv[1])), Path(sys.argv[2]), offline=True, workers=2, progress=False, force=True)
{guard}print("built", flush=True)
"""
API_SCRIPT = """
import sys
import databuild
{guard}databuild.make(sys.argv[1], sys.argv[2], offline=True, workers=2)
{guard}print("built", flush=True)
"""
GUARD = 'if __name__ == "__main__":\n    '
ADVICE = 'put the script\'s build under `if __name__ == "__main__":`'
TIMEOUT = 120  # the hang it replaces lasted for good; a build of the fixtures takes seconds


def run_script(tmp_path, text: str, guarded: bool, config=TINY_CONFIG) -> tuple[subprocess.CompletedProcess, float]:
    script = tmp_path / ("guarded.py" if guarded else "unguarded.py")
    script.write_text(text.format(guard=GUARD if guarded else ""))
    # 4 cores: the build runs encode processes (executors/cores.py), whatever this machine has
    env = {**os.environ, "DATABUILD_CORES": "4", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script), str(config), str(tmp_path / "out")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    return done, time.monotonic() - started


def published(out, name: str = TINY) -> list[str]:
    return sorted(p.name for p in out.glob(f"{name}*") if not p.name.startswith("."))  # the lock file stays


def left_in(tmp) -> list[str]:
    """What the build left in its $TMPDIR: its spill and encoder folders (not the fork server's socket folder,
    multiprocessing's own, which may still be going when the build's process has exited)."""
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith("pymp-"))


def test_an_unguarded_script_fails_at_once_naming_the_guard(tmp_path, private_tmp):
    """Each process the build starts refuses to build again (refuse_in_starting_child), and the build that
    started it fails on its end (fork_server.ended_early), with the likely cause: nothing published, no
    temporary files left (private_tmp: the processes' $TMPDIR)."""
    done, seconds = run_script(tmp_path, SCRIPT, guarded=False)
    assert done.returncode != 0 and "built" not in done.stdout, done.stdout + done.stderr
    assert ADVICE in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]  # the build's own error, what the script dies of
    assert last.startswith("databuild.errors.BuildError: ") and "ended" in last, done.stderr
    assert "unguarded.py builds outside `if __name__ == \"__main__\":`" in last, done.stderr
    assert seconds < 60, f"{seconds:.1f} s"
    assert published(tmp_path / "out") == []
    assert left_in(private_tmp) == []


def test_a_guarded_script_builds(tmp_path):
    """The same script under the guard: the processes it starts run it again, as ever, and build nothing."""
    done, _ = run_script(tmp_path, SCRIPT, guarded=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "built"
    assert published(tmp_path / "out") == [f"{TINY}.manifest.json", f"{TINY}.parquet"]


def test_an_unguarded_preference_script_fails_at_once_naming_the_guard(tmp_path, private_tmp):
    """The preference build's workers (executors/pairs.py) refuse in the same way, through the package's
    make (api.py); the build's own error names the cause."""
    config = REPO / "configs" / "muse-spark-tiny-preference-v1.yaml"
    done, seconds = run_script(tmp_path, API_SCRIPT, guarded=False, config=config)
    assert done.returncode != 0 and "built" not in done.stdout, done.stdout + done.stderr
    assert ADVICE in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("databuild.errors.BuildError: an encode process ended: "), done.stderr
    assert seconds < 60, f"{seconds:.1f} s"
    assert published(tmp_path / "out", config.stem) == []
    assert left_in(private_tmp) == []


def test_only_a_starting_child_is_refused(monkeypatch):
    """The refusal reads multiprocessing's flag of a child still running the main script (spawn._main sets it
    for that while only): in any other process (this one, a worker once started) it does nothing."""
    import multiprocessing

    from databuild.errors import BuildError
    from databuild.executors.fork_server import refuse_in_starting_child

    refuse_in_starting_child("make()")
    monkeypatch.setattr(multiprocessing.process.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(BuildError, match=r"^make\(\) was called in a process that multiprocessing started .*"
                                         + re.escape(ADVICE)):
        refuse_in_starting_child("make()")
