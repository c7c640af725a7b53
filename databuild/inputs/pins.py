"""The pins of a build's inputs and their checks: file hashes, the tokenizer files a build pins and
their sha256 against the config, a sharded split's completeness, and the source unchanged at the end."""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import BuildError
from ..sources.reader import SourceFile
from ..utils.files import file_sha256
from ..utils.machine import available_cores

# generation_config.json: the tokens `generate` stops on (eos_token_id), the ends of turn of an
# untagged template when the config declares none (encode/ends.py)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json", "added_tokens.json", "tokenizer.model", "generation_config.json")
# Named chat templates: transformers loads additional_chat_templates/NAME.jinja as the template NAME.
NAMED_TEMPLATES = "additional_chat_templates/*.jinja"
TOKENIZER_PATTERNS = (*TOKENIZER_FILES, NAMED_TEMPLATES)  # what is fetched of a tokenizer repo


def tokenizer_files(directory: Path) -> list[str]:
    """The tokenizer files in `directory`, named as the manifest names them: those of TOKENIZER_FILES
    present, in that order, then the named templates in sorted order."""
    present = [name for name in TOKENIZER_FILES if (directory / name).exists()]
    return present + sorted(path.relative_to(directory).as_posix() for path in directory.glob(NAMED_TEMPLATES))


def hash_files(paths: list[Path], desc: str | None,
                progress: Callable[[int], Any] | None = None) -> list[tuple[str, int]]:
    """(sha256, bytes) of each file, in the order given, the files hashed at once on threads, one per
    core (hashlib releases the GIL), with a progress bar over their bytes (on a terminal only; none
    when `desc` is None; `progress` is also given each chunk's size)."""
    from tqdm import tqdm

    with tqdm(total=sum(p.stat().st_size for p in paths), desc=desc, unit="B", unit_scale=True,
              disable=None if desc else True, leave=False) as bar:
        update = bar.update if progress is None else lambda n: (bar.update(n), progress(n))
        if len(paths) <= 1:
            return [file_sha256(path, update) for path in paths]
        with ThreadPoolExecutor(max_workers=min(len(paths), available_cores()),
                                thread_name_prefix="databuild-hash-file") as pool:
            return list(pool.map(lambda path: file_sha256(path, update), paths))


class _Stopped(Exception):
    pass


@contextmanager
def hashing_in_background(paths: list[Path], desc: str | None = None) -> Iterator[Future]:
    """hash_files(paths, desc), started now on threads of its own; its future. Leaving the context stops
    it within a chunk, so that a failed or stopped build does not wait for it."""
    stop = threading.Event()

    def stopping(_):
        if stop.is_set():
            raise _Stopped

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="databuild-hash") as pool:
        future = pool.submit(hash_files, paths, desc, stopping)
        try:
            yield future
        finally:
            stop.set()


def check_tokenizer_pins(directory: Path, pins: tuple[tuple[str, str], ...], where: str,
                         hint: str, repin: str | None = None) -> list[tuple[str, str]]:
    """(file, sha256) of every tokenizer file in `directory`; each pinned file must be there and hash
    to its pin. `hint`: how to get a missing file back; `repin`: how to pin the folder as it is now,
    when a change may be the user's own (a local folder init pinned)."""
    hashes = [(name, file_sha256(directory / name)[0]) for name in tokenizer_files(directory)]
    found = dict(hashes)
    for name, expected in pins:
        if name not in found:
            raise BuildError(f"{where}: missing file {name} in {directory}; {hint}"
                             + (f"; if you removed it on purpose, {repin}" if repin else ""))
        if found[name] != expected:
            raise BuildError(f"{where}: {name} sha256 is {found[name]}, the config pins {expected}: not the pinned "
                             "file; " + (f"{hint}; if you changed it on purpose, {repin}" if repin else
                                         "use the tokenizer at the pinned commit, or pin this one (a new version "
                                         "of the config)"))
    return hashes


def check_file_pins(found: list[tuple[str, str]], pins: tuple[tuple[str, str], ...], where: str,
                    repin: str | None = None) -> None:
    """A source pinned by its files' sha256 (`pins`, none: nothing to check) is exactly those files,
    each hashing to its pin: a file added, removed or changed is refused, naming it. `repin`: how to
    pin the folder as it is now, when the change may be the user's own (a local folder init pinned)."""
    if not pins:
        return
    found_map, pinned = dict(found), dict(pins)
    fix = f"; if you changed the data on purpose, {repin}" if repin else ""
    missing = sorted(set(pinned) - set(found_map))
    if missing:
        raise BuildError(f"{where}: missing file {missing[0]}, which the config pins ({len(missing)} missing){fix}")
    for name, digest in found:
        if name not in pinned:
            raise BuildError(f"{where}: {name} is not among the files the config pins (sha256); remove it, or "
                             + (repin if repin else "pin it"))
        if digest != pinned[name]:
            raise BuildError(f"{where}: {name} sha256 is {digest}, the config pins {pinned[name]}{fix}")


def check_shards(files: list[SourceFile], split: str, where: str) -> None:
    """A sharded split is its shards, all of them, and nothing else (no stray copy joins the build)."""
    pattern = re.compile(rf"data/{re.escape(split)}-(\d{{5}})-of-(\d{{5}})(\..+)")
    matches = [pattern.fullmatch(f.name) for f in files]
    if not any(matches):
        return  # unsharded: every file of the split, each listed with its hash in the manifest
    stray = [f.name for f, match in zip(files, matches) if match is None]
    if stray:
        suffix = next(match for match in matches if match is not None).group(3)
        raise BuildError(f"{where}: {stray[0]} is not a shard of the split (data/{split}-NNNNN-of-NNNNN{suffix}); "
                         "remove it")
    counts = sorted({match.group(2) for match in matches})
    if len(counts) > 1:
        raise BuildError(f"{where}: shards disagree on their count ({', '.join(counts)})")
    total = int(counts[0])
    missing = sorted(set(range(total)) - {int(match.group(1)) for match in matches})
    if missing:
        raise BuildError(f"{where}: missing shard data/{split}-{missing[0]:05d}-of-{total:05d}{matches[0].group(3)} "
                         f"({len(missing)} of {total} missing)")


def check_unchanged(inputs, hashed: list[tuple[str, int]] | None = None) -> None:
    """The source files hash as they did when the build began: a file changed, replaced or deleted
    while the build read it is refused, so no build publishes rows of two versions of its input.

    Every byte is read again (a size and mtime comparison alone would miss a rewrite that keeps
    both, or an mtime set back); a file whose size differs is refused before any is hashed, and the
    files are hashed in parallel, so on a many-core node the check costs about the largest file.
    `hashed`: hash_files of the source taken after the build's last read of it (while it encoded),
    used in place of hashing again now."""
    pinned = [(size, digest) for source in inputs.sources for _, size, digest in source.hashes]
    for file, (size, _) in zip(inputs.source_files, pinned):
        if not file.path.is_file():
            raise BuildError(f"{file.name}: the source file was deleted while the build read it; nothing published")
        if file.path.stat().st_size != size:
            raise BuildError(f"{file.name}: the source file changed while the build read it ({size} bytes when "
                             f"it began, {file.path.stat().st_size} now); nothing published, run make again")
    now = hashed or hash_files([f.path for f in inputs.source_files], "re-hashing the source")
    for file, (_, digest), (found, _) in zip(inputs.source_files, pinned, now):
        if found != digest:
            raise BuildError(f"{file.name}: the source file changed while the build read it (sha256 {digest} when "
                             f"it began, {found} now); nothing published, run make again")
