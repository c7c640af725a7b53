"""Files written and read whole: a durable rename, a file's sha256 streamed, and a growing file's hashed and
synced as it is written (GrowingFile)."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

FILE_CHUNK = 1 << 20


def replace_durably(source: Path, target: Path) -> None:
    """os.replace, then fsync of the directory: without it a power loss can undo the rename."""
    os.replace(source, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def file_sha256(path: Path, progress: Callable[[int], Any] | None = None) -> tuple[str, int]:
    """(hex digest, size in bytes), streaming; `progress` is given the size of each chunk read."""
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(FILE_CHUNK):
            sha.update(chunk)
            size += len(chunk)
            if progress is not None:
                progress(len(chunk))
    return sha.hexdigest(), size


# Bytes a growing file may hold beyond its last fdatasync: the rest goes to disk while the build runs, so that
# its final fsync waits for at most this much (a 527 MB file, the size of the 8x bench job's, took 1.2 s to fsync
# at once on the 2-core machine).
SYNC_BYTES = 32 << 20
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has none


class GrowingFile:
    """The sha256 of a file that a writer only appends to (parquet's), and the file made durable, as it grows:
    `caught_up` hashes the bytes appended since, from the page cache, and syncs every SYNC_BYTES, on a thread of
    its own, so that neither the writer nor the build's end waits for the whole file; `finished` (the writer
    closed) hashes and syncs what is left and gives what file_sha256 would: (hex digest, size). The bytes are
    hashed as the file holds them once the writer's call has returned, and an appending writer never changes
    them after; verify recomputes the hash from the file all the same."""

    def __init__(self, path: Path):
        # never written through: a descriptor fsync may write with, as some systems ask of one
        self._path, self._fd = path, os.open(path, os.O_RDWR)
        self._sha, self._hashed, self._synced = hashlib.sha256(), 0, 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="databuild-growing-file")
        self._steps: list = []

    def caught_up(self) -> None:
        """Called once the writer has appended (and its call returned): catch up in the background, through
        the size the file has now (so that what is synced when depends on the writes, not on the thread's pace)."""
        self._steps.append(self._thread.submit(self._catch_up, True, os.fstat(self._fd).st_size))

    def _catch_up(self, sync: bool, size: int | None = None) -> None:
        size = os.fstat(self._fd).st_size if size is None else size
        while self._hashed < size:
            chunk = os.pread(self._fd, min(FILE_CHUNK, size - self._hashed), self._hashed)
            if not chunk:  # shorter than it was a moment ago: finished() says so
                break
            self._sha.update(chunk)
            self._hashed += len(chunk)
        if sync and self._hashed - self._synced >= SYNC_BYTES:
            _fdatasync(self._fd)
            self._synced = self._hashed

    def finished(self) -> tuple[str, int]:
        """The writer has closed the file: the rest hashed, the whole file synced; (hex digest, size)."""
        for step in self._steps:  # in order, on one thread: the first error (a failed sync) is raised
            step.result()
        self._catch_up(sync=False)
        if os.fstat(self._fd).st_size != self._hashed:  # only if something else wrote the file: never ours
            raise OSError(f"{self._path} changed size while it was written")
        os.fsync(self._fd)
        return self._sha.hexdigest(), self._hashed

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)
        os.close(self._fd)
