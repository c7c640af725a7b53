"""A build stopped from outside (a scheduler's SIGTERM, a closed session's SIGHUP) cleans up as Ctrl-C does:
one line, nothing under the final names, no spill left in $TMPDIR, the shell's status for that signal; a
spill folder left by a SIGKILLed build is removed by the next build once its owner is gone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY, TINY_CONFIG, TINY_LOCK
from databuild.build import make
from databuild.sources.spill_folder import OWNER_FILE, spill_folder

# The CLI's make with a pause planted where the test stops it: PAUSE is "spill" (the first pass over the
# source, read one row a second, so that the pass would take minutes) or "encode" (after the first
# conversations are encoded, the rest of the stream in flight, held for two minutes). The marker file says
# the pause is reached. Either would outlast STOPPED_WITHIN by far if the signal did not cut it short, and
# STOPPED_WITHIN leaves a loaded machine (a parallel test run beside other work) time for the clean-up.
PAUSED_MAKE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import databuild.build as build
    import databuild.sources.spill as spill
    from databuild.cli import main

    pause, marker = sys.argv[1], Path(sys.argv[2])
    if pause == "spill":
        batches = spill.iter_batches

        def one_row_at_a_time(file, groups=None):
            for offset, batch, refused, dropped in batches(file, groups):
                for k in range(batch.num_rows):
                    marker.write_text("spilling")
                    time.sleep(1)
                    yield (offset + k, batch.slice(k, 1), {i - k: r for i, r in refused.items() if i == k},
                           type(dropped)({0: dropped[k]} if k in dropped else {}))
        spill.iter_batches = one_row_at_a_time
    else:
        buildable = build.buildable

        def paused(*args):
            for n, conversation in enumerate(buildable(*args)):
                if n == 20:
                    marker.write_text("encoding")
                    time.sleep(120)
                yield conversation
        build.buildable = paused
    sys.argv = ["databuild", *sys.argv[3:]]
    main()
""")


STOPPED_WITHIN = 60  # seconds from the signal to the exit


def stopped_make(tmp_path: Path, pause: str, signum: int, *options: str) -> tuple[subprocess.CompletedProcess, float]:
    """The paused make, stopped with `signum` sent to its whole process group (as SLURM and a terminal do)
    once it is paused; the result, and the seconds from the signal to its exit."""
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", PAUSED_MAKE, pause, str(marker), "make", str(TINY_CONFIG),
                              "--out", str(tmp_path / "out"), *options],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), child.communicate()
    time.sleep(0.3)
    sent = time.monotonic()
    os.killpg(child.pid, signum)
    stdout, stderr = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr), time.monotonic() - sent


@pytest.mark.parametrize("pause, signum, options", [
    ("spill", signal.SIGTERM, ()),
    ("encode", signal.SIGTERM, ()),
    ("encode", signal.SIGTERM, ("--workers", "2")),
    ("spill", signal.SIGHUP, ()),
    ("encode", signal.SIGINT, ()),
    ("encode", signal.SIGINT, ("--workers", "2")),
], ids=["SIGTERM mid-spill", "SIGTERM mid-encode", "SIGTERM mid-encode, two workers", "SIGHUP mid-spill",
        "SIGINT mid-encode", "SIGINT mid-encode, two workers"])
def test_a_stopped_make_cleans_up_says_so_in_one_line_and_the_next_builds_the_same_bytes(
        tiny_build, tiny_config, tmp_path, private_tmp, sixteen_cores, pause, signum, options):
    result, seconds = stopped_make(tmp_path, pause, signum, *options)
    name = signal.Signals(signum).name
    assert result.returncode == 128 + signum, result
    assert result.stderr == (f"error: databuild make {TINY_CONFIG} interrupted by {name}; nothing was written under "
                             "the final names, and its temporary files were removed\n"), result.stderr
    assert result.stdout == ""
    assert seconds < STOPPED_WITHIN  # the spill's threads stop at their next batch; an encode does not run to its end
    assert list(private_tmp.iterdir()) == []  # no spill folder, nothing else
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [TINY_LOCK]  # the lock file stays by design (publish/lock.py)
    again = make(tiny_config, out, progress=False)
    assert again.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    # Built in this process, with workers: multiprocessing's fork server, which started them, stays for
    # the next build, its socket in a folder of multiprocessing's, removed when this process exits
    # (the stopped make above shows that: nothing of it was left).
    assert [p.name for p in private_tmp.iterdir() if not p.name.startswith("pymp-")] == []


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def owned_folder(tmp: Path, name: str, **owner) -> Path:
    folder = tmp / f"databuild-{name}"
    folder.mkdir()
    (folder / "bucket-000000.arrow").write_bytes(b"x" * 100)
    (folder / OWNER_FILE).write_text(json.dumps(owner))
    return folder


def test_a_spill_folder_left_by_a_killed_build_is_removed_by_the_next_once_its_owner_is_gone(
        tiny_build, tiny_config, tmp_path, private_tmp, caplog):
    """Removed: this host's dead pid, this host's pid now another process's. Kept: a live owner, a
    folder of another host (its pid means nothing here), a folder with no owner.json (an older databuild's,
    or one being made)."""
    host = socket.gethostname()
    dead = owned_folder(private_tmp, "dead", host=host, pid=dead_pid(), started=None, boot=None)
    reused = owned_folder(private_tmp, "reused", host=host, pid=os.getpid(), started=1, boot=None)
    other_host = owned_folder(private_tmp, "other", host=host + "-elsewhere", pid=dead_pid(), started=None)
    unowned = private_tmp / "databuild-abcd1234"
    unowned.mkdir()
    with spill_folder() as live_name:
        live = Path(live_name)
        assert live.name.startswith(f"databuild-{host.replace('-', '_')}-{os.getpid()}-")
        assert json.loads((live / OWNER_FILE).read_text())["pid"] == os.getpid()
        make(tiny_config, tmp_path / "out", progress=False)
        assert not dead.exists() and not reused.exists()
        assert live.exists() and other_host.exists() and unowned.exists()
    assert f"removed {dead}: temporary files of a build stopped before it could clean up" in caplog.text
    assert sorted(p.name for p in private_tmp.iterdir()) == sorted([other_host.name, unowned.name])


def test_a_sigkilled_build_leaves_a_spill_folder_that_the_next_make_removes(tiny_build, tmp_path, private_tmp):
    result = subprocess.Popen([sys.executable, "-c", PAUSED_MAKE, "encode", str(tmp_path / "marker"), "make",
                               str(TINY_CONFIG), "--out", str(tmp_path / "out")], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "marker").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(result.pid, signal.SIGKILL)
    result.communicate()
    left = sorted(private_tmp.iterdir())  # the spill's folder, and the encoder's when worker processes ran
    assert left and all(json.loads((folder / OWNER_FILE).read_text())["pid"] == result.pid for folder in left)
    run = subprocess.run([sys.executable, "-m", "databuild", "make", str(TINY_CONFIG), "--out", str(tmp_path / "out")],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for folder in left:
        assert (f"removed {folder}: temporary files of a build stopped before it could clean up (pid {result.pid}"
                in run.stderr)
    assert list(private_tmp.iterdir()) == []
    assert (tmp_path / "out" / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()
