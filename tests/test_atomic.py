"""A build is published whole or not at all: crashes leave nothing, or the previous complete build,
under the final names; a rerun then writes identical bytes."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import REPO, TINY, TINY_CONFIG, TINY_LOCK, write_config
import databuild.rowfile.write as write
import databuild.utils.files as files_module
from databuild.build import make
from databuild.cli import main
from databuild.encode.encoder import Encoder
from databuild.errors import BuildError
from databuild.verification import gather, verify


def names(directory):
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@pytest.fixture
def previous(tiny_build, tmp_path):
    """An output directory holding a previous complete build."""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copyfile(tiny_build.parquet, out / tiny_build.parquet.name)
    shutil.copyfile(tiny_build.manifest, out / tiny_build.manifest.name)
    return out


def still_the_previous_build(out, tiny_build):
    assert names(out) == sorted([TINY_LOCK, tiny_build.parquet.name, tiny_build.manifest.name])
    parquet = out / tiny_build.parquet.name
    assert parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert verify(parquet, gather(parquet)).failures == []


def test_exception_after_k_batches(tiny_config, tiny_build, previous, tmp_path, monkeypatch):
    calls = {"n": 0}
    original = Encoder.finish

    def failing(self, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected failure in batch 3")
        return original(self, *args)

    monkeypatch.setattr(Encoder, "finish", failing)
    for out in (tmp_path / "fresh", previous):
        calls["n"] = 0
        with pytest.raises(RuntimeError, match="injected"):
            make(tiny_config, out, batch_size=8, progress=False, force=True)
    assert names(tmp_path / "fresh") == [TINY_LOCK]
    still_the_previous_build(previous, tiny_build)
    monkeypatch.undo()
    rerun = make(tiny_config, previous, progress=False, force=True)
    assert rerun.parquet.read_bytes() == tiny_build.parquet.read_bytes()


def test_disk_full_while_writing(tiny_build, previous, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "rows.parquet.partial")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    result = CliRunner().invoke(main, ["make", TINY, "--out", str(previous), "--force"])
    assert result.exit_code == 1
    assert re.fullmatch(rf"error: {previous}/{TINY}\.parquet\.\d+-[0-9a-f]{{8}}\.partial: writing the rows failed "
                        r"\(No space left on device\); nothing published", result.output.strip())
    still_the_previous_build(previous, tiny_build)


def test_row_groups_queued_for_the_writer_are_written_in_order(tiny_config, tiny_build, tmp_path, monkeypatch):
    """Ten row groups of four rows, handed to the writer's thread one at a time or up to four waiting: the
    same file either way, its rows those of the one-group build, its parquet_sha256 and parquet_bytes those
    of the file's bytes (hashed as the file grew, synced on the way); a write that fails with groups still
    queued behind it stops the build and leaves no file under either name."""
    monkeypatch.setattr(write, "ROW_GROUP_TOKENS", 512 * 4)
    # the file hashed and synced as it grows (utils.files.GrowingFile): a sync every few groups here, each
    # through the bytes the writer had appended when it asked (its size then, not when the thread ran it)
    synced, syncs = [], []
    monkeypatch.setattr(files_module, "SYNC_BYTES", 4096)
    monkeypatch.setattr(files_module, "_fdatasync", lambda fd: syncs.append(fd))
    catch_up = files_module.GrowingFile._catch_up

    def recorded(self, sync, size=None):
        before = len(syncs)
        catch_up(self, sync, size)
        synced.extend([self._synced] * (len(syncs) - before))

    monkeypatch.setattr(files_module.GrowingFile, "_catch_up", recorded)
    files, syncs_at = {}, {}
    for queued in (1, 4):
        monkeypatch.setattr(write, "GROUPS_QUEUED", queued)
        synced.clear()
        grouped = make(tiny_config, tmp_path / f"queued-{queued}", progress=False)
        # synced while written, never past the file's end, and more than once: not all at the end
        assert len(synced) >= 2 and synced == sorted(synced) and synced[-1] < grouped.parquet.stat().st_size
        syncs_at[queued] = list(synced)
        assert pq.ParquetFile(grouped.parquet).metadata.num_row_groups == 10
        assert grouped.data["output"]["rows_sha256"] == tiny_build.data["output"]["rows_sha256"]
        files[queued] = grouped.parquet.read_bytes()
        assert (grouped.data["output"]["parquet_sha256"], grouped.data["output"]["parquet_bytes"]) == (
            hashlib.sha256(files[queued]).hexdigest(), len(files[queued]))
    assert files[1] == files[4] and syncs_at[1] == syncs_at[4]  # where it syncs follows the writes alone
    written, original = [], pq.ParquetWriter.write_table

    def failing_third(self, table, **kwargs):
        written.append(table.num_rows)
        if len(written) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, table, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", failing_third)
    with pytest.raises(BuildError, match="writing the rows failed"):
        make(tiny_config, tmp_path / "failed", progress=False)
    assert names(tmp_path / "failed") == [TINY_LOCK] and written == [4, 4, 4]


def test_a_growing_file_is_hashed_as_the_whole_file(tmp_path, monkeypatch):
    """GrowingFile, caught up after each append (some of them spanning its read chunks), gives the sha256
    and size of the whole file as hashlib does; a file that another writer shortened under it is refused."""
    monkeypatch.setattr(files_module, "FILE_CHUNK", 1000)
    path, appended = tmp_path / "growing", b""
    path.write_bytes(b"")
    grown = files_module.GrowingFile(path)
    try:
        with open(path, "ab") as handle:
            for k in range(1, 40):
                chunk = bytes([k]) * (k * 97)
                handle.write(chunk)
                handle.flush()
                appended += chunk
                grown.caught_up()
        assert grown.finished() == (hashlib.sha256(appended).hexdigest(), len(appended))
    finally:
        grown.close()
    shortened = files_module.GrowingFile(path)
    try:
        shortened.caught_up()
        shortened._steps[-1].result()  # hashed through the old end before it shrinks: no race with the test
        os.truncate(path, 10)
        with pytest.raises(OSError, match="changed size"):
            shortened.finished()
    finally:
        shortened.close()


KILLED_MID_WRITE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import databuild.rowfile.write as write
    from databuild.build import make
    from databuild.config import load_config

    write.ROW_GROUP_TOKENS = 512 * 4  # several row groups, so there is a 'middle' of the write
    table = write._table
    groups = {"n": 0}

    def slow_table(rows):
        groups["n"] += 1
        if groups["n"] == 3:
            Path(sys.argv[3]).write_text("mid-write")
            time.sleep(60)
        return table(rows)

    write._table = slow_table
    make(load_config(sys.argv[1]), Path(sys.argv[2]), progress=False, force=True)
""")


