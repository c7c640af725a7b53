"""`prompt_completion`: TRL's prompt-completion form. Each of `prompt` and `completion` is a string
(a user turn and an assistant turn) or a list of role/content messages (the conversational form);
the conversation is the prompt's messages, then the completion's. Unlike TRL's standard (string)
form, which trains on the raw concatenation, the strings go through the chat template like any turn."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .adapter import Adapter, flat_messages, is_string, message_list_problem, message_lists

ROLE_OF_STRING = {"prompt": "user", "completion": "assistant"}


@dataclass(frozen=True)
class PromptCompletion(Adapter):
    message_columns: tuple[str, ...] = ("prompt", "completion")

    def expects(self) -> str:
        return ("prompt, completion: each string, or list<struct<content: string, role: string>>")

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        for column in self.message_columns:
            if column in schema.names and is_string(schema.field(column).type):
                continue
            problem = message_list_problem(schema, column, "role", "content")
            if problem is not None:
                return problem
        return None

    def to_messages(self, batch: pa.RecordBatch) -> tuple[pa.Array, dict[int, str]]:
        parts, problems = [], {}
        for column in self.message_columns:
            values = batch.column(column)
            for row in np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False)):
                problems.setdefault(int(row), f"{column} is null")
            if is_string(values.type):
                present = values.is_valid().to_numpy(zero_copy_only=False)
                offsets = np.concatenate([[0], np.cumsum(present, dtype=np.int64)])
                contents = values.drop_null().cast(pa.string())
                parts.append((offsets, pa.array([ROLE_OF_STRING[column]] * len(contents), pa.string()), contents))
            else:
                parts.append(flat_messages(values, "role", "content"))
        # Row by row, the prompt's messages then the completion's: a stable sort of items by row.
        (prompt_offsets, *prompt), (completion_offsets, *completion) = parts
        rows = np.concatenate([np.repeat(np.arange(batch.num_rows), np.diff(prompt_offsets)),
                               np.repeat(np.arange(batch.num_rows), np.diff(completion_offsets))])
        order = pa.array(np.argsort(rows, kind="stable"))
        roles, contents = (pa.concat_arrays([a, b]).take(order)
                           for a, b in zip(prompt, completion))
        return message_lists(prompt_offsets + completion_offsets, roles, contents), problems
