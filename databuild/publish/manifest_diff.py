"""What two manifests say their builds were made from, compared key by key: every difference of the
pinned sections (databuild/current.PINNED), each named by the cause a user would give it.

`changes` walks two JSON values in step and yields every leaf that differs; make's up-to-date check
(databuild/current.py) takes the first, `databuild diff` all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator


class _Absent:
    """A key one manifest has and the other lacks."""

    def __repr__(self) -> str:
        return "absent"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Change:
    """One value two manifests hold differently: its dotted key (`build.seed`,
    `inputs.sources[0].files[1].sha256`), A's value and B's (ABSENT where one lacks the key)."""
    key: str
    a: Any
    b: Any


def changes(a: Any, b: Any, where: str = "") -> Iterator[Change]:
    """Every leaf where two JSON values differ, in A's key order then B's extra keys; lists entry by
    entry, the longer one's extra entries against ABSENT."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            path = f"{where}.{key}" if where else key
            yield from changes(a.get(key, ABSENT), b.get(key, ABSENT), path)
    elif isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            yield from changes(a[index] if index < len(a) else ABSENT, b[index] if index < len(b) else ABSENT,
                               f"{where}[{index}]")
    elif type(a) is not type(b) or a != b:
        yield Change(where, a, b)


# (pattern of a dotted key, the cause it names; \1 etc. fill in the key's parts), first match wins
_CAUSES = (
    (r"inputs\.tokenizer\.sha256\.(chat_template\.jinja|additional_chat_templates/.*)$", "chat template"),
    (r"build\.chat_template\b", "chat template"),
    (r"inputs\.tokenizer\.sha256\.(.+)$", r"tokenizer file \1"),
    (r"inputs\.tokenizer\.switched_off\b", "tokenizer truncation/padding"),
    (r"inputs\.tokenizer\.(\w+)", r"tokenizer \1"),
    (r"inputs\.sources\[(\d+)\]\.files\[(\d+)\]", r"source{\1} file {\1.\2}"),
    (r"inputs\.sources\[(\d+)\]\.(selected|selected_sha256|take)$", r"source{\1} take"),
    (r"inputs\.sources\[(\d+)\]\.(\w+)", r"source{\1} \2"),
    (r"inputs\.sources\[(\d+)\]$", r"source{\1}"),
    (r"build\.template_kwargs\.(.+)$", r"template kwarg \1"),
    (r"build\.packing\b", "packing"),
    (r"build\.end_of_turn\b", "end of turn"),
    (r"build\.(\w+)", r"\1"),
    (r"versions\.(.+)$", r"library version \1"),
    (r"name$", "config name"),
    (r"format$", "manifest format"),
)


def cause_of(key: str, sources: list[dict[str, Any]] = ()) -> str:
    """The cause a difference at `key` names, in a user's words: `seed`, `template kwarg
    reasoning_effort`, `tokenizer file tokenizer.json`, `source file data/train-0.parquet`, `library
    version pyarrow`. `sources` (a manifest's inputs.sources) names a source by its repo where there
    are several, and a file by its path."""
    for pattern, cause in _CAUSES:
        if match := re.match(pattern, key):
            return re.sub(r"\{(\d+)(?:\.(\d+))?\}", lambda m: _source_name(sources, *m.groups()),
                          match.expand(cause))
    return key


def _source_name(sources: list[dict[str, Any]], source: str, file: str | None) -> str:
    entry = sources[int(source)] if int(source) < len(sources) else {}
    if file is None:
        return f" {entry.get('repo', source)}" if len(sources) > 1 else ""
    files = entry.get("files") or []
    return files[int(file)].get("path", file) if int(file) < len(files) else f"#{file}"


@dataclass(frozen=True)
class Cause:
    """A cause (`seed`, `chat template`) and the changes it names."""
    name: str
    changes: tuple[Change, ...]


def causes(found: list[Change], sources: list[dict[str, Any]] = ()) -> list[Cause]:
    """The changes grouped by cause, in the order of each cause's first change."""
    grouped: dict[str, list[Change]] = {}
    for change in found:
        grouped.setdefault(cause_of(change.key, sources), []).append(change)
    return [Cause(name, tuple(of_cause)) for name, of_cause in grouped.items()]
