"""Which files of a source folder (a local copy or a hub snapshot) are a split: the layouts the hub
and `datasets` use, for parquet and for JSON Lines / JSON (sources/json_files.py).

In order, the first that names any file: the split's `data_files` in the dataset card's config
(README.md's YAML header, `configs:`: the config marked `default: true`, or named `default`, or
the only one); `data/SPLIT-*.EXT` (the hub's shards, `data/train-00000-of-00002.parquet`);
`data/SPLIT.EXT`; `SPLIT.EXT`. EXT is `parquet`, or one of JSON_SUFFIXES. A split's files are of
one kind, parquet or JSON, and are read in sorted path order.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BuildError
from .json_files import JSON_SUFFIXES, is_json

SUFFIXES = (".parquet", *JSON_SUFFIXES)
CARD = "README.md"


def default_patterns(split: str) -> list[list[str]]:
    """The layouts without a card's config, in order: each a list of glob patterns."""
    return [[f"data/{split}-*{s}" for s in SUFFIXES], [f"data/{split}{s}" for s in SUFFIXES],
            [f"{split}{s}" for s in SUFFIXES]]


def fetch_patterns(split: str) -> list[str]:
    """What to download of a hub dataset repo for a split: the card, and every layout's files."""
    return [CARD, *(p for group in default_patterns(split) for p in group)]


def card_patterns(root: Path, split: str) -> list[str] | None:
    """The split's `data_files` in the card's default config, or None when the card names none."""
    card = root / CARD
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    header = text[3:].split("\n---", 1)[0]
    from ruamel.yaml import YAML, YAMLError

    try:
        meta = YAML(typ="safe").load(header)
    except YAMLError as exc:
        raise BuildError(f"{CARD}: its YAML header does not parse ({str(exc).splitlines()[0]})") from None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    if not isinstance(configs, list) or not configs:
        return None
    chosen = [c for c in configs if isinstance(c, dict) and (c.get("default") is True or c.get("config_name") ==
                                                              "default")] or configs
    if len(chosen) != 1 or not isinstance(chosen[0], dict):
        names = ", ".join(str(c.get("config_name")) for c in configs if isinstance(c, dict))
        raise BuildError(f"{CARD}: configs {names}: none is the default; the source's files cannot be chosen")
    files = chosen[0].get("data_files")
    if isinstance(files, (str, list)) and not (isinstance(files, list) and files and isinstance(files[0], dict)):
        return [files] if isinstance(files, str) else [str(f) for f in files]  # one split: train
    if isinstance(files, dict):
        files = [{"split": key, "path": value} for key, value in files.items()]
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and entry.get("split") == split:
            path = entry.get("path")
            return [path] if isinstance(path, str) else [str(p) for p in path or ()]
    return None


def split_files(root: Path, split: str) -> list[Path]:
    """The split's files under root, in sorted path order (see the module's docstring)."""
    named = card_patterns(root, split)
    found: list[Path] = []
    for patterns in ([named] if named is not None else default_patterns(split)):
        found = sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})
        if found:
            break
    if named is not None and not found:
        raise BuildError(f"{root}: no files {', '.join(named)} (the split {split!r} of {CARD}'s config)")
    if not found:
        raise BuildError(f"{root}: no files data/{split}-*.EXT, data/{split}.EXT or {split}.EXT, EXT one of "
                         f"{', '.join(s.lstrip('.') for s in SUFFIXES)}, and no {CARD} naming the split's files "
                         f"(its YAML header's configs: data_files, as the hub's dataset cards do)")
    unknown = [p for p in found if not p.name.endswith(SUFFIXES)]
    if unknown:
        raise BuildError(f"{unknown[0].relative_to(root).as_posix()}: not a file databuild reads (parquet, "
                         f"{', '.join(s.lstrip('.') for s in JSON_SUFFIXES)})")
    kinds = {is_json(p.name) for p in found}
    if len(kinds) > 1:
        raise BuildError(f"{root}: the split {split!r} mixes parquet and JSON files; a source is one or the other")
    return found

