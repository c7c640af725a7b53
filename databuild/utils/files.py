"""Files written and read whole: a durable rename, and a file's sha256 streamed."""

from __future__ import annotations

import hashlib
import os
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
