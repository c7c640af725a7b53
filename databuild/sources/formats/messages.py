"""`messages` (Tulu's schema, and TRL's documented tool-calling schema: a `messages` column of
role/content messages with tool_calls, tool_call_id, name, reasoning and train fields, and a `tools`
column), and any column mapping of the same shape: which column holds the messages, the names of
their fields, and of the tools column."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..record import EXTRA_FIELDS
from ..tool_checks import DataRules
from .adapter import Adapter
from .values import Flat

# key: default. The mapping names the file's column or message field for each part of the record.
COLUMN_KEYS = {"messages": "messages", "role": "role", "content": "content",
               **{name: name for name in EXTRA_FIELDS}, "tools": "tools"}


@dataclass(frozen=True)
class MessageColumn(Adapter):
    messages: str = "messages"
    role: str = "role"
    content: str = "content"
    tool_calls: str = "tool_calls"
    tool_call_id: str = "tool_call_id"
    name: str = "name"
    reasoning_content: str = "reasoning_content"
    thinking: str = "thinking"
    reasoning: str = "reasoning"
    train: str = "train"
    tools: str = "tools"
    ignore: frozenset[str] = frozenset()
    rules: DataRules = DataRules()

    @property
    def message_columns(self) -> tuple[str, ...]:
        return (self.messages,)

    @property
    def record_fields(self) -> tuple[tuple[str, str], ...]:
        return tuple((record, getattr(self, record)) for record in EXTRA_FIELDS)

    def expects(self) -> str:
        return (f"{self.messages}: list<struct<{self.content}: string, {self.role}: string, and optionally "
                f"{', '.join(source for _, source in self.record_fields)}>>, optionally {self.tools}")

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        return self.message_struct_problem(schema, self.messages, self.role, self.content)

    def to_messages(self, batch: pa.RecordBatch) -> Flat:
        return self.flat_messages(batch.column(self.messages), self.role, self.content)
