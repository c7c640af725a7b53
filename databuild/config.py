"""Build configs: one YAML file per build, loaded into a frozen, validated dataclass.

Every check names the key and the bad value, so a typo in a config fails at load time with a
message that points at it, never halfway through a build.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import BuildError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
BAD_CONVERSATION_POLICIES = ("error", "skip")


@dataclass(frozen=True)
class SourceSpec:
    repo: str
    revision: str
    split: str = "train"
    dir: Path | None = None  # a local copy laid out like the hub repo, used in place of the hub
    take: int | float | None = None  # a count of rows, or a fraction (0, 1] of the source; None: every row
    format: str = "messages"  # a name in sources.formats.FORMATS, or "columns" (a column mapping)
    columns: tuple[tuple[str, str], ...] = ()  # format "columns": (key, column or field name), sorted
    key: str = field(default="source", compare=False)  # where the config holds it: source, or sources[i]

    @property
    def format_config(self) -> str | dict[str, str]:
        """The format as the config spells it: a name, or the column mapping."""
        return dict(self.columns) if self.format == "columns" else self.format


@dataclass(frozen=True)
class TokenizerSpec:
    repo: str
    revision: str
    sha256: tuple[tuple[str, str], ...]  # (file name, hex digest), sorted by file name
    dir: Path | None = None


@dataclass(frozen=True)
class BuildConfig:
    name: str
    sources: tuple[SourceSpec, ...]  # `source:` is a list of one
    tokenizer: TokenizerSpec
    loss_mask: str
    seed: int
    row_tokens: int
    rows: int
    template_kwargs: tuple[tuple[str, Any], ...] = ()
    separator: str | None = None  # a token string; None means the tokenizer's EOS token
    on_bad_conversation: str = "error"
    packing: str = "concat"  # a policy of databuild/pack/policy.py's POLICIES
    packing_window: int | None = None  # bfd: conversations packed together (None under concat)
    overlong: str | None = None  # bfd: what a conversation longer than a row gets
    pad_token: str | None = None  # bfd: a token string; None means the tokenizer's pad token, else the separator
    path: Path | None = field(default=None, compare=False)
    chat_template_name: str | None = None  # one of the tokenizer's named templates; None: transformers' choice
    end_of_turn: tuple[str, ...] = ()  # special tokens closing an assistant turn, besides EOS

    @property
    def template_kwargs_dict(self) -> dict[str, Any]:
        return dict(self.template_kwargs)

    @property
    def tokenizer_sha256(self) -> dict[str, str]:
        return dict(self.tokenizer.sha256)

    def with_overrides(self, **changes: Any) -> BuildConfig:
        """A copy with source/tokenizer directories replaced (the CLI's air-gapped overrides)."""
        sources, tokenizer = self.sources, self.tokenizer
        if changes.get("dataset_dir") is not None:
            if len(sources) > 1:
                raise BuildError(f"{self.path}: --dataset-dir replaces the one source of a config, and this one "
                                 f"lists {len(sources)}: set each one's 'dir' in the config instead")
            sources = (replace(sources[0], dir=Path(changes["dataset_dir"]).resolve()),)
        if changes.get("tokenizer_dir") is not None:
            tokenizer = replace(tokenizer, dir=Path(changes["tokenizer_dir"]).resolve())
        return replace(self, sources=sources, tokenizer=tokenizer)


def _fail(where: str, key: str, value: Any, why: str) -> BuildError:
    return BuildError(f"{where}: key '{key}' = {value!r}: {why}")


def _take(raw: dict, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    if key not in raw:
        if default is ...:
            raise BuildError(f"{where}: missing key '{key}'")
        return default
    value = raw[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        names = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise _fail(where, key, value, f"expected {names}")
    return value


def _commit(raw: dict, key: str, where: str) -> str:
    value = _take(raw, key, str, where)
    if not COMMIT_RE.match(value):
        raise _fail(where, key, value, "a pinned build needs a 40-hex commit, not a branch or tag")
    return value


def _local_dir(raw: dict, where: str, base: Path) -> Path | None:
    value = _take(raw, "dir", str, where, None)
    return None if value is None else (base / os.path.expanduser(value)).resolve()


def _source(raw: Any, key: str, where: str, base: Path) -> SourceSpec:
    if not isinstance(raw, dict):
        raise _fail(where, key, raw, "expected a mapping")
    where = f"{where}: {key}"
    _reject_unknown(raw, {"repo", "revision", "split", "dir", "take", "format"}, where)
    take = _take(raw, "take", (int, float), where, None)
    if isinstance(take, bool) or isinstance(take, int) and take <= 0:
        raise _fail(where, "take", take, "a count of rows (a positive int) or a fraction (a float in (0, 1])")
    if isinstance(take, float) and not 0 < take <= 1:
        raise _fail(where, "take", take, "a fraction is a float in (0, 1]; a count is an int")
    name, columns = _format(raw.get("format", "messages"), where)
    return SourceSpec(_take(raw, "repo", str, where), _commit(raw, "revision", where),
                      _take(raw, "split", str, where, "train"), _local_dir(raw, where, base), take, name, columns, key)


def _format(raw: Any, where: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    from .sources.formats import COLUMN_KEYS, FORMATS

    if isinstance(raw, str) and raw in FORMATS:
        return raw, ()
    if not isinstance(raw, dict):
        raise _fail(where, "format", raw, f"known formats: {', '.join(sorted(FORMATS))}, or a column mapping "
                                          f"with keys {', '.join(COLUMN_KEYS)}")
    _reject_unknown(raw, set(COLUMN_KEYS), f"{where}: format")
    for key, value in raw.items():
        if not isinstance(value, str) or not value:
            raise _fail(where, f"format.{key}", value, "expected a column or field name")
    return "columns", tuple(sorted({**COLUMN_KEYS, **raw}.items()))


def _sources(raw: dict, where: str, base: Path) -> tuple[SourceSpec, ...]:
    if ("source" in raw) == ("sources" in raw):
        raise BuildError(f"{where}: give either 'source' (one) or 'sources' (a list), not "
                         f"{'both' if 'source' in raw else 'neither'}")
    if "source" in raw:
        return (_source(raw["source"], "source", where, base),)
    listed = raw["sources"]
    if not isinstance(listed, list) or not listed:
        raise _fail(where, "sources", listed, "expected a non-empty list of sources")
    return tuple(_source(entry, f"sources[{i}]", where, base) for i, entry in enumerate(listed))


def _tokenizer(raw: Any, where: str, base: Path) -> TokenizerSpec:
    if not isinstance(raw, dict):
        raise _fail(where, "tokenizer", raw, "expected a mapping")
    where = f"{where}: tokenizer"
    _reject_unknown(raw, {"repo", "revision", "sha256", "dir"}, where)
    pins = _take(raw, "sha256", dict, where)
    for name, digest in pins.items():
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise _fail(where, f"sha256.{name}", digest, "expected 64 lowercase hex digits")
    if "tokenizer.json" not in pins:
        raise BuildError(f"{where}: key 'sha256' must pin tokenizer.json")
    return TokenizerSpec(_take(raw, "repo", str, where), _commit(raw, "revision", where),
                         tuple(sorted(pins.items())), _local_dir(raw, where, base))


def _check_date(where: str, value) -> None:
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", str(value)):
        raise _fail(where, "template_kwargs.current_date", value, "expected YYYY-MM-DD")
    try:
        dt.date.fromisoformat(str(value))
    except ValueError:
        raise _fail(where, "template_kwargs.current_date", value, "not a date of the calendar") from None


def _reject_unknown(raw: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise BuildError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")


TOP_KEYS = {"name", "description", "source", "sources", "tokenizer", "template_kwargs", "loss_mask", "seed",
            "row_tokens", "rows", "separator", "on_bad_conversation", "chat_template_name", "end_of_turn",
            "packing", "packing_window", "overlong", "pad_token"}
# What the machine can index: row offsets are int32 (seq_start_id), token counts int64, and seeds an
# int64 for every reader of the manifest and the recipe.
BOUNDS = {"row_tokens": 2**31 - 1, "rows": 2**63 - 1, "seed": 2**63 - 1}


def _end_of_turn(raw: dict, where: str) -> tuple[str, ...]:
    value = raw.get("end_of_turn", [])
    tokens = [value] if isinstance(value, str) else value
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise _fail(where, "end_of_turn", value, "expected a token, or a list of tokens")
    return tuple(tokens)


PADDING_KEYS = ("packing_window", "overlong", "pad_token")  # meaningful only for a policy that pads


def packing_keys(raw: dict, where: str) -> dict[str, Any]:
    from .pack.policy import DEFAULT_PACKING_WINDOW, DEFAULT_POLICY, OVERLONG_POLICIES, POLICIES

    policy = _take(raw, "packing", str, where, DEFAULT_POLICY)
    if policy not in POLICIES:
        raise _fail(where, "packing", policy, f"known policies: {', '.join(sorted(POLICIES))}")
    if policy == "concat":
        for key in PADDING_KEYS:
            if key in raw:
                raise _fail(where, key, raw[key], "applies to a policy that pads (packing: bfd), not to concat")
        return {"packing": policy}
    window = _take(raw, "packing_window", int, where, DEFAULT_PACKING_WINDOW)
    if window <= 0:
        raise _fail(where, "packing_window", window, "must be positive")
    overlong = _take(raw, "overlong", str, where, "drop")
    if overlong not in OVERLONG_POLICIES:
        raise _fail(where, "overlong", overlong, f"expected one of {', '.join(OVERLONG_POLICIES)}")
    pad_token = _take(raw, "pad_token", str, where, None)
    if pad_token == "":
        raise _fail(where, "pad_token", "", "name a token, or leave the key out for the tokenizer's pad token")
    return {"packing": policy, "packing_window": window, "overlong": overlong, "pad_token": pad_token}


def load_config(path: str | os.PathLike) -> BuildConfig:
    """Read and validate one config YAML."""
    from .encode.masks import STRATEGIES

    path = Path(path)
    where = str(path)
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError, UnicodeDecodeError) as exc:
        raise BuildError(f"{where}: cannot read config: {exc}") from None
    if not isinstance(raw, dict):
        raise BuildError(f"{where}: expected a mapping at the top level")
    _reject_unknown(raw, TOP_KEYS, where)
    base = path.parent
    kwargs = _take(raw, "template_kwargs", dict, where, {})
    if isinstance(kwargs.get("current_date"), dt.date):  # YAML reads an unquoted 2026-10-01 as a date
        raise _fail(where, "template_kwargs.current_date", kwargs["current_date"].isoformat(),
                    "quote it, as a string: \"YYYY-MM-DD\"")
    for key, value in kwargs.items():
        if not isinstance(value, (str, int, float, bool)):
            raise _fail(where, f"template_kwargs.{key}", value, "expected a scalar")
        if key in ("messages", "tools", "documents", "add_generation_prompt"):
            raise _fail(where, f"template_kwargs.{key}", value, "apply_chat_template sets this variable itself")
    if "current_date" in kwargs:
        _check_date(where, kwargs["current_date"])
    loss_mask = _take(raw, "loss_mask", str, where)
    if loss_mask not in STRATEGIES:
        raise _fail(where, "loss_mask", loss_mask, f"known strategies: {', '.join(sorted(STRATEGIES))}")
    policy = _take(raw, "on_bad_conversation", str, where, "error")
    if policy not in BAD_CONVERSATION_POLICIES:
        raise _fail(where, "on_bad_conversation", policy, "expected 'error' or 'skip'")
    config = BuildConfig(
        name=_take(raw, "name", str, where),
        sources=_sources(raw, where, base),
        tokenizer=_tokenizer(raw.get("tokenizer"), where, base),
        template_kwargs=tuple(sorted((str(k), v) for k, v in kwargs.items())),
        loss_mask=loss_mask,
        seed=_take(raw, "seed", int, where),
        row_tokens=_take(raw, "row_tokens", int, where),
        rows=_take(raw, "rows", int, where),
        separator=_take(raw, "separator", str, where, None),
        on_bad_conversation=policy,
        **packing_keys(raw, where),
        path=path.resolve(),
        chat_template_name=_take(raw, "chat_template_name", str, where, None),
        end_of_turn=_end_of_turn(raw, where),
    )
    if not re.match(r"^[A-Za-z0-9._-]+$", config.name):
        raise _fail(where, "name", config.name, "use letters, digits, '.', '_' and '-' only")
    for key in ("row_tokens", "rows"):
        if getattr(config, key) <= 0:
            raise _fail(where, key, getattr(config, key), "must be positive")
    if config.seed < 0:
        raise _fail(where, "seed", config.seed, "must be non-negative")
    for key, bound in BOUNDS.items():
        if getattr(config, key) > bound:
            raise _fail(where, key, getattr(config, key), f"must be at most {bound}")
    if config.rows * config.row_tokens > BOUNDS["rows"]:
        raise _fail(where, "rows", config.rows, f"rows x row_tokens must be at most {BOUNDS['rows']}")
    if config.separator == "":
        raise _fail(where, "separator", "", "name a token, or leave the key out for the tokenizer's EOS")
    return config


def config_dirs() -> list[Path]:
    """Where `databuild list` and `make NAME` look: $DATABUILD_CONFIGS, ./configs, the repo's configs/."""
    dirs = []
    if os.environ.get("DATABUILD_CONFIGS"):
        dirs.append(Path(os.environ["DATABUILD_CONFIGS"]))
    dirs += [Path.cwd() / "configs", Path(__file__).resolve().parent.parent / "configs"]
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
