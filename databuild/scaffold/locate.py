"""An input as `init` is given it: a local folder, or `REPO[@REVISION]` on the hub, found and pinned.

A hub revision (a branch, a tag, or none for `main`) is resolved to the 40-hex commit its snapshot
is stored under: through the hub, or offline through the cache's own refs/ (huggingface_hub's
snapshot resolution, as `make` uses it). Every file the build will read is hashed: those are the pins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..config import COMMIT_RE
from ..errors import BuildError
from ..inputs.hub import hub_snapshot, offline_mode
from ..inputs.pins import TOKENIZER_PATTERNS, hash_files, tokenizer_files
from ..sources.layout import card_patterns, fetch_patterns, split_files

REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


@dataclass(frozen=True)
class Located:
    given: str  # as the command line gave it
    root: Path  # the folder the files are read from (the local dir, or the hub snapshot)
    repo: str | None  # None: a local folder, pinned by content
    revision: str | None  # the resolved commit
    asked: str | None  # the revision asked for, when it was not a commit (branch or tag)
    files: tuple[str, ...]  # paths relative to root, in the order the manifest lists them
    sha256: tuple[str, ...]  # of each file

    @property
    def pins(self) -> dict[str, str]:
        return dict(zip(self.files, self.sha256))


def _hub(given: str, kind: str, patterns: list[str], offline: bool, option: str) -> tuple[Path, str, str, str | None]:
    repo, _, asked = given.partition("@")
    if given.startswith(("/", ".", "~")) or given.count("/") > 1:
        raise BuildError(f"{option} {given}: no such folder")
    if not REPO_RE.match(repo):
        raise BuildError(f"{option} {given}: neither a local folder nor a hub repo (ORG/NAME or ORG/NAME@REVISION)")
    revision = asked or "main"
    hint = (f"pass a local folder to {option}, or run init where the hub is reachable" if offline_mode(offline)
            else f"pass a local folder to {option}")
    root = hub_snapshot(repo, revision, kind, patterns, offline_mode(offline), hint)
    if not COMMIT_RE.match(root.name):
        raise BuildError(f"{kind} {repo}@{revision}: the hub cache stores it under {root.name!r}, not a commit")
    return root, repo, root.name, None if COMMIT_RE.match(revision) else revision


def locate_tokenizer(given: str, offline: bool) -> Located:
    directory = Path(given).expanduser()
    if directory.is_dir():
        root, repo, commit, asked = directory.resolve(), None, None, None
    else:
        root, repo, commit, asked = _hub(given, "model", list(TOKENIZER_PATTERNS), offline, "--tokenizer")
    files = tokenizer_files(root)
    if "tokenizer.json" not in files:
        raise BuildError(f"--tokenizer {given}: no tokenizer.json in {root} (a fast tokenizer is required)")
    return Located(given, root, repo, commit, asked, tuple(files),
                   tuple(d for d, _ in hash_files([root / f for f in files], "hashing the tokenizer")))


def locate_source(given: str, split: str, offline: bool) -> Located:
    directory = Path(given).expanduser()
    if directory.is_dir():
        root, repo, commit, asked = directory.resolve(), None, None, None
    else:
        patterns = fetch_patterns(split)
        root, repo, commit, asked = _hub(given, "dataset", patterns, offline, "--source")
        named = card_patterns(root, split)
        if named:  # as make reads it: the card's files too
            root = _hub(f"{repo}@{commit}", "dataset", patterns + named, offline, "--source")[0]
    try:
        paths = split_files(root, split)
    except BuildError as exc:
        raise BuildError(f"--source {given}: {exc} (a source is laid out as its hub repo; --split names the "
                         "split)") from None
    files = [p.relative_to(root).as_posix() for p in paths]
    return Located(given, root, repo, commit, asked, tuple(files),
                   tuple(d for d, _ in hash_files(paths, "hashing the source")))
