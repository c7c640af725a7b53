"""The config's inputs: `source:` or `sources:` (each with its take and format) and `tokenizer:`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BuildError
from ..sources.tool_checks import RULE_VALUES, DataRules
from .checks import _choice, _commit, _fail, _local_dir, _reject_unknown, _take
from .schema import SHA256_RE, SourceSpec, TokenizerSpec


def _origin(raw: dict, where: str, base: Path) -> tuple[str | None, str | None, Path | None]:
    """(repo, revision, dir): a hub repo at a commit, with or without a local copy; or a local `dir`
    alone, pinned by its files' content (no repo, no revision)."""
    directory = _local_dir(raw, where, base)
    if directory is not None and "repo" not in raw and "revision" not in raw:
        return None, None, directory
    if directory is not None and "repo" not in raw:
        raise _fail(where, "revision", raw["revision"], "a revision pins a repo: give 'repo' too, or leave both "
                                                        "out to pin the local dir by its files' sha256")
    if "repo" not in raw:
        raise BuildError(f"{where}: missing key 'repo': a hub repo with its 'revision', or a local 'dir'")
    return _take(raw, "repo", str, where), _commit(raw, "revision", where), directory


def _digests(raw: dict, where: str, required: bool) -> tuple[tuple[str, str], ...]:
    """The `sha256` mapping (file path -> 64 hex digits), sorted by path."""
    if required and "sha256" not in raw:
        raise BuildError(f"{where}: missing key 'sha256': the sha256 of each file it pins, which is what pins a "
                         "local dir without repo and revision ('databuild init' writes them)")
    pins = _take(raw, "sha256", dict, where, {})
    for name, digest in pins.items():
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise _fail(where, f"sha256.{name}", digest, "expected 64 lowercase hex digits")
    return tuple(sorted((str(name), digest) for name, digest in pins.items()))


def _source(raw: Any, key: str, where: str, base: Path) -> SourceSpec:
    if not isinstance(raw, dict):
        raise _fail(where, key, raw, "expected a mapping")
    where = f"{where}: {key}"
    _reject_unknown(raw, {"repo", "revision", "split", "dir", "take", "format", "sha256", "ignore_fields",
                          *RULE_VALUES}, where)
    take = _take(raw, "take", (int, float), where, None)
    if isinstance(take, bool) or isinstance(take, int) and take <= 0:
        raise _fail(where, "take", take, "a count of rows (a positive int) or a fraction (a positive float; above "
                                          "1.0 upsamples)")
    if isinstance(take, float) and not 0 < take < float("inf"):
        raise _fail(where, "take", take, "a fraction is a positive float (2.5: every row twice, then a seeded half "
                                         "once more); a count is an int")
    name, columns = _format(raw.get("format", "messages"), where)
    repo, revision, directory = _origin(raw, where, base)
    return SourceSpec(repo, revision, _take(raw, "split", str, where, "train"), directory, take, name, columns, key,
                      sha256=_digests(raw, where, required=repo is None),
                      ignore_fields=_ignore_fields(raw.get("ignore_fields", []), name, dict(columns), where),
                      rules=DataRules(**{key: _choice(raw, key, values, where, values[0])
                                         for key, values in RULE_VALUES.items()}))


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


def _preference_mapping(raw: dict, where: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A preference format's column mapping: `preference: SHAPE` and the columns and fields it renames."""
    from ..sources.formats.preference import SHAPES, mapping_keys

    shape = raw["preference"]
    if shape not in SHAPES:
        raise _fail(where, "format.preference", shape, f"a preference shape: {', '.join(SHAPES)}")
    name = SHAPES[shape]
    _reject_unknown(raw, {"preference", *mapping_keys(name)}, f"{where}: format")
    renamed = {key: value for key, value in raw.items() if key != "preference"}
    for key, value in renamed.items():
        if not isinstance(value, str) or not value:
            raise _fail(where, f"format.{key}", value, "expected a column or field name")
        twice = [other for other in renamed if other != key and renamed[other] == value]
        if twice:
            raise _fail(where, f"format.{key}", value, f"also the name of '{twice[0]}'")
    return name, tuple(sorted(raw.items()))


def _format(raw: Any, where: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    from ..sources.formats import COLUMN_KEYS, FORMATS, PREFERENCE_FORMATS

    if isinstance(raw, str) and (raw in FORMATS or raw in PREFERENCE_FORMATS):
        return raw, ()
    if isinstance(raw, dict) and "preference" in raw:
        return _preference_mapping(raw, where)
    if not isinstance(raw, dict):
        raise _fail(where, "format", raw, f"known formats: {', '.join(sorted(FORMATS))}; preference formats: "
                                          f"{', '.join(PREFERENCE_FORMATS)}; or a column mapping "
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
    pins = _digests(raw, where, required=True)
    if "tokenizer.json" not in dict(pins):
        raise BuildError(f"{where}: key 'sha256' must pin tokenizer.json")
    repo, revision, directory = _origin(raw, where, base)
    return TokenizerSpec(repo, revision, pins, directory)
