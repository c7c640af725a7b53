"""`messages` (Tulu's schema: a `messages` column of role/content), and any column mapping of the
same shape: which column holds the messages, and the names of their role and content fields."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .adapter import Adapter, flat_messages, message_list_problem, message_lists

COLUMN_KEYS = {"messages": "messages", "role": "role", "content": "content"}  # key: default


@dataclass(frozen=True)
class MessageColumn(Adapter):
    messages: str = "messages"
    role: str = "role"
    content: str = "content"

    @property
    def message_columns(self) -> tuple[str, ...]:
        return (self.messages,)

    def expects(self) -> str:
        return f"{self.messages}: list<struct<{self.content}: string, {self.role}: string>>"

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        return message_list_problem(schema, self.messages, self.role, self.content)

    def to_messages(self, batch: pa.RecordBatch) -> tuple[pa.Array, dict[int, str]]:
        offsets, roles, contents = flat_messages(batch.column(self.messages), self.role, self.content)
        roles, problems = self.map_roles(roles, offsets)
        return message_lists(offsets, roles, contents), problems

    def map_roles(self, roles: pa.Array, offsets) -> tuple[pa.Array, dict[int, str]]:
        """The role values as the record spells them (here: as they are; the reader checks them)."""
        return roles, {}
