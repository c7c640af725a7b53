"""Source formats: one adapter per schema of SFT data, each mapping a batch as it is read to the one
conversation record (`reader.SOURCE_SCHEMA`: id, messages of content/role, source), so that the
checks, the spill and everything after them see that record alone. A new format is one small module
with an `Adapter` subclass, and its name here."""

from __future__ import annotations

from .adapter import Adapter
from .messages import COLUMN_KEYS, MessageColumn
from .prompt_completion import PromptCompletion
from .sharegpt import ShareGPT

FORMATS: dict[str, Adapter] = {"messages": MessageColumn(), "sharegpt": ShareGPT(),
                               "prompt_completion": PromptCompletion()}

__all__ = ["Adapter", "COLUMN_KEYS", "FORMATS", "adapter_for"]


def adapter_for(spec) -> Adapter:
    """The adapter of a config's source entry (`SourceSpec`): a named format, or its column mapping."""
    if spec.format == "columns":
        return MessageColumn(**dict(spec.columns))
    return FORMATS[spec.format]
