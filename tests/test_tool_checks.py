"""Tool calls checked as data (issue 29): arguments that are not valid JSON and calls to a function the
tools list does not declare are malformed, named by file, row, id, message and call, skipped and counted
under on_bad_conversation: skip, kept and counted under the source's relaxing key (recorded in the
manifest); a conversation that calls tools with no tools list is counted and said by make and the report.
Every shape a template accepts reaches it as written: flat calls and content as a list of parts."""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from databuild.build import make, prepare
from databuild.cli import main
from databuild.config import load_config
from databuild.encode.render import Renderer, load_tokenizer
from databuild.errors import BuildError
from families import FAMILIES, family_tokenizer
from source_folders import write_source
from test_agentic_sources import CLOCK, WEATHER, call, config_for
from test_build import KWARGS

FILE = "data/train-00000-of-00001.parquet"


def answered(k: int, calls: list[dict]) -> list[dict]:
    return [{"role": "user", "content": f"Weather in Paris{k}?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c.get("id"), "content": "21"} for c in calls),
            {"role": "assistant", "content": f"21 degrees in Paris{k}."}]


def good(k: int) -> dict:
    return {"id": f"good-{k}", "messages": answered(k, [call(1, "get_weather", json.dumps({"city": f"Paris{k}"}))]),
            "tools": json.dumps([WEATHER, CLOCK])}


def source(tmp_path, *odd: dict, good_rows: int = 8):
    """good_rows valid conversations with one odd row after the first; tools as JSON text, arguments too."""
    rows = [good(k) for k in range(good_rows)]
    rows[1:1] = odd
    return write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])


def build(tmp_path, tokenizer, root, rows=2, **entry):
    tmp_path.mkdir(exist_ok=True)
    return make(load_config(config_for(tmp_path, tokenizer, root, "messages", rows, **entry)), tmp_path / "out",
                progress=False)


INVALID = {"id": "bad-json", "messages": answered(9, [call(1, "get_weather", '{"city": "Paris",}')]),
           "tools": json.dumps([WEATHER])}
UNDECLARED = {"id": "undeclared", "messages": answered(9, [call(1, "get_weather", "{}"), call(2, "get_time", "{}")]),
              "tools": json.dumps([WEATHER])}


@pytest.mark.parametrize("odd, reason, key, count", [
    (INVALID, "message 1: tool_calls[0] (id 'call_1', function 'get_weather'): arguments are not valid JSON "
              "(Expecting property name enclosed in double quotes: line 1 column 18 (char 17))",
     "invalid_tool_arguments", "tool_calls_invalid_arguments"),
    (UNDECLARED, "message 1: tool_calls[1] (id 'call_2', function 'get_time') calls a function the conversation's "
                 "tools do not declare (they declare 'get_weather')",
     "undeclared_tool_calls", "tool_calls_undeclared"),
])
def test_bad_tool_calls_are_malformed_named_skipped_or_kept_under_their_key(tmp_path, tools_tokenizer, odd, reason,
                                                                            key, count):
    root = source(tmp_path, odd)
    with pytest.raises(BuildError) as error:
        build(tmp_path, tools_tokenizer, root)
    message = str(error.value)
    assert message.startswith(f"malformed conversation: org/agentic: {FILE}: row 1 (id {odd['id']!r}): {reason}; "
                              f"{key}: keep on the source")
    assert "\n" not in message

    skipped = build(tmp_path / "skip", tools_tokenizer, root, policy="skip").data
    assert skipped["counts"]["sources"][0]["malformed"] == 1  # in the source (the stream may not reach it)
    assert skipped["counts"]["sources"][0]["messages"][count] == 0

    kept = build(tmp_path / "keep", tools_tokenizer, root, **{key: "keep"}).data
    assert kept["inputs"]["sources"][0]["rules"][key] == "keep"
    assert kept["counts"]["sources"][0]["malformed"] == 0
    assert kept["counts"]["sources"][0]["messages"][count] == 1
    # the rules are in the pinned inputs: relaxing one is a different build
    assert skipped["inputs"]["sources"][0]["rules"][key] == "refuse"


