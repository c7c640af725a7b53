"""The tokenizer a build pins, found on this machine for `show` and `report`.

An explicit directory or config name wins; otherwise the manifest's pin (repo and revision) is
looked up in the hub cache, then among the known configs' local dirs. Whatever is found is refused
if its tokenizer.json is not the pinned one: decoding with another vocabulary prints plausible
but wrong text.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError
from .pins import file_sha256


def _hub_cache(repo: str, revision: str) -> Path | None:
    from .hub import hub_snapshot
    from .pins import TOKENIZER_PATTERNS

    try:
        path = hub_snapshot(repo, revision, "model", list(TOKENIZER_PATTERNS), True, "")
    except BuildError:  # not cached here: try the next place
        return None
    return path if (path / "tokenizer.json").is_file() else None


def _from_configs(repo: str, revision: str) -> Path | None:
    from ..config import available_configs, load_config

    for path in available_configs().values():
        try:
            spec = load_config(path).tokenizer
        except BuildError:  # a broken config elsewhere must not stop showing this file
            continue
        if (spec.repo, spec.revision) == (repo, revision) and spec.dir is not None and spec.dir.is_dir():
            return spec.dir
    return None


def _explicit(name_or_dir: str) -> Path:
    directory = Path(name_or_dir).expanduser()
    if directory.is_dir():
        return directory
    from ..config import available_configs, load_config

    if name_or_dir in available_configs():
        spec = load_config(available_configs()[name_or_dir]).tokenizer
        found = spec.dir if spec.dir is not None and spec.dir.is_dir() else _hub_cache(spec.repo, spec.revision)
        if found is not None:
            return found
        raise BuildError(f"--tokenizer {name_or_dir}: the config's tokenizer is not on this machine; "
                         f"run 'databuild fetch {name_or_dir}' or pass a directory")
    raise BuildError(f"--tokenizer {name_or_dir}: not a directory nor a config name")


def tokenizer_dir(parquet: Path, name_or_dir: str | None, manifest: dict | None) -> Path:
    """The explicit one, else the manifest's pin from the hub cache or a config; checked against the pin."""
    pin = ((manifest or {}).get("inputs") or {}).get("tokenizer") or {}
    if name_or_dir is not None:
        directory = _explicit(name_or_dir)
    elif not (pin.get("repo") and pin.get("revision")):
        raise BuildError(f"{parquet}: no manifest beside it names the tokenizer (repo and revision); "
                         "pass --tokenizer DIR")
    else:
        directory = _hub_cache(pin["repo"], pin["revision"]) or _from_configs(pin["repo"], pin["revision"])
        if directory is None:
            raise BuildError(f"tokenizer {pin['repo']}@{pin['revision']} is neither in the hub cache nor "
                             "the dir of a known config; pass --tokenizer DIR")
    expected = (pin.get("sha256") or {}).get("tokenizer.json")
    if expected is not None:
        if not (directory / "tokenizer.json").is_file():
            raise BuildError(f"{directory}: no tokenizer.json")
        found = file_sha256(directory / "tokenizer.json")[0]
        if found != expected:
            raise BuildError(f"{directory}/tokenizer.json sha256 is {found}, the manifest pins {expected}; "
                             "pass the tokenizer this file was built with")
    return directory
