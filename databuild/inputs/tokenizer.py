"""The tokenizer a build pins, found on this machine for `show` and `report`.

An explicit directory or config (name, file name or path) wins; otherwise the manifest's pin: the
folder a tokenizer pinned by content was read from (`tokenizer_dir`), the hub cache at its repo and
revision, then the known configs' local dirs holding the same tokenizer. Whatever is found is refused
if its tokenizer.json is not the pinned one: decoding with another vocabulary prints plausible
but wrong text.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError
from ..utils.files import file_sha256


def _hub_cache(repo: str, revision: str) -> Path | None:
    from .hub import hub_snapshot
    from .pins import TOKENIZER_PATTERNS

    try:
        path = hub_snapshot(repo, revision, "model", list(TOKENIZER_PATTERNS), True, "")
    except BuildError:  # not cached here: try the next place
        return None
    return path if (path / "tokenizer.json").is_file() else None


def _matches(directory: Path | None, digest: str | None) -> bool:
    return (directory is not None and (directory / "tokenizer.json").is_file()
            and (digest is None or file_sha256(directory / "tokenizer.json")[0] == digest))


def _from_configs(repo: str | None, revision: str | None, digest: str | None) -> Path | None:
    """The dir of a known config's tokenizer: the same repo and revision, or for a tokenizer pinned by
    content alone, the same tokenizer.json pin."""
    from ..config import available_configs, load_config

    for path in available_configs().values():
        try:
            spec = load_config(path).tokenizer
        except BuildError:  # a broken config elsewhere must not stop showing this file
            continue
        same = (spec.repo, spec.revision) == (repo, revision) if repo else \
            digest is not None and dict(spec.sha256).get("tokenizer.json") == digest
        if same and spec.dir is not None and spec.dir.is_dir():
            return spec.dir
    return None


def _explicit(name_or_dir: str) -> Path:
    """--tokenizer: a tokenizer folder, or a config (its name, file name or path) whose tokenizer to use."""
    directory = Path(name_or_dir).expanduser()
    if directory.is_dir():
        return directory
    from ..config import resolve_config

    try:
        spec = resolve_config(name_or_dir).tokenizer
    except BuildError as exc:
        raise BuildError(f"--tokenizer {name_or_dir}: not a directory, nor a config ({exc})") from None
    found = spec.dir if spec.dir is not None and spec.dir.is_dir() else \
        _hub_cache(spec.repo, spec.revision) if spec.repo else None
    if found is None:
        raise BuildError(f"--tokenizer {name_or_dir}: the config's tokenizer is not on this machine; "
                         f"run 'databuild fetch {name_or_dir}' or pass a directory")
    return found


def _pinned(parquet: Path, manifest: dict | None, pin: dict) -> Path:
    """The manifest's tokenizer: where a content-pinned one was read (tokenizer_dir), the hub cache at
    its repo and revision, or a known config's dir holding the same tokenizer."""
    digest = (pin.get("sha256") or {}).get("tokenizer.json")
    if manifest is None or not (pin.get("repo") or digest):
        raise BuildError(f"{parquet}: no manifest beside it names the tokenizer; pass --tokenizer DIR or a config")
    recorded = manifest.get("tokenizer_dir")
    if recorded and _matches(Path(recorded), digest):
        return Path(recorded)
    found = (_hub_cache(pin["repo"], pin["revision"]) if pin.get("repo") and pin.get("revision") else None) \
        or _from_configs(pin.get("repo"), pin.get("revision"), digest)
    if found is None:
        named = f"{pin['repo']}@{pin['revision']}" if pin.get("repo") else f"pinned by content (read from {recorded})"
        raise BuildError(f"tokenizer {named} is neither in the hub cache nor the dir of a known config; "
                         "pass --tokenizer DIR or a config")
    return found


def tokenizer_dir(parquet: Path, name_or_dir: str | None, manifest: dict | None) -> Path:
    """The explicit one, else the manifest's (`_pinned`); checked against the pin."""
    pin = ((manifest or {}).get("inputs") or {}).get("tokenizer") or {}
    directory = _explicit(name_or_dir) if name_or_dir is not None else _pinned(parquet, manifest, pin)
    expected = (pin.get("sha256") or {}).get("tokenizer.json")
    if expected is not None:
        if not (directory / "tokenizer.json").is_file():
            raise BuildError(f"{directory}: no tokenizer.json")
        found = file_sha256(directory / "tokenizer.json")[0]
        if found != expected:
            raise BuildError(f"{directory}/tokenizer.json sha256 is {found}, the manifest pins {expected}; "
                             "pass the tokenizer this file was built with")
    return directory
