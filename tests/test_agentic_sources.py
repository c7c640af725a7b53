"""Agentic and reasoning conversations from every source format, end to end (issue 18, sources side):
tool calls (several in one turn, arguments as objects and as JSON text), tool results, a tools column
(typed and as JSON text) and reasoning fields reach the template as the source wrote them; the rows
are what transformers' apply_chat_template makes of the same data read the way `datasets` reads it;
fields, roles and columns the record does not carry are refused by name; ignore_fields; the counts."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import write_config
from source_folders import write_source
from databuild.build import make
from databuild.prepare import prepare
from databuild.config import load_config
from databuild.encode.render import Renderer, load_tokenizer
from databuild.errors import BuildError
from test_build import KWARGS

COMMIT = "1" * 40
ROW_TOKENS = 64
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "unit": {"type": "string"}}}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                          "parameters": {"type": "object", "properties": {
                                              "zone": {"type": "string"}}}}}


def call(number: int, name: str, arguments) -> dict:
    return {"id": f"call_{number}", "type": "function", "function": {"name": name, "arguments": arguments}}


def agentic(k: int, arguments_as_text: bool) -> list[dict]:
    """TRL's documented tool-calling schema: two calls in one turn, their results, then an answer
    with its reasoning. Arguments as objects, or as the JSON text a model writes."""
    paris = {"city": f"Paris{k}", "unit": "celsius"}
    zone = {"zone": "CET", "city": "Paris"}  # not the order of the schema: kept as written
    as_written = (lambda a: json.dumps(a)) if arguments_as_text else (lambda a: a)
    return [{"role": "system", "content": "You help with weather and time."},
            {"role": "user", "content": f"Weather and time in Paris{k}?"},
            {"role": "assistant", "content": None, "reasoning_content": "Two lookups, at once.",
             "tool_calls": [call(1, "get_weather", as_written(paris)), call(2, "get_time", as_written(zone))]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
            {"role": "tool", "tool_call_id": "call_2", "name": "get_time", "content": "14:05"},
            {"role": "assistant", "content": f"It is 21 degrees and 14:05 in Paris{k}.",
             "reasoning_content": "Both answered."}]


def reasoning_only(k: int) -> list[dict]:
    return [{"role": "user", "content": f"What is {k} + {k}?"},
            {"role": "assistant", "content": f"{2 * k}.", "reasoning_content": f"Adding {k} to itself."}]


def plain(k: int) -> list[dict]:
    return [{"role": "user", "content": f"Say hello {k} times."}, {"role": "assistant", "content": "hello " * k}]


def conversations(arguments_as_text: bool) -> list[tuple[list[dict], list | None]]:
    out = []
    for k in range(6):
        out += [(agentic(k, arguments_as_text), [WEATHER, CLOCK]), (reasoning_only(k), None), (plain(k + 1), [])]
    return out


def config_for(tmp_path: Path, tokenizer: Path, source: Path, fmt, rows: int, row_tokens: int = ROW_TOKENS,
               **entry) -> Path:
    pins = {n: hashlib.sha256((tokenizer / n).read_bytes()).hexdigest()
            for n in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")}
    return write_config(tmp_path / "agentic.yaml", name="agentic", loss_mask="assistant", rows=rows,
                        row_tokens=row_tokens, source=None, on_bad_conversation=entry.pop("policy", "error"),
                        stop_tokens_in_fields=entry.pop("stop_tokens_in_fields", None),  # the default: refuse
                        sources=[{"repo": "org/agentic", "revision": COMMIT, "dir": str(source), "format": fmt,
                                  **entry}], tokenizer={"dir": str(tokenizer), "sha256": pins})


def nulls_below(value) -> int:
    """The keys whose value is null in the objects within `value`, at any depth."""
    if isinstance(value, dict):
        return sum((v is None) + nulls_below(v) for v in value.values())
    return sum(nulls_below(v) for v in value) if isinstance(value, list) else 0


def without_nulls_below(value):
    """`value` with the keys whose value is null dropped from the objects within it, at any depth."""
    if isinstance(value, dict):
        return {k: without_nulls_below(v) for k, v in value.items() if v is not None}
    return [without_nulls_below(v) for v in value] if isinstance(value, list) else value


STRUCTURED = ("tool_calls", "content")  # a message's fields a struct may hold (content: a list of parts)


def struct_nulls_dropped(convs):
    """The conversations as struct_nulls: drop documents them: the keys with a null value dropped from
    the objects within tool calls, content parts and tools (done here by hand, not by databuild)."""
    return [([{k: without_nulls_below(v) if k in STRUCTURED else v for k, v in m.items()} for m in messages],
             None if tools is None else without_nulls_below(tools)) for messages, tools in convs]


def as_datasets_reads(root: Path, to_trl) -> list[tuple[list[dict], list | None]]:
    """Each row as a user's `datasets` pipeline hands it to apply_chat_template: pyarrow's Python
    values (a struct column's nulls included), the tools column parsed when it is JSON text, and the
    format converted by `to_trl` (written here from the formats' own documentation)."""
    out = []
    for path in sorted((root / "data").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            tools = row.get("tools") if "tools" in row else row.get("functions")
            out.append((to_trl(row), json.loads(tools) if isinstance(tools, str) else tools))
    return out


def stream_rows(tokenizer, convs, seed: int = 42) -> list[tuple[list[int], list[int]]]:
    """The packed rows without databuild: numpy's permutation, transformers' render, ids and
    assistant mask (the template's generation tags), EOS between conversations, full windows of
    ROW_TOKENS with a target."""
    ids, mask = [], []
    for index in np.random.default_rng(seed).permutation(len(convs)):
        messages, tools = convs[index]
        out = tokenizer.apply_chat_template(copy.deepcopy(messages), tools=tools, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True, **KWARGS)
        if ids and ids[-1] != tokenizer.eos_token_id:
            ids, mask = ids + [tokenizer.eos_token_id], mask + [0]
        ids, mask = ids + list(out["input_ids"]), mask + list(out["assistant_masks"])
    windows = [(ids[k:k + ROW_TOKENS], mask[k:k + ROW_TOKENS]) for k in range(0, len(ids) - ROW_TOKENS + 1, ROW_TOKENS)]
    return [w for w in windows if any(w[1])]


def counted(convs) -> dict[str, int]:
    """The manifest's per-source record counts, counted here from the dicts."""
    messages = [m for conv, _ in convs for m in conv]
    return {"tool_calls": sum(len(m.get("tool_calls") or ()) for m in messages),
            "tool_results": sum(m["role"] == "tool" for m in messages),
            "reasoning_turns": sum(any(m.get(k) is not None for k in ("reasoning_content", "thinking", "reasoning"))
                                   for m in messages),
            "conversations_with_tools": sum(bool(tools) for _, tools in convs),
            "conversations_with_undeclared_tools": sum(
                not tools and any(m.get("tool_calls") for m in conv) for conv, tools in convs),
            # calls kept under a relaxed rule: none here (the rules refuse, and every call here is valid)
            "tool_calls_invalid_arguments": 0, "tool_calls_undeclared": 0,
            # the nulls a struct put where a row had no key (the conversations here write none)
            "struct_null_keys_dropped": sum(nulls_below(m.get(k)) for m in messages for k in STRUCTURED)
            + sum(nulls_below(tools) for _, tools in convs)}


def build_and_compare(tmp_path, tools_tokenizer, root, fmt, to_trl, **entry):
    """Build the source; the rows must be the independent stream's, every record must render as
    transformers renders the `datasets` reading, and the counts must be those of the dicts."""
    reference = load_tokenizer(tools_tokenizer)
    read = as_datasets_reads(root, to_trl)
    convs = struct_nulls_dropped(read) if entry.get("struct_nulls") == "drop" else read
    expected = stream_rows(reference, convs)
    config = load_config(config_for(tmp_path, tools_tokenizer, root, fmt, len(expected), **entry))
    result = make(config, tmp_path / "out", progress=False)
    table = pq.read_table(result.parquet)
    assert list(zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist())) == expected
    renderer = Renderer.for_tokenizer(reference, KWARGS)
    with prepare(config) as prepared:
        records = sorted(prepared.conversations(), key=lambda c: c.origin.index)
    assert len(records) == len(convs)
    for record, (messages, tools) in zip(records, convs):
        assert renderer.render(record.messages, record.tools) == reference.apply_chat_template(
            copy.deepcopy(messages), tools=tools, tokenize=False, **KWARGS)
    assert result.data["counts"]["sources"][0]["messages"] == counted(read)
    return result, records, convs


def trl_messages(row: dict) -> list[dict]:
    return row["messages"]


def test_messages_format_carries_tool_calls_results_tools_and_reasoning(tmp_path, tools_tokenizer):
    # one file with arguments as objects and tools typed, one with both as JSON text
    typed = [{"id": f"obj-{i}", "messages": m, "tools": t} for i, (m, t) in enumerate(conversations(False))]
    text = [{"id": f"txt-{i}", "messages": m, "tools": None if t is None else json.dumps(t)}
            for i, (m, t) in enumerate(conversations(True))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(typed), pa.Table.from_pylist(text)])
    # the typed file's arguments and tools are structs, which cannot say which keys a row wrote: refused,
    # naming the column and the fixes
    with pytest.raises(BuildError, match=r"data/train-00000-of-00002.parquet: schema: messages field "
                                         r"'tool_calls'\[\]\.function\.arguments is a parquet struct, .* store it "
                                         r"as JSON text \(a string\) or as datasets' Json type, or set struct_nulls: "
                                         r"drop on the source"):
        make(load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 1)), tmp_path / "no", progress=False)
    result, records, convs = build_and_compare(tmp_path, tools_tokenizer, root, "messages", trl_messages,
                                               struct_nulls="drop")
    by_id = {r.origin.id: r for r in records}
    # JSON text arguments reach the template byte for byte; objects with the keys the call wrote (the
    # struct's nulls for the other calls' keys dropped), and so do the tools' schemas
    calls = by_id["txt-0"].messages[2]["tool_calls"]
    assert calls == [call(1, "get_weather", '{"city": "Paris0", "unit": "celsius"}'),
                     call(2, "get_time", '{"zone": "CET", "city": "Paris"}')]
    # (the keys in the struct's order, which is the order of the first row that wrote each key in the file)
    for k, (messages, tools) in enumerate(conversations(False)):
        got = by_id[f"obj-{k}"]
        assert [{k: v for k, v in m.items() if v is not None} for m in got.messages] == [
            {k: v for k, v in m.items() if v is not None} for m in messages]
        assert got.tools == tools
    # per agentic conversation: each call lacks one key of the other's arguments (2), and the tools' schemas
    # the other's properties (get_weather lacks zone, get_time city and unit: 3)
    assert result.data["counts"]["sources"][0]["messages"]["struct_null_keys_dropped"] == 6 * (2 + 3)
    # the record's message: content and role, then the fields the source gives it, in its order
    assert list(by_id["txt-0"].messages[2]) == ["content", "role", "reasoning_content", "tool_calls"]
    assert by_id["txt-0"].messages[3] == {"content": "{\"temp\": 21}", "role": "tool", "tool_call_id": "call_1",
                                          "name": "get_weather"}
    assert by_id["txt-0"].tools == [WEATHER, CLOCK] and by_id["txt-2"].tools == [] and by_id["txt-1"].tools is None
    assert by_id["obj-1"].messages == ({"content": "What is 0 + 0?", "role": "user"},
                                       {"content": "0.", "role": "assistant", "reasoning_content": "Adding 0 to itself."})
    # what the template wrote, decoded from the rows: both calls, the results, the tools, the reasoning
    text_of_rows = load_tokenizer(tools_tokenizer).decode(
        [t for row in pq.read_table(result.parquet).column("input_ids").to_pylist() for t in row])
    for piece in ('<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET", "city": "Paris"}}\n</tool_call>',
                  "<tool_response>\n14:05\n</tool_response>", "<think>\nBoth answered.\n</think>", "# Tools"):
        assert piece in text_of_rows
    assert result.data["counts"]["sources"][0]["messages"] == {
        "tool_calls": 24, "tool_results": 24, "reasoning_turns": 36, "conversations_with_tools": 12,
        "conversations_with_undeclared_tools": 0, "tool_calls_invalid_arguments": 0, "tool_calls_undeclared": 0,
        "struct_null_keys_dropped": 30}


