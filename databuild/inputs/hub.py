"""Pinned inputs: the source datasets and the tokenizer, from local copies or the Hugging Face hub.

Hub inputs go through huggingface_hub and its standard cache (HF_HOME / HF_HUB_CACHE, HF_TOKEN,
HF_HUB_OFFLINE), always at a 40-hex commit. Every file is checked before a row is built: the
tokenizer files against the config's sha256 pins, cached hub files against the content hash the
cache names their blob by, and the source's shard set against its `-of-NNNNN` count.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import BuildConfig, SourceSpec
from ..errors import BuildError, first_line
from ..rowfile.hashes import file_sha256
from ..sources.formats import adapter_for
from ..sources.mixture import take_count, take_rows
from ..sources.reader import SourceFile, source_files

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                   "special_tokens_map.json", "added_tokens.json", "tokenizer.model")
# Named chat templates: transformers loads additional_chat_templates/NAME.jinja as the template NAME.
NAMED_TEMPLATES = "additional_chat_templates/*.jinja"
TOKENIZER_PATTERNS = (*TOKENIZER_FILES, NAMED_TEMPLATES)  # what is fetched of a tokenizer repo


def tokenizer_files(directory: Path) -> list[str]:
    """The tokenizer files in `directory`, named as the manifest names them: those of TOKENIZER_FILES
    present, in that order, then the named templates in sorted order."""
    present = [name for name in TOKENIZER_FILES if (directory / name).exists()]
    return present + sorted(path.relative_to(directory).as_posix() for path in directory.glob(NAMED_TEMPLATES))


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


def offline_mode(flag: bool) -> bool:
    from huggingface_hub import constants

    return flag or bool(constants.HF_HUB_OFFLINE)


def _fetch_hint(config: BuildConfig) -> str:
    return f"run 'databuild fetch {config.name}' where the hub is reachable"


NETWORK_HINT = "check the network, HF_ENDPOINT and any proxy settings"


def hub_snapshot(repo: str, revision: str, repo_type: str, patterns: list[str], offline: bool,
                 hint: str) -> Path:
    """The cached snapshot of repo at revision (downloading the patterns unless offline); `hint`
    ends the one-line error when it is not to be had."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    where = f"{repo_type} {repo}@{revision}"
    try:
        path = snapshot_download(repo, repo_type=repo_type, revision=revision, allow_patterns=patterns,
                                 local_files_only=offline)
    except LocalEntryNotFoundError:
        why = "not in the hub cache and offline" if offline else "the hub is unreachable and it is not in the cache"
        raise BuildError(f"{where}: {why}; {hint}") from None
    # huggingface_hub's own messages for these start with the bare status line: say what it means.
    except GatedRepoError as exc:
        raise BuildError(f"{where}: gated on the hub ({_status(exc)}): set HF_TOKEN to a token that was "
                         "granted access") from None
    except RepositoryNotFoundError as exc:
        raise BuildError(f"{where}: no such repo on the hub ({_status(exc)}; a private one needs HF_TOKEN)") from None
    except RevisionNotFoundError as exc:
        raise BuildError(f"{where}: no such commit in the repo ({_status(exc)})") from None
    except HfHubHTTPError as exc:
        detail = f": {exc.server_message}" if exc.server_message else ""
        raise BuildError(f"{where}: {_status(exc)}{detail}") from None
    except (HFValidationError, OSError) as exc:
        raise BuildError(f"{where}: {first_line(exc)}") from None
    except Exception as exc:  # the transport's own errors (a connection cut mid-file): still one line
        raise BuildError(f"{where}: download failed ({type(exc).__name__}: {first_line(exc)}); "
                         "run it again: finished files stay in the cache") from None
    return Path(path)


def _status(exc) -> str:
    response = getattr(exc, "response", None)
    return f"HTTP {response.status_code}" if response is not None else first_line(exc)


