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


def resolve_config(name_or_path: str) -> BuildConfig:
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return load_config(name_or_path)
    configs = available_configs()
    if name_or_path not in configs:
        known = ", ".join(sorted(configs)) or "none"
        raise BuildError(f"no config named '{name_or_path}' (known: {known}); pass a path to a YAML file")
    return load_config(configs[name_or_path])