def test_agentic_builds_do_not_depend_on_workers_batches_or_window(tmp_path, tools_tokenizer, sixteen_cores):
    rows = [{"id": f"r{i}", "messages": m, "tools": None if t is None else json.dumps(t)}
            for i, (m, t) in enumerate(conversations(True))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows[:7]), pa.Table.from_pylist(rows[7:])])
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 6))
    first = make(config, tmp_path / "one", progress=False)
    again = make(config, tmp_path / "two", workers=2, batch_size=3, window=4, progress=False)
    assert again.parquet.read_bytes() == first.parquet.read_bytes()
    assert again.manifest.read_bytes() == first.manifest.read_bytes()


def sharegpt_row(messages: list[dict], tools, hermes: bool) -> dict:
    """A conversation the way LLaMA-Factory's sharegpt sets (glaive-toolcall, APIGen-MT) write it:
    a system column, function_call values of one call or a list, observation results, tools as JSON
    text; or Hermes function-calling's `tool` results."""
    turns = []
    for m in messages[1:]:
        if m.get("tool_calls"):
            value = [c["function"] for c in m["tool_calls"]]
            turns.append({"from": "function_call", "value": json.dumps(value if len(value) > 1 else value[0])})
        else:
            name = {"user": "human", "assistant": "gpt", "tool": "tool" if hermes else "observation"}[m["role"]]
            turns.append({"from": name, "value": m["content"]})
    row = {"conversations": turns, "tools": None if tools is None else json.dumps(tools)}
    return {"system": messages[0]["content"], **row} if messages[0]["role"] == "system" else {"system": None, **row}