def test_a_rule_takes_only_its_values(tmp_path, tools_tokenizer):
    with pytest.raises(BuildError, match=r"key 'undeclared_tool_calls' = 'skip': expected one of refuse, keep"):
        load_config(config_for(tmp_path, tools_tokenizer, tmp_path, "messages", 1, undeclared_tool_calls="skip"))


def test_calls_without_a_tools_list_are_counted_and_said(tmp_path, tools_tokenizer):
    bare = [{"id": f"bare-{k}", "messages": good(k)["messages"], "tools": tools}
            for k, tools in enumerate([None, "[]", None])]
    root = source(tmp_path, *bare)
    config = config_for(tmp_path, tools_tokenizer, root, "messages", 2)
    result = CliRunner().invoke(main, ["make", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert ("note: 3 conversations call tools and have no tools list (the prompt shows no tool; many datasets "
            "describe them in the system text) (conversations_with_undeclared_tools)") in result.output
    manifest = json.loads((tmp_path / "out" / "agentic.manifest.json").read_text())
    assert manifest["counts"]["sources"][0]["messages"]["conversations_with_undeclared_tools"] == 3
    page = CliRunner().invoke(main, ["report", str(tmp_path / "out" / "agentic.parquet"), "-o",
                                     str(tmp_path / "r.html")])
    assert page.exit_code == 0, page.output
    assert "3 conversations call tools and have no tools list" in (tmp_path / "r.html").read_text()


def test_flat_and_wrapped_calls_with_ids_reach_the_template_as_written(tmp_path, tools_tokenizer):
    flat = {"id": "c9", "name": "get_weather", "arguments": {"city": "Rome"}}
    wrapped = call(8, "get_time", '{"zone": "CET"}')
    rows = [{"id": "mixed", "messages": answered(9, [flat, wrapped]), "tools": json.dumps([WEATHER, CLOCK])},
            good(0), good(1)]
    # as JSON text per message list: each call keeps its own shape and keys (a struct would unify them)
    table = pa.table({"id": [r["id"] for r in rows],
                      "messages": [[{**m, "tool_calls": None if "tool_calls" not in m else json.dumps(m["tool_calls"])}
                                    for m in r["messages"]] for r in rows],
                      "tools": [r["tools"] for r in rows]})
    root = write_source(tmp_path / "src", [table])
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 1))
    with prepare(config) as prepared:
        record = next(c for c in prepared.conversations() if c.origin.id == "mixed")
    assert record.messages[1]["tool_calls"] == [flat, wrapped]
    reference = load_tokenizer(tools_tokenizer)
    written = reference.apply_chat_template(copy.deepcopy(rows[0]["messages"]), tools=[WEATHER, CLOCK],
                                            tokenize=False, **KWARGS)
    assert Renderer.for_tokenizer(reference, KWARGS).render(record.messages, record.tools) == written
    assert '{"name": "get_weather", "arguments": {"city": "Rome"}}' in written  # the template read the flat call
    assert make(config, tmp_path / "out", progress=False).data["counts"]["sources"][0]["malformed"] == 0


def test_content_as_a_list_of_parts_reaches_the_template(tmp_path):
    """Qwen3.5's template reads content as a string or a list of parts (`'text' in item`)."""
    family = FAMILIES["qwen3_5_think"]
    reference = family_tokenizer(family, tmp_path)
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}]
    # every part has both keys: the struct's drop policy drops nothing
    root = write_source(tmp_path / "src", [pa.Table.from_pylist([{"id": "parts", "messages": messages}])])
    config = load_config(config_for(tmp_path, tmp_path / f"tokenizer-{family.name}", root, "messages", 1,
                                    struct_nulls="drop"))
    with prepare(config) as prepared:
        record = next(prepared.conversations())
    assert record.messages == tuple(messages) and list(record.messages[0]) == ["content", "role"]
    written = reference.apply_chat_template(copy.deepcopy(messages), tokenize=False, **KWARGS)
    assert "Hi there" in written and "Hello." in written
    assert Renderer.for_tokenizer(reference, KWARGS).render(record.messages) == written


