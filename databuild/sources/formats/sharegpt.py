"""`sharegpt`: a `conversations` column of from/value, with the `from` values real datasets use,
function roles included, and the `system` and `tools` columns tool-calling sets add.

The chat turns: the union of the values open-instruct's, axolotl's and LLaMA-Factory's converters
accept (see data/README.md). The function roles, as LLaMA-Factory's sharegpt converter and the sets
written for it (glaive-toolcall, APIGen-MT, ...) use them: `function_call` is an assistant turn whose
value is the JSON text of one call `{"name", "arguments"}` or of a list of them; `observation`, and
`tool` (Hermes function-calling, ToolACE), a tool result. A `system` column is the conversation's
system message. Any other value is refused, naming it, rather than passed to the template to guess.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import quoted
from ..record import not_json, parse_json, tool_call_problem
from .values import Flat, INVALID_UTF8, is_string, python_values, row_of
from .messages import MessageColumn

ROLE_OF = {"human": "user", "user": "user", "User": "user",
           "gpt": "assistant", "assistant": "assistant", "Assistant": "assistant", "chatgpt": "assistant",
           "bing": "assistant", "bard": "assistant",
           "system": "system", "developer": "developer",
           "function_call": "assistant", "observation": "tool", "tool": "tool"}
CALL_KEYS = ("name", "arguments")


@functools.cache
def _role_arrays() -> tuple[pa.Array, pa.Array]:
    """ROLE_OF's keys and values as arrays: built at first use, not at import, since pyarrow's first array
    from Python objects imports pandas (~0.3 s), which a build does on a thread of its own
    (utils.early.import_pandas_early)."""
    return pa.array(list(ROLE_OF)), pa.array(list(ROLE_OF.values()))


def function_call(value) -> tuple[list | None, str | None]:
    """The record's tool_calls from a `function_call` value, and why it is not one."""
    if value is None or value is INVALID_UTF8:
        return None, "function_call value is " + ("null" if value is None else "not valid UTF-8")
    try:
        parsed = parse_json(value)
    except ValueError as exc:
        return None, not_json("function_call value", exc)
    calls = []
    for call in parsed if isinstance(parsed, list) else [parsed]:
        extra = sorted(set(call) - set(CALL_KEYS)) if isinstance(call, dict) else []
        if not isinstance(call, dict) or extra:
            return None, ("function_call value is not a call {name, arguments} or a list of them"
                          + (f" (unknown key {quoted(extra[0])})" if extra else ""))
        calls.append({"type": "function", "function": call})
        problem = tool_call_problem(calls[-1])
        if problem is not None:
            return None, f"function_call value: call {len(calls) - 1} {problem}"
    return calls, None


@dataclass(frozen=True)
class ShareGPT(MessageColumn):
    messages: str = "conversations"
    role: str = "from"
    content: str = "value"
    system: str = "system"
    content_parts: bool = False

    @property
    def message_columns(self) -> tuple[str, ...]:
        return (self.messages, self.system)

    def expects(self) -> str:
        return (f"{self.messages}: list<struct<{self.role}: string, {self.content}: string>>, optionally "
                f"{self.system}: string and {self.tools}")

    def message_schema_problem(self, schema: pa.Schema) -> str | None:
        if self.system in schema.names and not is_string(schema.field(self.system).type):
            return f"column '{self.system}' is {schema.field(self.system).type}, not string"
        return self.message_struct_problem(schema, self.messages, self.role, self.content)

    def record_roles(self, values: pa.Array, offsets: np.ndarray, problems: dict[int, str]) -> pa.Array:
        from_values, roles = _role_arrays()
        roles = roles.take(pc.index_in(values, value_set=from_values))
        for item in np.flatnonzero(roles.is_null().to_numpy(zero_copy_only=False)):
            row = row_of(offsets, item)
            problems.setdefault(row, f"message {item - offsets[row]}: unknown 'from' value {quoted(values[item].as_py())} "
                                     f"(sharegpt knows {', '.join(ROLE_OF)})")
        return pc.coalesce(roles, values)

    def to_messages(self, batch: pa.RecordBatch) -> Flat:
        lists = batch.column(self.messages)
        flat = self._function_calls(self.flat_messages(lists, self.role, self.content),
                                    pc.struct_field(pc.list_flatten(lists), self.role).cast(pa.string()))
        return self._system(flat, batch) if self.system in batch.schema.names else flat

    def _function_calls(self, flat: Flat, values: pa.Array) -> Flat:
        """Each `function_call` message as an assistant message with tool_calls and null content."""
        items = np.flatnonzero(pc.fill_null(pc.equal(values, "function_call"), False).to_numpy(zero_copy_only=False))
        if not len(items):
            return flat
        taken = pa.array(items)
        problems, replaced, texts = dict(flat.problems), np.zeros(len(flat.contents), bool), []
        # Only the function_call items are read into Python: the rest keep their Arrow bytes (a string that
        # is not UTF-8 there is the reader's to refuse, row by row).
        for item, value, fields in zip(items.tolist(), python_values(flat.contents.take(taken)),
                                       python_values(flat.fields.take(taken))):
            calls, problem = function_call(value)
            written = json.loads(fields or "{}")
            if problem is None and "tool_calls" in written:
                problem = "a function_call message with tool_calls of its own as well"
            if problem is not None:
                row = row_of(flat.offsets, item)
                problems.setdefault(row, f"message {item - flat.offsets[row]}: {problem}")
                continue
            replaced[item] = True
            texts.append(json.dumps({"tool_calls": calls, **written}, ensure_ascii=False))
        if not texts:
            return replace(flat, problems=problems)
        mask = pa.array(replaced)
        return replace(flat, contents=pc.if_else(mask, pa.scalar(None, pa.string()), flat.contents),
                       fields=pc.replace_with_mask(flat.fields.cast(pa.string()), mask, pa.array(texts, pa.string())),
                       problems=problems)

    def _system(self, flat: Flat, batch: pa.RecordBatch) -> Flat:
        """The `system` column's value, where not null, as the first message of its conversation."""
        system = batch.column(self.system).cast(pa.string())
        has = system.is_valid().to_numpy(zero_copy_only=False)
        if not has.any():
            return flat
        rows = np.repeat(np.arange(batch.num_rows), np.diff(flat.offsets))
        first = np.flatnonzero(has)
        # row by row: its system message (if any), then its messages; a stable sort of items by row
        order = pa.array(np.argsort(np.concatenate([first, rows]), kind="stable"))
        count = len(first)
        roles = pa.concat_arrays([pa.array(["system"] * count, pa.string()), flat.roles]).take(order)
        contents = pa.concat_arrays([system.take(pa.array(first)), flat.contents]).take(order)
        fields = pa.concat_arrays([pa.nulls(count, pa.string()), flat.fields]).take(order)
        offsets = flat.offsets + np.concatenate([[0], np.cumsum(has, dtype=np.int64)])
        return Flat(offsets, roles, contents, fields, flat.problems, flat.dropped)