def check_cached_blob(path: Path, snapshot: Path, where: str, sha256: str) -> None:
    """A file of a hub snapshot must be a link into its repo's blobs/, and the blob's content must
    hash to the blob's name: sha256 (LFS files) or git's blob sha1. A regular file, a link elsewhere
    or a blob named otherwise is a cache someone changed, and is refused; except that where the
    filesystem has no symlinks huggingface_hub stores regular files, which only their pins (and the
    rows_sha256 they lead to) can vouch for."""
    from huggingface_hub.file_download import are_symlinks_supported

    repo_cache = snapshot.parent.parent
    if not path.is_symlink() and not are_symlinks_supported(repo_cache.parent):
        return
    blobs = (repo_cache / "blobs").resolve()
    target = path.resolve()
    etag = target.name
    if not path.is_symlink() or target.parent != blobs or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", etag):
        raise BuildError(f"{where}: not a link to a blob of the hub cache ({target}); the cache was changed by "
                         "hand: delete the snapshot and fetch again")
    if len(etag) == 64:
        found = sha256
    else:
        data = path.read_bytes()
        found = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    if found != etag:
        raise BuildError(f"{where}: cached file is corrupt (content hash {found}, cache entry {etag}); "
                         "delete it and fetch again")


def _check_shards(files: list[SourceFile], split: str, where: str) -> None:
    """A sharded split is its shards, all of them, and nothing else (no stray copy joins the build)."""
    pattern = re.compile(rf"data/{re.escape(split)}-(\d{{5}})-of-(\d{{5}})\.parquet")
    matches = [pattern.fullmatch(f.name) for f in files]
    if not any(matches):
        return  # unsharded: every data/{split}-*.parquet, each listed with its hash in the manifest
    stray = [f.name for f, match in zip(files, matches) if match is None]
    if stray:
        raise BuildError(f"{where}: {stray[0]} is not a shard of the split (data/{split}-NNNNN-of-NNNNN.parquet); "
                         "remove it")
    counts = sorted({match.group(2) for match in matches})
    if len(counts) > 1:
        raise BuildError(f"{where}: shards disagree on their count ({', '.join(counts)})")
    total = int(counts[0])
    missing = sorted(set(range(total)) - {int(match.group(1)) for match in matches})
    if missing:
        raise BuildError(f"{where}: missing shard data/{split}-{missing[0]:05d}-of-{total:05d}.parquet "
                         f"({len(missing)} of {total} missing)")


def _source_root(config: BuildConfig, spec: SourceSpec, offline: bool) -> tuple[Path, str]:
    if spec.dir is not None:
        if not spec.dir.is_dir():
            raise BuildError(f"source dir {spec.dir} does not exist")
        return spec.dir, "local"
    root = hub_snapshot(spec.repo, spec.revision, "dataset", [f"data/{spec.split}-*.parquet"], offline,
                        _fetch_hint(config))
    return root, "hub"


def _resolve_tokenizer(config: BuildConfig, offline: bool) -> Path:
    spec = config.tokenizer
    if spec.dir is not None:
        if not spec.dir.is_dir():
            raise BuildError(f"tokenizer dir {spec.dir} does not exist")
        return spec.dir
    return hub_snapshot(spec.repo, spec.revision, "model", list(TOKENIZER_PATTERNS), offline, _fetch_hint(config))


def resolve_inputs(config: BuildConfig, offline: bool = False) -> ResolvedInputs:
    """Locate, and check, every input of a build; nothing is tokenized before this returns."""
    offline = offline_mode(offline)
    tokenizer_dir = _resolve_tokenizer(config, offline)
    where = f"tokenizer {config.tokenizer.repo}@{config.tokenizer.revision}"
    tokenizer_hashes = [(name, file_sha256(tokenizer_dir / name)[0]) for name in tokenizer_files(tokenizer_dir)]
    found = dict(tokenizer_hashes)
    for name, expected in config.tokenizer.sha256:
        if name not in found:
            raise BuildError(f"{where}: missing file {name} in {tokenizer_dir}; {_fetch_hint(config)}")
        if found[name] != expected:
            raise BuildError(f"{where}: {name} sha256 is {found[name]}, the config pins {expected}")
    if config.tokenizer.dir is None:
        for name, digest in tokenizer_hashes:
            check_cached_blob(tokenizer_dir / name, tokenizer_dir, f"{where}: {name}", digest)

    sources, first = [], 0
    for spec in config.sources:
        sources.append(_resolve_source(config, spec, first, offline))
        first += sources[-1].rows
    return ResolvedInputs(tuple(sources), tokenizer_dir, tuple(tokenizer_hashes))