def sharegpt_to_trl(row: dict) -> list[dict]:
    """LLaMA-Factory's reading (data/converter.py SharegptDatasetConverter, function_call parsed as its
    FunctionFormatter does), in TRL's schema: done here by hand, not by databuild."""
    out = [{"role": "system", "content": row["system"]}] if row["system"] is not None else []
    for turn in row["conversations"]:
        if turn["from"] == "function_call":
            parsed = json.loads(turn["value"])
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": f} for f in (parsed if isinstance(parsed, list) else [parsed])]})
        else:
            role = {"human": "user", "gpt": "assistant", "observation": "tool", "tool": "tool"}[turn["from"]]
            out.append({"role": role, "content": turn["value"]})
    return out


def test_sharegpt_function_roles_system_and_tools_columns(tmp_path, tools_tokenizer):
    rows = [{"id": f"s-{i}", **sharegpt_row(m, t, hermes=i % 2 == 1)} for i, (m, t) in enumerate(conversations(False))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    _, records, _ = build_and_compare(tmp_path, tools_tokenizer, root, "sharegpt", sharegpt_to_trl)
    # a list of calls is one assistant turn with both; the arguments objects keep their written key order
    calls = records[0].messages[2]["tool_calls"]
    assert [list(c["function"]["arguments"]) for c in calls] == [["city", "unit"], ["zone", "city"]]
    assert records[0].messages[0] == {"content": "You help with weather and time.", "role": "system"}
    assert [m["role"] for m in records[0].messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]


def test_prompt_completion_with_tool_turns(tmp_path, tools_tokenizer):
    rows = [{"id": f"p-{i}", "prompt": m[:2] if m[0]["role"] == "system" else m[:1],
             "completion": m[2:] if m[0]["role"] == "system" else m[1:], "tools": t}
            for i, (m, t) in enumerate(conversations(True))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    build_and_compare(tmp_path, tools_tokenizer, root, "prompt_completion", lambda r: r["prompt"] + r["completion"],
                      struct_nulls="drop")


def test_a_column_mapping_names_every_field(tmp_path, tools_tokenizer):
    names = {"role": "speaker", "content": "text", "tool_calls": "calls", "reasoning_content": "thoughts",
             "tool_call_id": "answers", "name": "function"}
    rows = [{"id": f"c-{i}", "dialog": [{names.get(k, k): v for k, v in msg.items()} for msg in m], "functions": t}
            for i, (m, t) in enumerate(conversations(False))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    back = {v: k for k, v in names.items()}
    fmt = {"messages": "dialog", "tools": "functions", **names}
    result, _, _ = build_and_compare(tmp_path, tools_tokenizer, root, fmt,
                                     lambda r: [{back.get(k, k): v for k, v in m.items()} for m in r["dialog"]],
                                     struct_nulls="drop")
    assert result.data["inputs"]["sources"][0]["format"]["tool_calls"] == "calls"


# Refusals: one line naming the source, file, row, id and what is not carried.

def refused_build(tmp_path, tools_tokenizer, rows: list[dict], fmt="messages", schema=None, **entry):
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows, schema=schema)])
    config = load_config(config_for(tmp_path, tools_tokenizer, root, fmt, 1, **entry))
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    return str(error.value)


