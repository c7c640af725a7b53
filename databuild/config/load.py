"""Loading one config YAML: the top-level keys, their bounds, and the packing keys."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..errors import BuildError
from .checks import _choice, _fail, _reject_unknown, _take
from .schema import BAD_CONVERSATION_POLICIES, DEFAULT_RENDER_TIMEOUT, ROWS_ALL, STOP_TOKEN_POLICIES, BuildConfig
from .preference import preference_keys, task_of
from .sources import _sources, _tokenizer


def _check_date(where: str, value) -> None:
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", str(value)):
        raise _fail(where, "template_kwargs.current_date", value, "expected YYYY-MM-DD")
    try:
        dt.date.fromisoformat(str(value))
    except ValueError:
        raise _fail(where, "template_kwargs.current_date", value, "not a date of the calendar") from None


TOP_KEYS = {"name", "description", "source", "sources", "tokenizer", "template_kwargs", "loss_mask", "seed",
            "row_tokens", "rows", "separator", "on_bad_conversation", "chat_template_name", "end_of_turn",
            "packing", "packing_window", "overlong", "pad_token", "history", "render_timeout", "dedup",
            "train_turns", "stop_tokens_in_fields", "validation", "task", "prompt_tokens", "sequence_tokens",
            "overlong_prompt"}
# What the machine can index: row offsets are int32 (seq_start_id), token counts int64, and seeds an
# int64 for every reader of the manifest and the recipe.
BOUNDS = {"row_tokens": 2**31 - 1, "rows": 2**63 - 1, "seed": 2**63 - 1}


# A config is a few hundred nodes (a mixture's pins, a few thousand). YAML's aliases let a few hundred bytes
# stand for billions of them (nine levels of ten aliases each: 10^9), which anything that walks the value
# (a message quoting it, the manifest) would then take hours over; nesting past Python's stack is a
# RecursionError in the parser. Both are refused at load, in one line.
MOST_CONFIG_NODES = 100_000
MOST_CONFIG_DEPTH = 64


def _check_size(value: Any, where: str) -> None:
    """Refuses a config whose value, aliases expanded, holds more than MOST_CONFIG_NODES nodes or nests deeper
    than MOST_CONFIG_DEPTH: counted over the loaded value once per distinct node (an alias is the same
    object again), so the count costs what the text does, not what it expands to."""
    sizes: dict[int, int] = {}

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if depth > MOST_CONFIG_DEPTH:
            raise BuildError(f"{where}: nested deeper than {MOST_CONFIG_DEPTH} levels")
        if id(node) not in sizes:
            children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            total = 1
            for child in children:
                total += size(child, depth + 1)
                if total > MOST_CONFIG_NODES:
                    raise BuildError(f"{where}: its aliases (*name) expand to more than {MOST_CONFIG_NODES:,} "
                                     "values; a config is a few hundred: write the values out, or alias fewer")
            sizes[id(node)] = total
        return sizes[id(node)]

    size(value, 0)


def _render_timeout(value: Any, where: str) -> float:
    """Seconds, a number in (0, 10^9) (make's --render-timeout takes the same)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 10**9:
        raise _fail(where, "render_timeout", value, "expected a number of seconds above 0 (and below 10^9)")
    return float(value)


def _end_of_turn(raw: dict, where: str) -> tuple[str, ...]:
    value = raw.get("end_of_turn", [])
    tokens = [value] if isinstance(value, str) else value
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        raise _fail(where, "end_of_turn", value, "expected a token, or a list of tokens")
    return tuple(tokens)


def _rows(raw: dict, where: str) -> int | None:
    """`rows`: a count, or `all` (None): build until the sources run out."""
    value = raw.get("rows")
    if value == ROWS_ALL:
        return None
    if "rows" in raw and (isinstance(value, bool) or not isinstance(value, int)):
        raise _fail(where, "rows", value, f"expected a count of rows (an int), or '{ROWS_ALL}' for every row the "
                                          "sources give")
    return _take(raw, "rows", int, where)


def _validation(raw: dict, where: str):
    """`validation`: {share: a fraction in (0, 1)} or {count: conversations}, of each source, and `seed`."""
    from ..sources.holdout import ValidationSpec

    value = _take(raw, "validation", dict, where, None)
    if value is None:
        return None
    _reject_unknown(value, {"share", "count", "seed"}, f"{where}: validation")
    if ("share" in value) == ("count" in value):
        raise _fail(where, "validation", value, "give either 'share' (a fraction of each source) or 'count' "
                                                "(conversations of each source)")
    share = _take(value, "share", float, f"{where}: validation", None)
    if share is not None and not 0 < share < 1:
        raise _fail(where, "validation.share", share, "a fraction in (0, 1)")
    count = _take(value, "count", int, f"{where}: validation", None)
    if count is not None and count <= 0:
        raise _fail(where, "validation.count", count, "must be positive")
    seed = _take(value, "seed", int, f"{where}: validation", 0)
    if not 0 <= seed <= BOUNDS["seed"]:
        raise _fail(where, "validation.seed", seed, "must be a non-negative int64")
    return ValidationSpec(share, count, seed)


PADDING_KEYS = ("packing_window", "overlong", "pad_token")  # meaningful only for a policy that pads


def packing_keys(raw: dict, where: str) -> dict[str, Any]:
    from ..pack.policy import DEFAULT_PACKING_WINDOW, DEFAULT_POLICY, OVERLONG_POLICIES, POLICIES

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
    from ..encode.inference import DEFAULT_HISTORY, HISTORY_POLICIES
    from ..encode.strategies import STRATEGIES

    path = Path(path)
    where = str(path)
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError, UnicodeDecodeError) as exc:
        raise BuildError(f"{where}: cannot read config: {exc}") from None
    except RecursionError:
        raise BuildError(f"{where}: cannot read config: nested deeper than {MOST_CONFIG_DEPTH} levels") from None
    _check_size(raw, where)
    if not isinstance(raw, dict):
        raise BuildError(f"{where}: expected a mapping at the top level")
    _reject_unknown(raw, TOP_KEYS, where)
    task = task_of(raw, where)  # a key of the other task refused here
    _take(raw, "description", str, where, None)  # free text for people, in no manifest: but text
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
    from ..encode.turns import DEFAULT_TRAIN_TURNS, TRAIN_TURNS
    from ..sources.dedup import DEDUP_POLICIES

    history = _choice(raw, "history", HISTORY_POLICIES, where, DEFAULT_HISTORY)
    dedup = _choice(raw, "dedup", DEDUP_POLICIES, where, "none")
    train_turns = _choice(raw, "train_turns", TRAIN_TURNS, where, DEFAULT_TRAIN_TURNS)
    stop_tokens = _choice(raw, "stop_tokens_in_fields", STOP_TOKEN_POLICIES, where, "refuse")
    config = BuildConfig(
        name=_take(raw, "name", str, where),
        sources=_sources(raw, where, base),
        tokenizer=_tokenizer(raw.get("tokenizer"), where, base),
        template_kwargs=tuple(sorted((str(k), v) for k, v in kwargs.items())),
        loss_mask=loss_mask,
        seed=_take(raw, "seed", int, where),
        row_tokens=_take(raw, "row_tokens", int, where) if task == "sft" else None,
        rows=_rows(raw, where),
        separator=_take(raw, "separator", str, where, None),
        on_bad_conversation=policy,
        **packing_keys(raw, where),
        path=path.resolve(),
        chat_template_name=_take(raw, "chat_template_name", str, where, None),
        end_of_turn=_end_of_turn(raw, where),
        history=history,
        stop_tokens_in_fields=stop_tokens,
        render_timeout=_render_timeout(raw.get("render_timeout", DEFAULT_RENDER_TIMEOUT), where),
        dedup=dedup,
        train_turns=train_turns,
        validation=_validation(raw, where),
        task=task,
        **(preference_keys(raw, where) if task == "preference" else {}),
    )
    if not re.match(r"^[A-Za-z0-9._-]+$", config.name):
        raise _fail(where, "name", config.name, "use letters, digits, '.', '_' and '-' only")
    for key in ("row_tokens", "rows"):
        if getattr(config, key) is not None and getattr(config, key) <= 0:
            raise _fail(where, key, getattr(config, key), "must be positive")
    if config.seed < 0:
        raise _fail(where, "seed", config.seed, "must be non-negative")
    for key, bound in BOUNDS.items():
        if getattr(config, key) is not None and getattr(config, key) > bound:
            raise _fail(where, key, getattr(config, key), f"must be at most {bound}")
    if config.rows is not None and config.row_tokens is not None and config.rows * config.row_tokens > BOUNDS["rows"]:
        raise _fail(where, "rows", config.rows, f"rows x row_tokens must be at most {BOUNDS['rows']}")
    if config.separator == "":
        raise _fail(where, "separator", "", "name a token, or leave the key out for the tokenizer's EOS")
    return config
