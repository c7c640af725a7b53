"""The config's inputs: `source:` or `sources:` (each with its take and format) and `tokenizer:`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BuildError
from .checks import _commit, _fail, _local_dir, _reject_unknown, _take
from .schema import SHA256_RE, SourceSpec, TokenizerSpec


def _source(raw: Any, key: str, where: str, base: Path) -> SourceSpec:
    if not isinstance(raw, dict):
        raise _fail(where, key, raw, "expected a mapping")
    where = f"{where}: {key}"
    _reject_unknown(raw, {"repo", "revision", "split", "dir", "take", "format", "ignore_fields"}, where)
    take = _take(raw, "take", (int, float), where, None)
    if isinstance(take, bool) or isinstance(take, int) and take <= 0:
        raise _fail(where, "take", take, "a count of rows (a positive int) or a fraction (a float in (0, 1])")
    if isinstance(take, float) and not 0 < take <= 1:
        raise _fail(where, "take", take, "a fraction is a float in (0, 1]; a count is an int")
    name, columns = _format(raw.get("format", "messages"), where)
    return SourceSpec(_take(raw, "repo", str, where), _commit(raw, "revision", where),
                      _take(raw, "split", str, where, "train"), _local_dir(raw, where, base), take, name, columns, key,
                      _ignore_fields(raw.get("ignore_fields", []), name, dict(columns), where))


def _ignore_fields(raw: Any, format_name: str, columns: dict[str, str], where: str) -> tuple[str, ...]:
    """The columns and message fields a source leaves out on purpose: names, each once, none the
    format needs."""
    from ..sources.formats import required_names

    if not isinstance(raw, list):
        raise _fail(where, "ignore_fields", raw, "expected a list of column or message field names")
    required = required_names(format_name, columns)
    for number, name in enumerate(raw):
        if not isinstance(name, str) or not name:
            raise _fail(where, f"ignore_fields[{number}]", name, "expected a column or message field name")
        if name in raw[:number]:
            raise _fail(where, f"ignore_fields[{number}]", name, "listed twice")
        if name in required:
            raise _fail(where, f"ignore_fields[{number}]", name, f"the {format_name} format cannot build without it")
    return tuple(raw)


def _format(raw: Any, where: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    from ..sources.formats import COLUMN_KEYS, FORMATS

    if isinstance(raw, str) and raw in FORMATS:
        return raw, ()
    if not isinstance(raw, dict):
        raise _fail(where, "format", raw, f"known formats: {', '.join(sorted(FORMATS))}, or a column mapping "
                                          f"with keys {', '.join(COLUMN_KEYS)}")
    _reject_unknown(raw, set(COLUMN_KEYS), f"{where}: format")
    for key, value in raw.items():
        if not isinstance(value, str) or not value:
            raise _fail(where, f"format.{key}", value, "expected a column or field name")
    mapping = {**COLUMN_KEYS, **raw}
    fields = [key for key in mapping if key not in ("messages", "tools")]  # the message fields: one name each
    for key in fields:
        twice = [other for other in fields if other != key and mapping[other] == mapping[key]]
        if twice:
            raise _fail(where, f"format.{key}", mapping[key], f"also the field of '{twice[0]}'")
    return "columns", tuple(sorted(mapping.items()))


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
