"""Finding configs by name: $DATABUILD_CONFIGS, ./configs, then the repository's configs/."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import BuildError
from .load import load_config
from .schema import BuildConfig


def config_dirs() -> list[Path]:
    """Where `databuild list` and `make NAME` look: $DATABUILD_CONFIGS, ./configs, the repo's configs/."""
    dirs = []
    if os.environ.get("DATABUILD_CONFIGS"):
        dirs.append(Path(os.environ["DATABUILD_CONFIGS"]))
    dirs += [Path.cwd() / "configs", Path(__file__).resolve().parents[2] / "configs"]
    seen, unique = set(), []
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            unique.append(d)
    return unique


def available_configs() -> dict[str, Path]:
    """Config name (file stem) to path, first directory wins."""
    found: dict[str, Path] = {}
    for d in config_dirs():
        for path in sorted(d.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def _declared_name(path: Path) -> str | None:
    """The `name:` a config file declares, or None when it cannot be read as a mapping with one."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError, UnicodeDecodeError):
        return None
    return raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None


def config_path(name_or_path: str) -> Path:
    """A path to a YAML file as given; else a known config by its file name, then by its `name:`."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return Path(name_or_path)
    configs = available_configs()
    if name_or_path in configs:
        return configs[name_or_path]
    named = [path for path in configs.values() if _declared_name(path) == name_or_path]
    if len(named) > 1:
        raise BuildError(f"several configs are named '{name_or_path}' ({', '.join(map(str, named))}); "
                         "pass the path of one")
    if named:
        return named[0]
    known = ", ".join(sorted(configs)) or "none"
    raise BuildError(f"no config named '{name_or_path}' (known: {known}); pass a path to a YAML file")


def resolve_config(name_or_path: str) -> BuildConfig:
    return load_config(config_path(name_or_path))
