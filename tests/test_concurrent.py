"""Many processes, one build: concurrent makes into one directory, reuse of an up-to-date build, what
makes a build stale, --force, a builder killed holding the lock, a waiter on a terminal, and
concurrent recipe write-backs."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from filelock import FileLock
from ruamel.yaml import YAML

from conftest import REPO, TINY, TINY_CONFIG, TINY_LOCK, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.publish.lock import lock_path
from databuild.verification import gather, verify

BUILD_FILES = sorted([TINY_LOCK, f"{TINY}.parquet", f"{TINY}.manifest.json"])


def databuild(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "databuild", *map(str, args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def stamps(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes()) for p in directory.iterdir()}


def test_four_concurrent_makes_one_build_each_round(tiny_build, tmp_path):
    """Round 1 into an empty directory, round 2 over a build of another seed (stale: replaced), round 3 over the
    finished build: every process exits 0, and one verified build stands, with its lock and nothing else."""
    out = tmp_path / "out"
    configs = {1: TINY_CONFIG, 2: write_config(tmp_path / f"{TINY}.yaml", seed=7), 3: write_config(
        tmp_path / "again.yaml", seed=7)}
    for round_, config in configs.items():
        processes = [databuild("make", config, "--out", out) for _ in range(4)]
        outputs = [p.communicate(timeout=120) for p in processes]
        assert [p.returncode for p in processes] == [0] * 4, outputs
        assert names(out) == BUILD_FILES
        parquet = out / f"{TINY}.parquet"
        assert verify(parquet, gather(parquet)).failures == []
        firsts = [stdout.splitlines()[0] for stdout, _ in outputs]
        built = [line for line in firsts if line.startswith("built")]
        assert len(built) == (0 if round_ == 3 else 1), firsts  # one builds; the others find its build
        assert all(line.startswith("up to date") for line in firsts if not line.startswith("built")), firsts
        if round_ == 1:
            assert parquet.read_bytes() == tiny_build.parquet.read_bytes()
            assert built == ["built: no build there yet"]
        if round_ == 2:
            assert built == ["built: build.seed: 42 in the build's manifest, 7 now"]
            assert json.loads((out / f"{TINY}.manifest.json").read_text())["build"]["seed"] == 7


def copy_of(built, out: Path) -> Path:
    """`out` holding a copy of the build `built` (its file and manifest): a build there, without a make."""
    out.mkdir()
    for path in (built.parquet, built.manifest):
        (out / path.name).write_bytes(path.read_bytes())
    return out


def test_an_up_to_date_build_is_left_untouched(tiny_build, tiny_config, tmp_path):
    out = copy_of(tiny_build, tmp_path / "out")
    before = stamps(out)
    result = make(tiny_config, out, progress=False)
    assert result.built is None and result.waited == 0
    assert stamps(out) == before  # same bytes, same files (inodes), same times; not even a lock file taken
    assert result.data == json.loads(tiny_build.manifest.read_text())


def test_force_rebuilds_and_replaces(tiny_build, tiny_config, tmp_path):
    out = copy_of(tiny_build, tmp_path / "out")
    inode = (out / f"{TINY}.parquet").stat().st_ino
    result = make(tiny_config, out, progress=False, force=True)
    assert result.built == "--force given"
    assert result.parquet.stat().st_ino != inode  # a new file, renamed over the old one
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()


def edit_manifest(out: Path, change) -> None:
    path = out / f"{TINY}.manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2))


@pytest.mark.parametrize("change, reason", [
    (lambda m: m["build"].pop("row_tokens"), "build.row_tokens: absent from the build's manifest, 512 now"),
    (lambda m: m["build"].update(shuffle="none"), "build.shuffle: 'none' in the build's manifest, absent now"),
    (lambda m: m["build"]["packing"].update(policy="bfd"),
     "build.packing.policy: 'bfd' in the build's manifest, 'concat' now"),
    (lambda m: m["build"]["template_kwargs"].update(current_date="2025-01-01"),
     "build.template_kwargs.current_date: '2025-01-01' in the build's manifest, '2026-10-01' now"),
    (lambda m: m["inputs"]["sources"][0]["files"][1].update(sha256="0" * 64),
     "inputs.sources[0].files[1].sha256: '0000000000"),
    (lambda m: m["inputs"]["tokenizer"]["sha256"].pop("chat_template.jinja"),
     "inputs.tokenizer.sha256.chat_template.jinja: absent from the build's manifest"),
    (lambda m: m["versions"].update(pyarrow="1.0.0"), "versions.pyarrow: '1.0.0' in the build's manifest, '"),
    (lambda m: m["output"].update(rows_sha256="0" * 64), "it does not verify: rows_sha256: expected 0000"),
], ids=["a setting added since", "a setting removed since", "the packing policy", "template kwargs", "a source hash", "a tokenizer file",
        "a library version", "the file does not verify"])
def test_a_stale_build_is_rebuilt_and_says_why(tiny_build, tiny_config, tmp_path, change, reason):
    out = copy_of(tiny_build, tmp_path / "out")
    edit_manifest(out, change)
    result = make(tiny_config, out, progress=False)
    assert result.built.startswith(reason), result.built
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert result.manifest.read_bytes() == tiny_build.manifest.read_bytes()


# How long a holder keeps the lock once the waiter shows it waits: the line comes at once, and a wait
# under 0.05 s is one the CLI does not report ("built after waiting").
WAITED = 0.5


def make_on_a_terminal(out: Path) -> tuple[subprocess.Popen, int]:
    """`databuild make` of the tiny config into `out`, its stderr a terminal 200 columns wide (where it shows
    what it waits for): (the process, the terminal's other end, to read and close)."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    waiter = subprocess.Popen([sys.executable, "-m", "databuild", "make", TINY, "--out", str(out)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=terminal, text=True)
    os.close(terminal)
    return waiter, main


def read_until(terminal: int, expected: str, seconds: float = 120) -> str:
    """What the terminal shows until `expected` is there whole (a terminal may hand it over in pieces)."""
    seen = b""
    deadline = time.monotonic() + seconds
    while expected.encode() not in seen and time.monotonic() < deadline:
        if select.select([terminal], [], [], 1)[0]:
            seen += os.read(terminal, 4096)
    return seen.decode(errors="replace")


HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
Path(sys.argv[2]).write_text("held")
time.sleep(600)
"""


def test_a_holder_killed_with_sigkill_does_not_block_the_next_make(tiny_build, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, lock_path(out / f"{TINY}.parquet"), marker])
    deadline = time.monotonic() + 120  # a poll: a loaded machine may take long to get there
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    # Its waiting line on a terminal says it reached the lock (pinning its inputs first can take seconds on a
    # loaded machine: a holder killed before then would test no wait at all).
    waiter, terminal = make_on_a_terminal(out)
    seen = read_until(terminal, f"waiting for another process's make of {TINY}")
    time.sleep(WAITED)
    assert waiter.poll() is None, seen  # it waits for the holder...
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    stdout, _ = waiter.communicate(timeout=120)  # ...and builds once the kernel has dropped the dead one's lock
    os.close(terminal)
    assert waiter.returncode == 0
    assert stdout.startswith("built after waiting "), stdout
    assert (out / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()


def test_a_waiting_make_says_on_a_terminal_which_build_it_waits_for_and_since_when(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = FileLock(lock_path(out / f"{TINY}.parquet"))
    lock.acquire()
    os.utime(lock.lock_file, (0, time.time() - 3600))  # the holder took it an hour ago
    since = time.strftime("%H:%M:%S", time.localtime(os.stat(lock.lock_file).st_mtime))
    waiter, terminal = make_on_a_terminal(out)
    expected = f"waiting for another process's make of {TINY} into {out} (it holds the lock since {since})"
    seen = read_until(terminal, expected)
    time.sleep(WAITED)
    lock.release()
    stdout, _ = waiter.communicate(timeout=120)
    os.close(terminal)
    assert waiter.returncode == 0
    assert expected in seen
    assert stdout.startswith("built after waiting"), (stdout, seen)


WRITE_BACK = """
import sys
from pathlib import Path
from databuild.publish.recipe import update_recipe
for _ in range(5):
    update_recipe(Path(sys.argv[1]), Path(sys.argv[2]), repin=True)
"""


def test_concurrent_recipe_write_backs_lose_nothing(tiny_build, tmp_path):
    """Four processes write two different builds' values into one recipe, five times each: the recipe always
    parses, keeps its comments and other keys, and holds one build's values whole, never a mix."""
    other = make(load_config(write_config(tmp_path / "c.yaml", seed=7)), tmp_path / "other", progress=False)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("# the recipe\nworkload:\n  steps: 10  # keep\n  dataset:\n    name: x\n    build:\n"
                      "      seed: 42\nother: 1\n")
    writers = [subprocess.Popen([sys.executable, "-c", WRITE_BACK, recipe, manifest], cwd=REPO)
               for manifest in (tiny_build.manifest, other.manifest) * 2]
    assert [w.wait(timeout=120) for w in writers] == [0] * 4
    text = recipe.read_text()
    assert text.startswith("# the recipe\n") and "  steps: 10  # keep\n" in text and text.endswith("other: 1\n")
    dataset = YAML(typ="safe", pure=True).load(text)["workload"]["dataset"]
    pinned = {(tiny_build.data["output"]["rows_sha256"], 42), (other.data["output"]["rows_sha256"], 7)}
    assert (dataset["rows_sha256"], dataset["build"]["seed"]) in pinned
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob(".*.partial"))