def _resolve_source(config: BuildConfig, spec: SourceSpec, first: int, offline: bool) -> ResolvedSource:
    """One source: located, its files listed and hashed from row number `first` on, its take selected."""
    root, origin = _source_root(config, spec, offline)
    where = f"dataset {spec.repo}@{spec.revision}"
    try:
        files = source_files(root, spec.split, adapter_for(spec), spec.repo, first)
    except BuildError as exc:
        raise BuildError(f"{where}: {exc}; {_fetch_hint(config)}" if origin == "hub" else f"{where}: {exc}") from None
    _check_shards(files, spec.split, where)
    hashes = []
    for file, (digest, size) in zip(files, hash_files([f.path for f in files], "hashing the source")):
        if origin == "hub":
            check_cached_blob(file.path, root, f"{where}: {file.name}", digest)
        hashes.append((file.name, size, digest))
    rows = sum(f.rows for f in files)
    selected = take_rows(rows, take_count(spec.take, rows, f"{config.path}: {spec.key}"), config.seed)
    return ResolvedSource(spec, root, tuple(files), tuple(hashes), origin, selected)


def hash_files(paths: list[Path], desc: str) -> list[tuple[str, int]]:
    """(sha256, bytes) of each file, with a progress bar over their bytes (on a terminal only)."""
    from tqdm import tqdm

    with tqdm(total=sum(p.stat().st_size for p in paths), desc=desc, unit="B", unit_scale=True,
              disable=None, leave=False) as bar:
        return [file_sha256(path, bar.update) for path in paths]


def check_unchanged(inputs: ResolvedInputs) -> None:
    """The source files hash as they did when the build began: a file changed, replaced or deleted
    while the build read it is refused, so no build publishes rows of two versions of its input."""
    for file in inputs.source_files:
        if not file.path.is_file():
            raise BuildError(f"{file.name}: the source file was deleted while the build read it; nothing published")
    now = hash_files([f.path for f in inputs.source_files], "re-hashing the source")
    pinned = [digest for source in inputs.sources for _, _, digest in source.hashes]
    for file, digest, (found, _) in zip(inputs.source_files, pinned, now):
        if found != digest:
            raise BuildError(f"{file.name}: the source file changed while the build read it (sha256 {digest} when "
                             f"it began, {found} now); nothing published, run make again")


def fetch(config: BuildConfig) -> ResolvedInputs:
    """Download exactly the pinned files into the hub cache, then check them as a build would."""
    if offline_mode(False):
        raise BuildError("fetch downloads from the hub, and HF_HUB_OFFLINE is set: unset it, or build from "
                         f"what is cached with 'databuild make {config.name} --offline'")
    for spec in config.sources:
        if spec.dir is None:
            _fetch_all(spec.repo, spec.revision, "dataset", [f"data/{spec.split}-*.parquet"])
    if config.tokenizer.dir is None:
        _fetch_all(config.tokenizer.repo, config.tokenizer.revision, "model", list(TOKENIZER_PATTERNS))
    return resolve_inputs(config, offline=True)


def _fetch_all(repo: str, revision: str, repo_type: str, patterns: list[str]) -> None:
    """snapshot_download, then every file of the commit that the patterns select must be in the
    snapshot: with the hub unreachable, snapshot_download hands back whatever is cached, and a fetch
    that reported success over a partial cache would leave the offline build to find out."""
    from huggingface_hub import HfApi

    snapshot = hub_snapshot(repo, revision, repo_type, patterns, False, NETWORK_HINT)
    where = f"{repo_type} {repo}@{revision}"
    try:
        listed = HfApi().list_repo_files(repo, revision=revision, repo_type=repo_type)
    except Exception as exc:  # any failure to list means this fetch cannot vouch for the cache
        raise BuildError(f"{where}: cannot list the files of the commit ({type(exc).__name__}: "
                         f"{first_line(exc)}); {NETWORK_HINT}") from None
    missing = [name for name in listed
               if any(fnmatch.fnmatch(name, p) for p in patterns) and not (snapshot / name).is_file()]
    if missing:
        raise BuildError(f"{where}: {missing[0]} is not in the cache ({len(missing)} of the commit's files "
                         f"missing); {NETWORK_HINT}, then fetch again")