WHERE = "org/agentic: data/train-00000-of-00001.parquet: row 1 (id 'b')"


@pytest.mark.parametrize("message, reason", [
    ({"role": "assistant", "content": "x", "weight": 0}, "message 1: unknown field 'weight'"),
    ({"role": "function", "content": "x"}, "message 1: unknown role 'function' (expected one of system, developer, "
                                          "user, assistant, tool)"),
    ({"role": None, "content": "x"}, "message 1: no role (missing or null; expected one of system, developer, user, "
                                     "assistant, tool)"),  # said "unknown role None"
    ({"role": "user", "content": None}, "message 1: content is null, not a string"),
    ({"role": "assistant", "content": None}, "message 1: content is null, not a string"),
    ({"role": "user", "content": "x", "tool_calls": [call(1, "f", "{}")]},
     "message 1: tool_calls on a 'user' message"),
    ({"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
     "message 1: tool_calls[0] function.arguments is null, not a JSON string or an object"),
    ({"role": "assistant", "content": "x", "reasoning": 3}, "message 1: reasoning is a number, not a string"),
    ({"role": "assistant", "content": "x", "tool_calls": "[{\"function\": "}, "message 1: tool_calls is not JSON text"),
])
def test_what_the_record_cannot_carry_is_refused_by_name(tmp_path, tools_tokenizer, message, reason):
    good = {"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    bad = {"id": "b", "messages": [{"role": "user", "content": "hi"}, message]}
    error = refused_build(tmp_path, tools_tokenizer, [good, bad])
    assert error.startswith(f"malformed conversation: {WHERE}: {reason}") and "\n" not in error


@pytest.mark.parametrize("tools, reason", [
    ("[{\"type\": \"function\"", "tools is not JSON text"),
    ("{\"type\": \"function\"}", "tools is an object, not a list of function schemas"),
    ("[{\"a\": 1, \"a\": 2}]", "tools is not JSON text (duplicate key 'a')"),
    ("[3]", "tools[0] is a number, not an object"),
])
def test_a_tools_column_that_is_not_a_list_of_schemas_is_refused(tmp_path, tools_tokenizer, tools, reason):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    error = refused_build(tmp_path, tools_tokenizer, [{"id": "a", "messages": messages, "tools": None},
                                                      {"id": "b", "messages": messages, "tools": tools}])
    assert error.startswith(f"malformed conversation: {WHERE}: {reason}")


def test_an_unknown_column_refuses_the_file_and_ignore_fields_builds_without_it(tmp_path, tools_tokenizer):
    rows = [{"id": f"r{i}", "messages": m, "tools": t, "category": "x"} for i, (m, t) in enumerate(conversations(False))]
    error = refused_build(tmp_path, tools_tokenizer, rows, struct_nulls="drop")
    assert "data/train-00000-of-00001.parquet: schema: column 'category' is not one this format reads" in error
    assert "ignore_fields" in error
    config = load_config(config_for(tmp_path, tools_tokenizer, tmp_path / "src", "messages", 3, struct_nulls="drop",
                                    ignore_fields=["category", "reasoning_content"]))
    result = make(config, tmp_path / "ignored", progress=False)
    source = result.data["inputs"]["sources"][0]
    assert source["ignore_fields"] == ["category", "reasoning_content"]
    # a carried field listed is left out on purpose: no reasoning reaches the template or the counts
    assert result.data["counts"]["sources"][0]["messages"]["reasoning_turns"] == 0
    with prepare(config) as prepared:
        assert not any("reasoning_content" in m for c in prepared.conversations() for m in c.messages)


def test_tool_calls_as_json_text_are_the_list_they_spell(tmp_path, tools_tokenizer):
    rows = [{"id": f"j{i}", "messages": [{**m, "tool_calls": json.dumps(m["tool_calls"])} if m.get("tool_calls") else
                                         {**m, "tool_calls": None} for m in msgs], "tools": t}
            for i, (msgs, t) in enumerate(conversations(True))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    build_and_compare(tmp_path, tools_tokenizer, root, "messages", lambda r: [
        {**m, "tool_calls": json.loads(m["tool_calls"])} if m["tool_calls"] else m for m in r["messages"]],
        struct_nulls="drop")  # the tools, typed


def test_a_field_of_a_type_without_json_values_refuses_the_file(tmp_path, tools_tokenizer):
    kind = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_call_id", pa.binary())]))
    table = pa.table({"id": ["a"], "messages": pa.array([[{"role": "user", "content": "hi", "tool_call_id": b"x"}]],
                                                        kind)})
    error = refused_build(tmp_path, tools_tokenizer, table.to_pylist(), schema=pa.schema([("id", pa.string()),
                                                                                          ("messages", kind)]))
    assert "data/train-00000-of-00001.parquet: schema: messages field 'tool_call_id' is binary, which has no " \
           "JSON value" in error


def test_sharegpt_function_call_values_are_checked(tmp_path, tools_tokenizer):
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            {"id": "b", "conversations": [{"from": "human", "value": "hi"},
                                          {"from": "function_call", "value": "{\"name\": \"f\", \"args\": {}}"}]}]
    error = refused_build(tmp_path, tools_tokenizer, rows, "sharegpt")
    assert f"{WHERE}: message 1: function_call value is not a call {{name, arguments}} or a list of them " \
           "(unknown key 'args')" in error


def test_refusals_are_skipped_and_counted_under_skip(tmp_path, tools_tokenizer):
    rows = [{"id": f"r{i}", "messages": m, "tools": t} for i, (m, t) in enumerate(conversations(False))]
    rows[0]["messages"][2]["tool_calls"][0]["function"]["name"] = ""  # an agentic conversation, refused
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 3, policy="skip", struct_nulls="drop"))
    result = make(config, tmp_path / "out", progress=False)
    assert result.data["counts"]["malformed_in_source"] == 1
    kept = [(m, t) for m, t in as_datasets_reads(root, trl_messages)][1:]
    assert result.data["counts"]["sources"][0]["messages"] == counted(kept)  # the malformed one is not counted


