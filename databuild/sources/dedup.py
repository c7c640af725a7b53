"""Exact de-duplication (`dedup: exact`): conversations whose messages and tools are the same after
one normalisation, kept once, the first in source order.

The normalisation is that of the conversation record (sources/record.py), so the same conversation
in two formats (a ShareGPT source and a messages one) is the same: each message as
`[role, content, fields]`, its content in Unicode NFC (null stays null), its other fields (tool
calls, tool call id, name, reasoning, the train flag) as a JSON object or null; the conversation's `tools` list or
null. Objects are compared with their keys sorted; strings, numbers and list order exactly. The key
of a conversation is the sha256 of the UTF-8 of

    json.dumps({"messages": [[role, content, fields], ...], "tools": tools},
               sort_keys=True, ensure_ascii=False, separators=(",", ":"))

Its id and source are not part of it. The spill's first pass computes the key of every row the
stream holds (once per row, however often an upsampling take repeats it); a row whose key an earlier
row (in source order: config order of the sources, then file and row) has is a duplicate, dropped
with every repeat of it wherever the stream meets it.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Iterable

import numpy as np
import pyarrow as pa

from ..errors import quoted
from ..records.problems import DUPLICATE, BadConversation, Problem, bad_conversation

DEDUP_POLICIES = ("none", "exact")
DEDUP_RULE = ('sha256(json.dumps({"messages": [[role, NFC(content), fields]], "tools": tools}, sort_keys=True, '
              'ensure_ascii=False, separators=(",", ":")))')


def _nfc(text: str | None) -> str | None:
    return None if text is None else unicodedata.normalize("NFC", text)


def conversation_key(messages: Iterable[tuple[str, str | None, str | None]], tools: str | None) -> bytes:
    """The sha256 key of one conversation: its messages as (role, content, fields JSON text or None)
    of the normalised record, and its tools JSON text or None."""
    normalised = {"messages": [[role, _nfc(content), None if fields is None else json.loads(fields)]
                               for role, content, fields in messages],
                  "tools": None if tools is None else json.loads(tools)}
    text = json.dumps(normalised, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).digest()


def batch_keys(batch: pa.RecordBatch, rows: np.ndarray) -> list[bytes]:
    """The keys of `rows` of a batch of the record's schema (sources/record_arrow.SOURCE_SCHEMA)."""
    if not len(rows):
        return []
    taken = batch.take(pa.array(rows))
    tools = taken.column("tools").to_pylist()
    return [conversation_key(((m["role"], m["content"], m["fields"]) for m in messages), tools[k])
            for k, messages in enumerate(taken.column("messages").to_pylist())]


def find_duplicates(keys: dict[int, tuple[bytes, str]], files: list) -> dict[int, BadConversation]:
    """The duplicates among `keys` (source row -> (key, id)), by source row: each row whose key a row
    before it in source order has, named with the first."""
    first: dict[bytes, tuple[int, str]] = {}
    found: dict[int, BadConversation] = {}
    for index in sorted(keys):
        key, conversation_id = keys[index]
        if key not in first:
            first[key] = (index, conversation_id)
            continue
        kept_index, kept_id = first[key]
        kept = bad_conversation(files, kept_index, kept_id, Problem(DUPLICATE, ""))
        found[index] = bad_conversation(files, index, conversation_id, Problem(
            DUPLICATE, f"the same messages and tools as {kept.source}: {kept.file}: row {kept.row} (id {quoted(kept_id)}), "
                       "kept (dedup: exact)"))
    return found


def duplicate_record(bad: BadConversation) -> dict:
    """As the manifest lists it (`duplicate_conversations`)."""
    record = bad.record()
    del record["kind"]
    return record
