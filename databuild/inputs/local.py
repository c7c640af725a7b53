"""Local copies of inputs: a source or tokenizer folder given by `dir`, laid out as its hub repo."""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError


def local_dir(path: Path, what: str) -> Path:
    """`path`, which the config names as the local copy of `what` ("source", "tokenizer"): it must exist."""
    if not path.is_dir():
        flag = "--dataset-dir" if what == "source" else "--tokenizer-dir"
        raise BuildError(f"{what} dir {path} does not exist: correct the config's 'dir' (relative to the config "
                         f"file) or {flag}, or leave both out to read the hub")
    return path