@pytest.mark.parametrize("ignore, message", [
    ("category", "expected a list of column or message field names"),
    (["messages"], "the messages format cannot build without it"),
    (["x", "x"], "listed twice"),
    ([""], "expected a column or message field name"),
])
def test_ignore_fields_is_checked_at_load(tmp_path, tools_tokenizer, ignore, message):
    with pytest.raises(BuildError, match=f"ignore_fields.*{message}"):
        load_config(config_for(tmp_path, tools_tokenizer, tmp_path, "messages", 1, ignore_fields=ignore))


# The round trip: what a parquet holds comes out of the spill as the same Python values.

JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
KEY = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
ARGUMENTS = st.dictionaries(KEY, JSON_SCALAR, max_size=4)


@st.composite
def agentic_conversation(draw):
    messages = [{"role": "user", "content": draw(st.text(max_size=20))}]
    for _ in range(draw(st.integers(0, 3))):
        calls = draw(st.lists(ARGUMENTS, max_size=3))
        message = {"role": "assistant", "content": draw(st.one_of(st.text(max_size=10), st.none()) if calls else
                                                        st.text(max_size=10))}
        if calls:
            message["tool_calls"] = [call(n, draw(KEY), json.dumps(a, ensure_ascii=draw(st.booleans())))
                                     for n, a in enumerate(calls)]
        if draw(st.booleans()):
            message[draw(st.sampled_from(("reasoning_content", "thinking", "reasoning")))] = draw(st.text(max_size=10))
        messages.append(message)
        for n, _ in enumerate(calls):
            messages.append({"role": "tool", "content": draw(st.text(max_size=10)), "tool_call_id": f"call_{n}"})
    tools = draw(st.one_of(st.none(), st.lists(st.dictionaries(KEY, JSON_SCALAR, min_size=1, max_size=3), max_size=2)))
    return messages, tools


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(convs=st.lists(agentic_conversation(), min_size=1, max_size=4))
def test_round_trip_through_parquet_and_the_spill(tmp_path_factory, tools_tokenizer, convs):
    tmp = tmp_path_factory.mktemp("rt")
    # tools as JSON text (any keys, any order, per row); arguments as JSON text: kept byte for byte
    rows = [{"id": f"r{i}", "messages": m, "tools": None if t is None else json.dumps(t)}
            for i, (m, t) in enumerate(convs)]
    root = write_source(tmp / "src", [pa.Table.from_pylist(rows)])
    # the tools drawn are any JSON objects, which declare no function the calls name: a round trip of values
    config = load_config(config_for(tmp, tools_tokenizer, root, "messages", 1, undeclared_tool_calls="keep"))
    with prepare(config) as prepared:
        records = sorted(prepared.conversations(), key=lambda c: c.origin.index)
    assert not prepared.malformed
    held = pq.read_table(root / "data" / "train-00000-of-00001.parquet").to_pylist()
    for record, row, (messages, tools) in zip(records, held, convs):
        # what pyarrow gives back for each message (the struct's nulls at message level left out, as
        # apply_chat_template leaves them out), in the record's key order: content, role, the rest
        expected = tuple({"content": m["content"], "role": m["role"],
                          **{k: v for k, v in m.items() if k not in ("content", "role") and v is not None}}
                         for m in row["messages"])
        assert record.messages == expected
        assert [list(m) for m in record.messages] == [list(m) for m in expected]
        assert record.tools == tools and json.dumps(record.tools) == json.dumps(tools)  # key order too
        # and the values the source wrote: arguments text unchanged, reasoning where it was put
        for got, wrote in zip(record.messages, messages):
            assert {k: v for k, v in got.items() if v is not None} == {k: v for k, v in wrote.items() if v is not None}


