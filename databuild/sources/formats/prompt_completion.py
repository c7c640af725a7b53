"""`prompt_completion`: TRL's prompt-completion form. Each of `prompt` and `completion` is a string
(a user turn and an assistant turn) or a list of messages (the conversational form, with the fields
of the `messages` format: tool calls, tool results, reasoning); the conversation is the prompt's
messages, then the completion's; a `tools` column as in every format. Unlike TRL's standard
(string) form, which trains on the raw concatenation, the strings go through the chat template like
any turn."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..tool_checks import DataRules
from .adapter import Adapter
from .values import Flat, is_string, joined, one_turn

ROLE_OF_STRING = {"prompt": "user", "completion": "assistant"}


@dataclass(frozen=True)
class PromptCompletion(Adapter):
    ignore: frozenset[str] = frozenset()
    rules: DataRules = DataRules()
    message_columns: tuple[str, ...] = ("prompt", "completion")

    def expects(self) -> str:
        return ("prompt, completion: each string, or list<struct<content: string, role: string, and optionally "
                "the record's other fields>>, optionally tools")

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        for column in self.message_columns:
            if column in schema.names and is_string(schema.field(column).type):
                continue
            problem = self.message_struct_problem(schema, column, "role", "content")
            if problem is not None:
                return problem
        return None

    def to_messages(self, batch: pa.RecordBatch) -> Flat:
        parts, problems, dropped = [], {}, Counter()
        for column in self.message_columns:
            values = batch.column(column)
            for row in np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)):
                problems.setdefault(int(row), f"{column} is null")
            if is_string(values.type):
                parts.append(one_turn(values, ROLE_OF_STRING[column]))
            else:
                part = self.flat_messages(values, "role", "content")
                for row, reason in part.problems.items():
                    problems.setdefault(row, f"{column}: {reason}")
                dropped.update(part.dropped)
                parts.append(part)
        return joined(parts, batch.num_rows, problems, dropped)  # the prompt's messages, then the completion's
