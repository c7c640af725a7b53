"""Source formats: one adapter per schema of SFT data, each mapping a batch as it is read to the one
conversation record (`record_arrow.SOURCE_SCHEMA`: id, messages of content/role/fields, source, tools),
so that the checks, the spill and everything after them see that record alone. A new format is one
small module with an `Adapter` subclass, and its name here. The preference formats (issue 34,
formats/preference.py) are named apart, in PREFERENCE_FORMATS: a preference build reads those alone."""

from __future__ import annotations

from dataclasses import replace

from .adapter import Adapter
from .messages import COLUMN_KEYS, MessageColumn
from .preference import PREFERENCE_FORMATS, UnpairedPreference, mapped
from .prompt_completion import PromptCompletion
from .sharegpt import ShareGPT

FORMATS: dict[str, Adapter] = {"messages": MessageColumn(), "sharegpt": ShareGPT(),
                               "prompt_completion": PromptCompletion()}

__all__ = ["Adapter", "COLUMN_KEYS", "FORMATS", "PREFERENCE_FORMATS", "adapter_for", "required_names"]


def adapter_for(spec) -> Adapter:
    """The adapter of a config's source entry (`SourceSpec`): a named format, or its column mapping,
    with the entry's ignore_fields and data rules."""
    ignore = frozenset(spec.ignore_fields)
    if spec.format == "columns":
        return MessageColumn(**dict(spec.columns), ignore=ignore, rules=spec.rules)
    if spec.format in PREFERENCE_FORMATS and spec.columns:  # a preference column mapping
        return replace(mapped(spec.format, dict(spec.columns)), ignore=ignore, rules=spec.rules)
    return replace({**FORMATS, **PREFERENCE_FORMATS}[spec.format], ignore=ignore, rules=spec.rules)


def required_names(format_name: str, columns: dict[str, str]) -> set[str]:
    """The columns and message fields a format cannot build without: ignore_fields may not name them."""
    if format_name == "columns":
        return {columns["messages"], columns["role"], columns["content"]}
    if format_name in PREFERENCE_FORMATS:
        adapter = mapped(format_name, columns)
        return {*adapter.message_columns, adapter.role, adapter.content, *([adapter.label] if isinstance(adapter, UnpairedPreference) else [])}
    adapter = FORMATS[format_name]
    if isinstance(adapter, MessageColumn):
        return {adapter.messages, adapter.role, adapter.content}
    return {*adapter.message_columns, "role", "content"}
