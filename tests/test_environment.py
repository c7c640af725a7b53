"""A hostile machine: $TMPDIR full during the spill, an output directory that is full or read-only, a
source changed or deleted while the build reads it. Each ends in one line, no traceback, nothing
under a final name, and the previous build (if any) intact.

A full disk is the kernel refusing a write: RLIMIT_FSIZE in a child process makes every write past
the limit fail with EFBIG inside the real write(2) calls of pyarrow and Python, on any Linux and
without privileges (a tiny loop-mounted or tmpfs filesystem needs root and mount rights CI rarely has).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, SOURCE_DIR, TINY, TINY_LOCK, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.encode.encoder import Encoder
from databuild.errors import BuildError
from databuild.verification import gather, verify

MAKE = textwrap.dedent("""
    import sys
    import databuild.build as build
    from databuild.cli import main

    build.make.__kwdefaults__["window"] = int(sys.argv[3])  # small buckets: spill files smaller than the rows
    sys.argv = ["databuild", "make", sys.argv[1], "--out", sys.argv[2], *sys.argv[4:]]
    main()
""")


def make_limited(config: Path, out: Path, tmpdir: Path, file_bytes: int, window: int = 8192, *options: str):
    """`databuild make` in a child whose files cannot grow past file_bytes (`options`: make's, after --out)."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    return subprocess.run([sys.executable, "-c", MAKE, str(config), str(out), str(window), *options], cwd=REPO, text=True,
                          capture_output=True, preexec_fn=limit,
                          env={**os.environ, "TMPDIR": str(tmpdir), "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.fixture
def previous(tiny_build, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for path in (tiny_build.parquet, tiny_build.manifest):
        shutil.copyfile(path, out / path.name)
    return out


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    return stderr.strip()


def intact(out: Path, tiny_build) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted([TINY_LOCK, tiny_build.parquet.name,
                                                           tiny_build.manifest.name])
    parquet = out / tiny_build.parquet.name
    assert parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert verify(parquet, gather(parquet)).failures == []


def test_tmpdir_full_during_the_spill(tiny_build, previous, tmp_path):
    config = write_config(tmp_path / "c.yaml", seed=7)  # stale: the build there must be replaced, and is not
    (tmp_path / "tmp").mkdir()
    result = make_limited(config, previous, tmp_path / "tmp", 4096)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith(f"error: {tmp_path / 'tmp'}/databuild-") and "spilling the source failed (" in line
    assert "File too large" in line and "free space in $TMPDIR" in line
    assert list((tmp_path / "tmp").iterdir()) == []  # the spill's directory is gone too
    intact(previous, tiny_build)


def test_tmpdir_full_with_encode_processes(tiny_build, previous, tmp_path, sixteen_cores):
    # With two encode processes the encoder they read (~100 kB here) goes into $TMPDIR too: that write said
    # only "error: No space left on device" (here, "File too large"), no folder, no fix. The spill's buckets
    # are kept small (8 conversations each), so that the encoder's is the write that fails.
    config = write_config(tmp_path / "c.yaml", seed=7)
    (tmp_path / "tmp").mkdir()
    result = make_limited(config, previous, tmp_path / "tmp", 50_000, 8, "--workers", "2")
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert re.match(rf"error: {tmp_path / 'tmp'}/databuild-[^/]+/encoder.pickle: writing the encoder for the encode "
                    r"processes failed \(File too large\); the build needs free space in \$TMPDIR: free some, or point "
                    r"TMPDIR at a larger disk$", line), line
    assert list((tmp_path / "tmp").iterdir()) == []
    intact(previous, tiny_build)


def test_output_directory_full_while_writing_the_rows(tiny_build, previous, tmp_path):
    config = write_config(tmp_path / "c.yaml", seed=7, rows=80)  # rows of ~35 kB; no conversation over 17 kB
    (tmp_path / "tmp").mkdir()
    result = make_limited(config, previous, tmp_path / "tmp", 24_000, window=1)  # buckets fit, the rows do not
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert re.match(rf"error: {previous}/{TINY}\.parquet\.\d+-[0-9a-f]{{8}}\.partial: writing the rows failed \(", line)
    assert "File too large" in line and line.endswith("nothing published")
    intact(previous, tiny_build)


def read_only(directory: Path) -> None:
    """The directory made read-only for this process: by its mode, or for root (whom modes do not stop) by a
    read-only bind mount; skipped where neither is possible."""
    directory.chmod(0o555)
    try:
        (directory / "probe").touch()
    except PermissionError:
        return
    (directory / "probe").unlink()
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(directory), str(directory)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot make a directory read-only here: root, and no mount rights")


@pytest.fixture
def read_only_out(previous):
    read_only(previous)
    yield previous
    subprocess.run(["umount", str(previous)], capture_output=True)
    previous.chmod(0o755)


def test_an_up_to_date_build_in_a_read_only_directory_is_used(tiny_config, read_only_out):
    result = make(tiny_config, read_only_out, progress=False)  # no lock is taken to find it up to date
    assert result.built is None


def test_a_read_only_output_directory_is_one_line(tmp_path, read_only_out):
    config = write_config(tmp_path / "c.yaml", seed=7)
    result = subprocess.run([sys.executable, "-m", "databuild", "make", str(config), "--out", str(read_only_out)],
                            cwd=REPO, text=True, capture_output=True)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert f"{read_only_out}/.{TINY}.lock: cannot take the lock" in line and "must be writable" in line


@pytest.fixture
def own_source(tmp_path):
    shutil.copytree(SOURCE_DIR, tmp_path / "src")
    return load_config(write_config(tmp_path / "c.yaml", source={"dir": str(tmp_path / "src")}, seed=7))


@pytest.mark.parametrize("what, message", [
    ("grown", r"the source file changed while the build read it \(\d+ bytes when it began, \d+ now\)"),
    ("rewritten", r"the source file changed while the build read it \(sha256 [0-9a-f]{64} when it began, "),
    ("deleted", "the source file was deleted while the build read it")])
def test_a_source_changed_or_deleted_while_the_build_reads_it_is_refused(tiny_build, previous, own_source,
                                                                       monkeypatch, what, message):
    """A size change or a deletion is refused whenever it happens before the end; a rewrite keeping
    size and mtime, once the source pass has read the file (the hash taken again after it tells)."""
    from databuild.sources.spill import Spill

    target = sorted((own_source.sources[0].dir / "data").glob("*.parquet"))[0]

    def change():
        if what == "grown":
            target.write_bytes(target.read_bytes() + b"\0")
        elif what == "rewritten":  # same size, same mtime: only the bytes tell
            stat, data = target.stat(), bytearray(target.read_bytes())
            data[len(data) // 2] ^= 0xFF
            target.write_bytes(bytes(data))
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        else:
            target.unlink()

    if what == "rewritten":
        check_and_spill = Spill.check_and_spill

        def read_then_changed(self, *args, **kwargs):
            found = check_and_spill(self, *args, **kwargs)
            change()
            return found

        monkeypatch.setattr(Spill, "check_and_spill", read_then_changed)
    else:
        original, calls = Encoder.finish, {"n": 0}

        def finish(self, *args):
            calls["n"] += 1
            if calls["n"] == 2:  # mid-stream, after the source was hashed, checked and spilled
                change()
            return original(self, *args)

        monkeypatch.setattr(Encoder, "finish", finish)
    with pytest.raises(BuildError, match=f"^data/{target.name}: {message}"):
        make(own_source, previous, batch_size=8, progress=False)
    intact(previous, tiny_build)


def test_a_rewrite_before_another_pass_over_the_source_is_refused(tiny_build, previous, own_source, monkeypatch):
    """The hash taken while the build encodes stands for the source only if nothing read it after: a
    stream that outruns the spill reads it again, and then the source is hashed again at the end."""
    target = sorted((own_source.sources[0].dir / "data").glob("*.parquet"))[0]
    original, calls = Encoder.finish, {"n": 0}

    def finish(self, *args):
        calls["n"] += 1
        if calls["n"] == 2:  # after the first pass and the hash that follows it had their chance to run
            stat, data = target.stat(), target.read_bytes()
            time.sleep(0.5)
            target.write_bytes(data[:4] + data[4:].replace(b"the", b"THE", 1))
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        return original(self, *args)

    monkeypatch.setattr(Encoder, "finish", finish)
    with pytest.raises(BuildError, match=f"^data/{target.name}: the source file changed while the build read it "
                                         r"\(sha256 "):
        make(own_source, previous, batch_size=8, window=7, spill_prefix=1, progress=False)
    intact(previous, tiny_build)