# show and report: tool calls, tool results and reasoning marked from the template's markup.

def test_regions_follow_the_markup_and_close_at_the_segment_end():
    from databuild.views.marks import Region, regions

    text = ("<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\ncut")
    think, call_at, result = text.index("<think>"), text.index("<tool_call>"), text.index("<tool_response>")
    assert regions(text) == [
        Region(think, text.index("</think>") + 8, "reasoning"),
        Region(call_at, text.index("</tool_call>") + 12, "tool call"),
        Region(result, text.index("</tool_response>") + 16, "tool result"),
        Region(text.rindex("<think>"), len(text), "reasoning")]
    # a conversation continued from an earlier row: the region it was in runs from the start
    assert regions("x}\n</tool_call><|im_end|>") == [Region(0, 15, "tool call")]
    harmony = ("<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.f <|constrain|>json<|message|>{}<|call|><|start|>functions.f to=assistant<|channel|>"
               "commentary<|message|>1<|end|>")
    assert [r.kind for r in regions(harmony)] == ["reasoning", "tool call", "tool result"]
    assert regions("plain <|im_start|>user\nHi<|im_end|>") == []


def test_show_marks_tool_calls_results_and_reasoning(tmp_path, tools_tokenizer):
    from test_build import run_cli

    rows = [{"id": f"r{i}", "messages": m, "tools": t} for i, (m, t) in enumerate(conversations(False))]
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 2, row_tokens=512,
                                    struct_nulls="drop"))
    result = make(config, tmp_path / "out", progress=False)
    shown = "".join(run_cli("show", str(result.parquet), "--row", str(k), "--tokenizer", str(tools_tokenizer),
                            "--color", "never").stdout for k in range(2))
    assert "⟨tool call⟩[[<tool_call>\n{\"name\": \"get_time\"" in shown
    assert "</tool_call>]]⟨/tool call⟩" in shown
    assert "⟨tool result⟩<tool_response>\n" in shown and "</tool_response>⟨/tool result⟩" in shown
    assert "⟨reasoning⟩[[<think>\n" in shown and "</think>]]⟨/reasoning⟩" in shown
    assert shown.count("⟨tool call⟩") == shown.count("⟨/tool call⟩")
    page = run_cli("report", str(result.parquet), "-o", str(tmp_path / "r.html"), "--rows", "2",
                   "--tokenizer", str(tools_tokenizer))
    assert page.returncode == 0
    html_page = (tmp_path / "r.html").read_text()
    assert '<span class="region tool-call">⟨tool call⟩</span>' in html_page
    assert '<span class="region tool-result">⟨/tool result⟩</span>' in html_page
    assert '<span class="region reasoning">⟨reasoning⟩</span>' in html_page


