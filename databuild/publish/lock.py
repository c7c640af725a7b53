"""Exclusive locks for many processes on one output: a build's name in its directory, a recipe file.

The lock is filelock's `FileLock`: flock(2), which the kernel drops when its holder exits, however it
exits (kill -9 included), so a make that dies holding it never blocks the next one. On NFS, Linux
implements flock with the protocol's byte-range locks, which hold across clients, and the server
drops a dead client's locks when its lease expires. Where a filesystem has no flock at all (Lustre
mounted without `-o flock`), filelock falls back to a marker file naming the holder's pid and host,
which a waiter on the same host reclaims once that pid is gone.

Not `SoftFileLock`: its marker outlives a killed holder, and the only way to reclaim it from another
host is an age limit, after which a build still running (a full build takes minutes) would lose its
lock to a second builder: the very collision the lock is there to prevent.

The lock file (`.NAME.lock` beside the output) stays after release: removing it while others may be
waiting on it would let two processes hold two different files of the same name, and on NFS an open
file that is removed lives on under another name, so that can never be made safe.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout
from tqdm import tqdm

from ..errors import BuildError

WAIT_REFRESH = 1.0  # seconds between updates of the waiting line


def lock_path(target: Path) -> Path:
    """The lock file of an output: hidden, beside it, named after it without its extension."""
    return target.with_name(f".{target.name.removesuffix('.parquet')}.lock")


@contextmanager
def exclusive(target: Path, what: str) -> Iterator[float]:
    """Hold the lock of `target` (described as `what` to a process that has to wait for it); yields the
    seconds this process waited for another holder to finish."""
    path = lock_path(target)
    lock = FileLock(path)
    started = time.monotonic()
    try:
        if not _try(lock, 0):
            since = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime)) if path.exists() else "?"
            # disable=None: on a terminal a live line, in logs and CI nothing (the outcome says it waited)
            with tqdm(desc=f"waiting for another process's {what} (it holds the lock since {since})",
                      bar_format="{desc} [{elapsed}]", disable=None, leave=False) as bar:
                while not _try(lock, WAIT_REFRESH):
                    bar.refresh()
    except OSError as exc:
        raise BuildError(f"{path}: cannot take the lock ({exc.strerror or exc}): "
                         "the directory must be writable by every process that builds into it") from None
    try:
        os.utime(path)  # its time says since when the lock is held, to those who wait for it
        yield time.monotonic() - started
    finally:
        lock.release()


def _try(lock: FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        return False
    return True