def test_a_content_that_is_no_list_of_parts_is_malformed(tmp_path, tools_tokenizer):
    rows = [good(0), {"id": "odd", "messages": [{"role": "user", "content": "[1]"}], "tools": None}, good(1)]
    table = pa.Table.from_pylist(rows)
    # content [1]: a list whose items are not parts (objects with a string type)
    messages = pa.array([[{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                         [{"role": "user", "content": [{"type": None, "text": "y"}]}],
                         [{"role": "user", "content": [{"type": "text", "text": "z"}]}]])
    table = table.set_column(1, "messages", messages)
    root = write_source(tmp_path / "src", [table])
    with pytest.raises(BuildError, match=r"row 1 \(id 'odd'\): message 0: content\[0\] is an object, not a part"):
        build(tmp_path, tools_tokenizer, root, rows=1, struct_nulls="drop")


# Parquet structs: written with pyarrow from Python dicts, every call's arguments hold every call's keys.

CALLS = [("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {"timezone": "Europe/Berlin"}),
         ("calculate", {"expression": "2+2"}), ("search", {"query": "news", "max_results": 3})]
SCHEMAS = [{"type": "function", "function": {"name": name, "description": name, "parameters": {
    "type": "object", "properties": {key: {"type": "string"} for key in arguments}}}} for name, arguments in CALLS]


def struct_rows():
    rows = []
    for k in range(12):
        name, arguments = CALLS[k % len(CALLS)]
        rows.append({"id": f"s{k}", "tools": SCHEMAS, "messages": [
            {"role": "user", "content": f"Question {k}"},
            {"role": "assistant", "content": None, "tool_calls": [call(k, name, arguments)]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": "ok"},
            {"role": "assistant", "content": f"Answer {k}."}]})
    return rows


def test_without_nulls_drops_each_null_key_at_every_depth():
    """A struct's null keys dropped and counted through lists and structs at any depth; a null list item
    kept, a value of another shape than its type's left as it is (expected values worked out by hand)."""
    from databuild.sources.formats.structs import without_nulls

    kind = pa.list_(pa.struct([("a", pa.int64()), ("b", pa.list_(pa.struct([("c", pa.string()), ("d", pa.string())]))),
                               ("e", pa.struct([("f", pa.int64())]))]))
    value = [{"a": 1, "b": [{"c": "x", "d": None}, None, {"c": None, "d": None}], "e": None}, None,
             {"a": None, "b": None, "e": {"f": None}}]
    assert without_nulls(value, kind) == ([{"a": 1, "b": [{"c": "x"}, None, {}]}, None, {"e": {}}], 7)
    assert without_nulls(None, kind) == (None, 0)
    assert without_nulls(["a"], kind.value_type) == (["a"], 0)
    assert without_nulls("text", pa.string()) == ("text", 0)


def test_struct_arguments_are_refused_naming_the_column_or_built_without_the_nulls(tmp_path, tools_tokenizer):
    rows = struct_rows()
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    assert pa.types.is_struct(pq.read_schema(root / FILE).field("messages").type.value_type.field(
        "tool_calls").type.value_type.field("function").type.field("arguments").type)
    with pytest.raises(BuildError) as error:
        build(tmp_path, tools_tokenizer, root)
    message = str(error.value)
    assert message.startswith(f"dataset org/agentic@{'1' * 40}: {FILE}: schema: messages field "
                              "'tool_calls'[].function.arguments is a parquet struct, which holds every row's keys, "
                              "null where a row had none, and cannot say which keys a row wrote; store it as JSON text "
                              "(a string) or as datasets' Json type, or set struct_nulls: drop on the source")
    assert "\n" not in message
    # the tools alone as structs: refused the same way, naming their column
    texts = [{**r, "messages": [{**m, "tool_calls": None if "tool_calls" not in m else json.dumps(m["tool_calls"])}
                                for m in r["messages"]]} for r in rows]
    tools_only = write_source(tmp_path / "tools-only", [pa.Table.from_pylist(texts)])
    with pytest.raises(BuildError, match=r"schema: column 'tools'\[\] is a parquet struct"):
        build(tmp_path / "t", tools_tokenizer, tools_only)

    result = build(tmp_path / "drop", tools_tokenizer, root, rows=4, struct_nulls="drop", row_tokens=256)
    assert result.data["inputs"]["sources"][0]["rules"]["struct_nulls"] == "drop"
    # each call lacks the other calls' argument keys (5 of the 6); each tools list, each schema's other properties
    per_call = {name: 6 - len(arguments) for name, arguments in CALLS}
    per_tools = sum(6 - len(arguments) for _, arguments in CALLS)
    assert result.data["counts"]["sources"][0]["messages"]["struct_null_keys_dropped"] == sum(
        per_call[CALLS[k % 4][0]] + per_tools for k in range(12))
    tokenizer = load_tokenizer(tools_tokenizer)
    table = pq.read_table(result.parquet)
    text = tokenizer.decode([t for row in table.column("input_ids").to_pylist() for t in row])
    targets = tokenizer.decode([t for ids, mask in zip(table.column("input_ids").to_pylist(),
                                                       table.column("loss_mask").to_pylist())
                                for t, m in zip(ids, mask) if m])
    assert "null" not in text and "None" not in text
    written = dict(CALLS)
    found = [json.loads(piece.split("</tool_call>")[0]) for piece in targets.split("<tool_call>\n")[1:]]
    assert found and all(call["arguments"] == written[call["name"]] for call in found)


# A stop token spelled in an assistant field, under a template with generation tags (not the inference rule).

@pytest.mark.parametrize("field, message", [
    ("content", {"role": "assistant", "content": "Sunny<|endoftext|> and warm."}),
    ("reasoning_content", {"role": "assistant", "content": "Sunny.", "reasoning_content": "Look<|endoftext|>up."}),
    ("tool_calls", {"role": "assistant", "content": None,
                    "tool_calls": [call(1, "get_weather", json.dumps({"city": "<|endoftext|>"}))]}),
])
def test_a_stop_token_in_a_field_is_refused_under_a_tagged_template(tmp_path, tools_tokenizer, field, message):
    from databuild.encode.render import GENERATION_TAG

    assert GENERATION_TAG.search((tools_tokenizer / "chat_template.jinja").read_text())
    odd = {"id": "stop", "messages": [{"role": "user", "content": "Weather?"}, message,
                                      *([{"role": "tool", "tool_call_id": "call_1", "content": "21"},
                                         {"role": "assistant", "content": "21."}] if field == "tool_calls" else [])],
           "tools": json.dumps([WEATHER])}
    root = source(tmp_path, odd, good_rows=3)
    with pytest.raises(BuildError) as error:
        build(tmp_path, tools_tokenizer, root, rows="all")
    assert str(error.value) == (
        f"conversation cannot be built (stop_token_in_field): org/agentic: {FILE}: row 1 (id 'stop'): assistant "
        f"message 1: its {field} spells the stop token '<|endoftext|>': the model would have stopped there; set "
        "on_bad_conversation: skip in the config to skip and count such conversations")
    skipped = build(tmp_path / "skip", tools_tokenizer, root, rows="all", policy="skip").data
    assert skipped["counts"]["conversations_skipped"]["stop_token_in_field"] == 1
    assert [s["id"] for s in skipped["skipped_conversations"]] == ["stop"]