def test_plain_chat_rows_show_no_marks(tiny_build):
    from test_build import run_cli

    shown = run_cli("show", str(tiny_build.parquet), "--row", "5", "--color", "never").stdout
    assert "[[" in shown and "⟨" not in shown


def test_a_sharegpt_batch_with_a_function_call_and_bytes_that_are_not_utf8_reads_without_raising():
    """Only the function_call items are read into Python: another message of the batch that is not UTF-8
    keeps its bytes for the reader to refuse as malformed, row by row (it raised UnicodeDecodeError, a
    traceback, when the whole batch was read into Python)."""
    import pyarrow as pa

    from databuild.sources.formats import FORMATS

    text = lambda values: pa.array(values, pa.binary()).view(pa.string())  # noqa: E731
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}).encode()
    values = [b"weather?", call, b"18C", b"hi", b"bad \xc3("]
    turns = pa.StructArray.from_arrays([pa.array(["human", "function_call", "observation", "human", "gpt"]),
                                        text(values)], names=["from", "value"])
    conversations = pa.ListArray.from_arrays(pa.array([0, 3, 5], pa.int32()), turns)
    flat = FORMATS["sharegpt"].to_messages(pa.record_batch({"conversations": conversations}))
    assert flat.contents[1].as_py() is None
    assert json.loads(flat.fields[1].as_py())["tool_calls"][0]["function"]["name"] == "get_weather"
    assert flat.contents.view(pa.binary())[4].as_py() == b"bad \xc3("
