"""Tests for bugs planted by hand that the suite once let through (tests/MUTATION.md, issue 19): a target
exactly on a row's first padding token, and fields placed in field order rather than text order. (The other
two, verify --recipe's file hash and size, and an unreadable export's exit code, are in test_verify_exits.)"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import TINY, messages
from databuild.encode.encoder import Encoder
from databuild.encode.placement import place_fields
from databuild.encode.render import Renderer
from databuild.rowfile.schema import RowFormatError
from databuild.rowfile.hashes import hash_parquet
from databuild.rowfile.write import WRITER_OPTIONS
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin


def with_padding(parquet, row: int, pad_start: int, target: int) -> None:
    """Row `row` rewritten to end in a padding segment from `pad_start`, with its only target at `target`."""
    rows = pq.read_table(parquet).to_pylist()
    mask = [0] * len(rows[row]["loss_mask"])
    mask[target] = 1
    rows[row] = {**rows[row], "loss_mask": mask, "seq_start_id": [0, pad_start], "conversation_ids": ["x", ""]}
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(parquet)), parquet, **WRITER_OPTIONS)


@pytest.mark.parametrize("target, refused", [(100, True), (101, True), (511, True), (99, False)],
                         ids=["the first padding token", "the second", "the last", "the token before the padding"])
def test_a_target_anywhere_in_the_padding_is_refused_down_to_its_first_token(tiny_build, tmp_path, target, refused):
    parquet = tmp_path / f"{TINY}.parquet"
    shutil.copyfile(tiny_build.parquet, parquet)
    with_padding(parquet, 7, 100, target)
    if refused:
        with pytest.raises(RowFormatError, match='row 7: its padding segment \\(conversation id ""\\) holds a target'):
            hash_parquet(parquet)
    else:
        assert hash_parquet(parquet).padding_tokens == 512 - 100


# A template that writes an assistant message's tool calls before its content, and each call's arguments
# before its name: text order is not field order (content, then name, then arguments).
CALLS_FIRST = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.role == 'assistant' -%}"
    "{%- for call in m.tool_calls or [] -%}"
    "{{- '<tool_call>' + call.function.arguments + ' @' + call.function.name + '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- m.content + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- m.content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_fields_written_out_of_field_order_are_placed_in_text_order(tokenizer):
    chat = messages(("user", "Weather in Paris?")) + (
        {"content": "Checking.", "role": "assistant", "tool_calls": [CALL]},
        {"content": "18C", "role": "tool"}) + messages(("assistant", "It is 18C."))
    renderer = Renderer(CALLS_FIRST, dict(tokenizer.special_tokens_map), {})
    text = renderer.render(chat, None)
    placed = place_fields(chat, None, text, renderer.render)
    assert [(p.message, text[p.start:p.end]) for p in placed] == [
        (1, '{"city": "Paris"}'), (1, "get_weather"), (1, "Checking."), (3, "It is 18C.")]
    assert [p.start for p in placed] == sorted(p.start for p in placed)

    encoder = Encoder(tokenizer, renderer, "assistant", ("<|im_end|>",))
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), chat)])
    assert out.problem is None, out.problem
    # The targets, read back token by token: by inference (issue 18), what follows each generation prompt
    # through the end of turn, the tool call written before the content included.
    runs, start = [], None
    for i, m in enumerate(out.loss_mask):
        if m and start is None:
            start = i
        if not m and start is not None:
            runs.append(tokenizer.decode(out.input_ids[start:i]))
            start = None
    if start is not None:
        runs.append(tokenizer.decode(out.input_ids[start:]))
    assert runs == ['<tool_call>{"city": "Paris"} @get_weather</tool_call>Checking.<|im_end|>', "It is 18C.<|im_end|>"], runs