def test_sigkill_mid_write_then_rerun(tiny_config, tiny_build, previous, tmp_path, private_tmp):
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(TINY_CONFIG), str(previous), str(marker)],
                             cwd=REPO)
    deadline = time.monotonic() + 120  # a poll: a loaded machine may take long to get there
    while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), "the child never reached the middle of the write"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    [partial] = previous.glob(f"{TINY}.parquet.*.partial")  # what a SIGKILL leaves: under a temporary name only
    [spill] = private_tmp.iterdir()  # and its spill folder, which names its owner
    assert spill.name.startswith("databuild-") and f"-{child.pid}-" in spill.name
    parquet = previous / tiny_build.parquet.name
    assert parquet.read_bytes() == tiny_build.parquet.read_bytes()
    report = verify(parquet, gather(parquet))
    assert [f for f in report.failures if "incomplete build was left behind" in f]
    rerun = make(tiny_config, previous, progress=False)
    assert rerun.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    still_the_previous_build(previous, tiny_build)
    assert list(private_tmp.iterdir()) == []  # the rerun removed the dead one's spill, and its own


class Crash(Exception):
    """A crash injected at one step of publication."""


def crash_before(step):
    def crashing(*args, **kwargs):
        raise Crash(step.__name__)
    return crashing


def crash_after(step):
    def crashing(*args, **kwargs):
        step(*args, **kwargs)
        raise Crash(step.__name__)
    return crashing


@pytest.fixture(scope="module")
def other_build(tmp_path_factory):
    """A complete build of the tiny config with another seed: other rows, so that a manifest of one
    build beside the parquet of the other would not verify."""
    from databuild.config import load_config

    config = write_config(tmp_path_factory.mktemp("seed7") / f"{TINY}.yaml", seed=7)
    return make(load_config(config), tmp_path_factory.mktemp("other"), progress=False)


@pytest.mark.parametrize("target, crash, standing", [
    ("databuild.build.publish", crash_before, "other"),  # the old manifest removed, the rename not yet done
    ("databuild.build.publish", crash_after, "new"),  # the parquet renamed, no manifest written yet
    ("databuild.publish.manifest.replace_durably", crash_before, "new"),  # the manifest under its temporary name
], ids=["after the old manifest is removed", "after the rename", "before the manifest is complete"])
def test_a_crash_at_each_step_of_publication(tiny_config, tiny_build, other_build, tmp_path, monkeypatch,
                                             target, crash, standing):
    """Publication replaces a build in three steps: old manifest removed, parquet renamed, new manifest
    written. Stopped after any of them, the directory holds no manifest at all (none that describes a
    file it does not match), verify refuses it, and the next make rebuilds it."""
    out = tmp_path / "out"
    out.mkdir()
    for path in (other_build.parquet, other_build.manifest):
        shutil.copyfile(path, out / path.name)
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(sys.modules[module], name, crash(getattr(sys.modules[module], name)))
    with pytest.raises(Crash):
        make(tiny_config, out, progress=False)
    monkeypatch.undo()

    parquet, manifest = out / f"{TINY}.parquet", out / f"{TINY}.manifest.json"
    assert not manifest.exists()
    assert parquet.read_bytes() == {"other": other_build, "new": tiny_build}[standing].parquet.read_bytes()
    result = CliRunner().invoke(main, ["verify", str(parquet)])
    assert result.exit_code == 1 and "no manifest beside it" in result.output, result.output

    rerun = make(tiny_config, out, progress=False)
    assert rerun.built == "its manifest is missing (an interrupted build)"
    assert rerun.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    still_the_previous_build(out, tiny_build)  # the lock, the parquet and its manifest, and nothing else
