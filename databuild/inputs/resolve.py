"""Resolving a config's inputs: each source and the tokenizer located (hub cache or local folder),
listed, hashed and checked against its pins before a row is built; and `fetch` for an offline build."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import BuildConfig, SourceSpec
from ..errors import BuildError
from ..sources.formats import adapter_for
from ..sources.layout import card_patterns, fetch_patterns, split_files
from ..sources.mixture import take_count, take_rows
from ..sources.reader import SourceFile, source_files
from .hub import check_cached_blob, fetch_all, fetch_hint, hub_snapshot, offline_hint, offline_mode, unreachable
from .local import local_dir
from .pins import TOKENIZER_PATTERNS, check_file_pins, check_shards, check_tokenizer_pins, hashing_in_background


@dataclass(frozen=True)
class ResolvedSource:
    spec: SourceSpec
    root: Path
    files: tuple[SourceFile, ...]
    hashes: tuple[tuple[str, int, str], ...]  # (path, bytes, sha256) per file
    origin: str  # "hub" or "local"
    selected: np.ndarray = field(compare=False)  # the rows its take selects (sources.mixture.take_rows)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def first_index(self) -> int:
        return self.files[0].first_index


@dataclass(frozen=True)
class ResolvedInputs:
    sources: tuple[ResolvedSource, ...]  # in config order
    tokenizer_dir: Path
    tokenizer_hashes: tuple[tuple[str, str], ...]  # (file, sha256) for every tokenizer file present

    @property
    def source_files(self) -> tuple[SourceFile, ...]:
        """Every file of every source, in config order: their rows are numbered across all of them."""
        return tuple(f for source in self.sources for f in source.files)

    @property
    def selections(self) -> tuple[list[int], list[np.ndarray]]:
        """(first row, selected rows) of each source, as sources.mixture takes them."""
        return [s.first_index for s in self.sources], [s.selected for s in self.sources]


def _source_root(config: BuildConfig, spec: SourceSpec, offline: bool, down: str | None) -> tuple[Path, str]:
    if spec.dir is not None:
        return local_dir(spec.dir, "source"), "local"
    patterns = fetch_patterns(spec.split)
    root = hub_snapshot(spec.repo, spec.revision, "dataset", patterns, offline, offline_hint(config.name), down)
    named = card_patterns(root, spec.split)  # the card's config may name files elsewhere: those too
    if named:
        root = hub_snapshot(spec.repo, spec.revision, "dataset", patterns + named, offline, offline_hint(config.name),
                            down)
    return root, "hub"


def _resolve_tokenizer(config: BuildConfig, offline: bool, down: str | None) -> Path:
    spec = config.tokenizer
    if spec.dir is not None:
        return local_dir(spec.dir, "tokenizer")
    return hub_snapshot(spec.repo, spec.revision, "model", list(TOKENIZER_PATTERNS), offline, offline_hint(config.name),
                        down)


def repin_hint(config: BuildConfig) -> str:
    """How to pin a local folder as it is now: init again over the same inputs, replacing the config."""
    default = Path("configs") / f"{config.name}.yaml"
    out = "" if config.path is None or config.path.resolve() == default.resolve() else f" -o {config.path}"
    return (f"pin the folder as it is now: databuild init {config.name} --force{out} with the --tokenizer, --source, "
            "--rows and --row-tokens that wrote the config (a new version of it: its rows change)")


def resolve_inputs(config: BuildConfig, offline: bool = False,
                   tokenizer_checked: Callable[[Path], None] | None = None) -> ResolvedInputs:
    """Locate, and check, every input of a build; nothing is tokenized before this returns.
    `tokenizer_checked` is called with the tokenizer's folder once its files are checked against their
    pins, before the sources are (a build starts loading the tokenizer then: prepare.pin)."""
    offline = offline_mode(offline)
    # whether the hub answers, asked once for every input it holds
    hub_inputs = config.tokenizer.dir is None or any(spec.dir is None for spec in config.sources)
    down = unreachable() if hub_inputs and not offline else None
    tokenizer_dir = _resolve_tokenizer(config, offline, down)
    where = config.tokenizer.where
    # A local folder is not the hub's to repair: the file comes from the repo at the pinned commit, or
    # (a folder pinned by content alone) from wherever the folder was copied from.
    spec = config.tokenizer
    hint = fetch_hint(config.name) if spec.dir is None else (
        f"copy it into {tokenizer_dir} from {spec.repo} at {spec.revision} (the config pins its sha256 under "
        "tokenizer.sha256)" if spec.repo is not None else
        f"put the pinned file back into {tokenizer_dir}")
    repin = repin_hint(config) if spec.dir is not None and spec.repo is None else None
    tokenizer_hashes = check_tokenizer_pins(tokenizer_dir, spec.sha256, where, hint, repin)
    if config.tokenizer.dir is None:
        for name, digest in tokenizer_hashes:
            check_cached_blob(tokenizer_dir / name, tokenizer_dir, f"{where}: {name}", digest)
    if tokenizer_checked is not None:
        tokenizer_checked(tokenizer_dir)

    sources, first = [], 0
    for spec in config.sources:
        sources.append(_resolve_source(config, spec, first, offline, down))
        first += sources[-1].rows
    return ResolvedInputs(tuple(sources), tokenizer_dir, tuple(tokenizer_hashes))


def _resolve_source(config: BuildConfig, spec: SourceSpec, first: int, offline: bool,
                    down: str | None) -> ResolvedSource:
    """One source: located, its files listed and hashed from row number `first` on, its take selected.
    The files hash (threads, one per core) while their parquet footers are read and their schemas
    checked (~0.3 s of 59 footers on a 16-core node, as long as the hashing there): an error of those
    stops the hashing, and comes first, as when one followed the other."""
    root, origin = _source_root(config, spec, offline, down)
    where = spec.where

    def located(exc: BuildError) -> BuildError:
        return BuildError(f"{where}: {exc}; {fetch_hint(config.name)}" if origin == "hub" else f"{where}: {exc}")

    try:
        paths = split_files(root, spec.split)
    except BuildError as exc:
        raise located(exc) from None
    with hashing_in_background(paths, "hashing the source") as hashing:
        try:
            files = source_files(root, spec.split, adapter_for(spec), spec.name, first, paths)
        except BuildError as exc:
            raise located(exc) from None
        check_shards(files, spec.split, where)
        digests = hashing.result()
    hashes = []
    for file, (digest, size) in zip(files, digests):
        if origin == "hub":
            check_cached_blob(file.path, root, f"{where}: {file.name}", digest)
        hashes.append((file.name, size, digest))
    check_file_pins([(name, digest) for name, _, digest in hashes], spec.sha256, where,
                    repin_hint(config) if origin == "local" and spec.repo is None else None)
    rows = sum(f.rows for f in files)
    selected = take_rows(rows, take_count(spec.take, rows, f"{config.path}: {spec.key}"), config.seed)
    return ResolvedSource(spec, root, tuple(files), tuple(hashes), origin, selected)


def fetch(config: BuildConfig) -> ResolvedInputs:
    """Download exactly the pinned files into the hub cache, then check them as a build would."""
    if offline_mode(False):
        raise BuildError("fetch downloads from the hub, and HF_HUB_OFFLINE is set: unset it, or build from "
                         f"what is cached with 'databuild make {config.name} --offline'")
    for spec in config.sources:
        if spec.dir is None:
            patterns = fetch_patterns(spec.split)
            fetch_all(spec.repo, spec.revision, "dataset", patterns)
            named = card_patterns(hub_snapshot(spec.repo, spec.revision, "dataset", patterns, True, ""), spec.split)
            if named:
                fetch_all(spec.repo, spec.revision, "dataset", patterns + named)
    if config.tokenizer.dir is None:
        fetch_all(config.tokenizer.repo, config.tokenizer.revision, "model", list(TOKENIZER_PATTERNS))
    return resolve_inputs(config, offline=True)
