"""Sources in JSON Lines and JSON, and parquet written by `datasets` (Json columns): the same
conversations give the same rows whichever way they were written, every value as written (key
order, numbers, unicode, no key added), bad JSON refused naming file, line and id."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ruamel.yaml import YAML

from databuild.build import make, prepare
from databuild.config import load_config
from databuild.encode.render import load_tokenizer
from databuild.errors import BuildError
from test_agentic_sources import CLOCK, WEATHER, config_for, conversations, stream_rows


def rows_of(arguments_as_text: bool) -> list[dict]:
    """The tool-calling conversations as rows of TRL's schema: id, messages, and tools where it has some."""
    return [{"id": f"c-{i}", "messages": m, **({} if t is None else {"tools": t})}
            for i, (m, t) in enumerate(conversations(arguments_as_text))]


def write_jsonl(path: Path, rows: list, opener=open) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wt", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_zst(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.CompressedOutputStream(str(path), "zstd") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows).encode())
    return path


def write_datasets(path: Path, rows: list) -> Path:
    """As `datasets` 5.2.0 writes them with its Json type: each message, and the tools list, Json (what it
    writes by itself, on_mixed_types="use_json", keeps the tools a struct: refused, formats/structs.py)."""
    import datasets
    from datasets import Features, Json, List, Value

    path.parent.mkdir(parents=True, exist_ok=True)
    features = Features({"id": Value("string"), "messages": List(Json()), "tools": Json()})
    datasets.Dataset.from_list([{"tools": None, **row} for row in rows], features=features).to_parquet(str(path))
    return path


def built(tmp_path: Path, tokenizer: Path, root: Path, rows: int, **entry):
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = load_config(config_for(tmp_path, tokenizer, root, "messages", rows, **entry))
    return config, make(config, tmp_path / "out", progress=False)


def test_the_same_conversations_give_the_same_rows_however_written(tmp_path, tools_tokenizer):
    objects, texts = rows_of(False), rows_of(True)
    # text: arguments as JSON text, tools as JSON text (a string column), in parquet
    as_text = [{**r, "tools": json.dumps(r["tools"]) if "tools" in r else None} for r in texts]
    roots = {
        "jsonl": write_jsonl(tmp_path / "jsonl" / "data" / "train-00000-of-00001.jsonl", objects).parents[1],
        "json": tmp_path / "json",
        "jsonl.gz+zst": tmp_path / "compressed",
        "datasets": write_datasets(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", objects).parents[1],
        "parquet-text": tmp_path / "text",
    }
    (roots["json"] / "data").mkdir(parents=True)
    (roots["json"] / "data" / "train.json").write_text(json.dumps(objects, indent=2, ensure_ascii=False))
    write_jsonl(roots["jsonl.gz+zst"] / "data" / "train-00000-of-00002.jsonl.gz", objects[:7], gzip.open)
    write_zst(roots["jsonl.gz+zst"] / "data" / "train-00001-of-00002.jsonl.zst", objects[7:])
    (roots["parquet-text"] / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(as_text), roots["parquet-text"] / "data" / "train-00000-of-00001.parquet")
    # datasets wrote Json columns (what this test is for), in the messages or deeper
    assert "extension<arrow.json>" in str(pq.read_schema(roots["datasets"] / "data" / "train-00000-of-00001.parquet"))

    # the rows without databuild: transformers' render of the conversations as json.loads gives them
    reference = load_tokenizer(tools_tokenizer)
    convs = [(copy.deepcopy(r["messages"]), r.get("tools")) for r in objects]
    expected = stream_rows(reference, convs)
    hashes = {}
    for kind, root in roots.items():
        _, result = built(tmp_path / kind, tools_tokenizer, root, len(expected))
        table = pq.read_table(result.parquet)
        assert list(zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist())) == expected, kind
        hashes[kind] = result.data["output"]["rows_sha256"]
        assert result.data["counts"]["sources"][0]["messages"] == {
            "tool_calls": 12, "tool_results": 12, "reasoning_turns": 18, "conversations_with_tools": 6,
            "conversations_with_undeclared_tools": 0, "struct_null_keys_dropped": 0, "tool_calls_invalid_arguments": 0,
            "tool_calls_undeclared": 0}, kind
    assert len(set(hashes.values())) == 1, hashes


EXACT = [
    {"id": "e-0", "messages": [
        {"role": "user", "content": "Nombres: é, 你好, 👩‍💻, \u00e9 and a tab\t"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {
                "unit": "celsius", "city": "Paris", "n": 1.0, "m": 1, "big": 2 ** 70, "neg": -0.0,
                "tiny": 5e-324, "nested": {"z": [1, 2.5, None, True], "a": {}}}}},
            {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]},
        {"role": "tool", "tool_call_id": "a", "name": "get_weather", "content": "21"},
        {"role": "tool", "tool_call_id": "b", "name": "get_time", "content": "14:05"},
        {"role": "assistant", "content": "Done."}],
     "tools": [CLOCK, WEATHER]},
    {"id": "e-1", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
    {"id": "e-2", "messages": [  # message fields in another order than e-0's, each message its own
        {"role": "user", "content": "z"},
        {"tool_calls": [{"function": {"name": "get_time", "arguments": {"zone": "UTC"}}, "type": "function",
                         "id": "c"}], "role": "assistant", "reasoning_content": "Time.", "content": None},
        {"name": "get_time", "content": "9:00", "role": "tool", "tool_call_id": "c"},
        {"content": "Nine.", "reasoning_content": "Said.", "role": "assistant"}],
     "tools": [CLOCK]},
]


def test_every_value_is_read_as_written(tmp_path, tools_tokenizer):
    """Key order kept, no key added (two calls with different argument keys: Arrow's JSON reader
    would give each the other's keys as null), 1.0 stays a float and 1 an integer, an integer
    beyond int64 exact, unicode as written (raw or escaped), in JSON Lines, a JSON array, and
    `datasets`' Json columns."""
    line = json.dumps(EXACT[0], ensure_ascii=True)  # \\u escapes in the file
    assert "\\u00e9" in line and "1180591620717411303424" in line and '"n": 1.0' in line
    root = tmp_path / "src"
    (root / "data").mkdir(parents=True)
    (root / "data" / "train.jsonl").write_text("\n".join([line] + [json.dumps(r, ensure_ascii=False)
                                                                      for r in EXACT[1:]]))
    _, records = read_records(tmp_path / "jsonl", tools_tokenizer, root)
    assert_exact(records, EXACT)
    array = tmp_path / "array"
    (array / "data").mkdir(parents=True)
    (array / "data" / "train.json").write_text(json.dumps(EXACT, indent=1, ensure_ascii=False))
    assert_exact(read_records(tmp_path / "json", tools_tokenizer, array)[1], EXACT)
    # datasets: what it writes exactly (its ujson writes -0.0 as 0.0; an integer beyond int64 sends it to a
    # fallback that encodes each message twice, refused below)
    within = copy.deepcopy(EXACT)
    for key in ("big", "neg"):
        del within[0]["messages"][1]["tool_calls"][0]["function"]["arguments"][key]
    ds = write_datasets(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", within).parents[1]
    assert_exact(read_records(tmp_path / "datasets", tools_tokenizer, ds)[1], within, tools_from_datasets=True)


def test_messages_datasets_encoded_twice_are_refused_saying_so(tmp_path, tools_tokenizer):
    import datasets

    ds = tmp_path / "ds"
    (ds / "data").mkdir(parents=True)
    rows = [{key: value for key, value in row.items() if key != "tools"} for row in EXACT]
    datasets.Dataset.from_list(rows, on_mixed_types="use_json").to_parquet(str(ds / "data" /
                                                                              "train-00000-of-00001.parquet"))
    assert isinstance(json.loads(pq.read_table(ds / "data" / "train-00000-of-00001.parquet").column(
        "messages").to_pylist()[0][0]), str)  # a JSON string holding the message's JSON text
    config = load_config(config_for(tmp_path, tools_tokenizer, ds, "messages", 1))
    with pytest.raises(BuildError, match=r"row 0 \(id 'e-0'\): message 0 is a string, not an object \(a Json value "
                                         r"holding a message's JSON text as a string: encoded twice"):
        make(config, tmp_path / "out", progress=False)


def read_records(tmp_path: Path, tokenizer: Path, root: Path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = load_config(config_for(tmp_path, tokenizer, root, "messages", 1))
    with prepare(config) as prepared:
        return config, sorted(prepared.conversations(), key=lambda c: c.origin.index)


def assert_exact(records, rows: list[dict], tools_from_datasets: bool = False):
    first = records[0]
    calls = first.messages[1]["tool_calls"]
    arguments = calls[0]["function"]["arguments"]
    written = rows[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.dumps(arguments) == json.dumps(written)  # same keys, same order, same numbers
    assert list(arguments) == [k for k in ["unit", "city", "n", "m", "big", "neg", "tiny", "nested"] if k in written]
    assert type(arguments["n"]) is float and type(arguments["m"]) is int and arguments["tiny"] == 5e-324
    if "big" in written:
        assert arguments["big"] == 2 ** 70 and str(arguments["neg"]) == "-0.0"
    assert calls[1]["function"]["arguments"] == {"zone": "CET"}  # nothing of the other call's keys
    assert first.messages[0]["content"] == "Nombres: é, 你好, 👩‍💻, é and a tab\t"
    if not tools_from_datasets:  # datasets' own tools column is a struct (the other tools' keys: issue 29's policy)
        assert json.dumps(first.tools) == json.dumps([CLOCK, WEATHER])
    assert records[1].messages == ({"content": "x", "role": "user"}, {"content": "y", "role": "assistant"})
    # every message: content and role first (the record's), then its own fields in its own order, nothing added
    for record, row in zip(records, rows):
        for got, written in zip(record.messages, row["messages"]):
            assert list(got) == ["content", "role"] + [k for k in written if k not in ("content", "role")
                                                       and written[k] is not None], (record.id, got)
    assert json.dumps(records[2].messages[1]["tool_calls"]) == json.dumps(rows[2]["messages"][1]["tool_calls"])


BAD_LINES = [
    ('{"id": "b", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo",}]}',
     "line 2 is not JSON (Expecting property name enclosed in double quotes"),
    ('{"id": "b", "id": "c", "messages": []}', "line 2 is not JSON (duplicate key 'id')"),
    ('{"id": "b", "messages": [{"role": "user", "content": "hi"}], "tools": [{"x": NaN}]}',
     "line 2 is not JSON (NaN is not a JSON number)"),
    ('{"id": "b", "messages": [{"role": "user", "content": "x"}], "tools": [{"n": 1e400}]}',
     "line 2 is not JSON (the number 1e400 is beyond a 64-bit float)"),
    ('', "line 2 is blank, not a JSON object"),
    ('[1, 2]', "line 2: a JSON list, not an object"),
    ('{"id": "b", "messages": [{"role": "user", "content": ["a", "b"]}]}', "message 0: content[0] is a string, "
                                                                           "not a part"),
    ('{"id": "b", "messages": [{"role": 7, "content": "x"}]}', "line 2: message 0: role is a number, not a string"),
]


@pytest.mark.parametrize("line, reason", BAD_LINES)
def test_a_bad_line_is_refused_naming_file_line_and_id(tmp_path, tools_tokenizer, line, reason):
    good = json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"},
                                               {"role": "assistant", "content": "yo " * 40}]})
    root = tmp_path / "src"
    (root / "data").mkdir(parents=True)
    last = good.replace('"a"', '"d"')
    (root / "data" / "train.jsonl").write_text(f"{good}\n{line}\n{last}\n")
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 1))
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    message = str(error.value)
    assert "org/agentic: data/train.jsonl: row 1 (id " in message and reason in message, message
    assert "\n" not in message
    # under skip: built without it, counted
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", "all", policy="skip"))
    result = make(config, tmp_path / "skip", progress=False)
    assert result.data["counts"]["conversations_skipped"]["malformed"] == 1


def test_ids_of_two_types_in_json_rows_are_named_as_such(tmp_path, tools_tokenizer):
    """One integer id among string ids: the rows' id column has no one type, and the refusal said only that it
    was extension<arrow.json>, then what the format expects of the messages."""
    rows = [{"id": 7 if k == 1 else f"c-{k}", "messages": [{"role": "user", "content": "hi"},
                                                            {"role": "assistant", "content": "yo"}]} for k in range(3)]
    root = write_jsonl(tmp_path / "src" / "data" / "train.jsonl", rows).parents[1]
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", "all", policy="skip"))
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    assert "data/train.jsonl: rows 0-2: schema: column 'id' is extension<arrow.json>: its values in these rows are " \
           "not all strings nor all integers (expected " in str(error.value), str(error.value)
    # init, which wrote a config make then refused (a column mapping: it checked the messages only), says it too
    from test_init import databuild

    made = databuild("init", "mine", "--tokenizer", tools_tokenizer, "--source", root, "--rows", "all", "--row-tokens",
                     256, cwd=tmp_path)
    assert made.returncode == 1 and made.stderr.count("\n") == 1, made.stderr
    assert f"--source {root}: train.jsonl: column 'id' is extension<arrow.json>: its values in these rows are not " \
           "all strings nor all integers" in made.stderr
    assert not (tmp_path / "configs").exists()


def test_a_json_array_with_a_syntax_error_is_refused_naming_its_line(tmp_path, tools_tokenizer):
    root = tmp_path / "src"
    (root / "data").mkdir(parents=True)
    (root / "data" / "train.json").write_text('[\n  {"id": "a", "messages": []},\n  {"id": "b" "messages": []}\n]')
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 1))
    with pytest.raises(BuildError, match=r"data/train.json: line 3: not JSON \(Expecting ',' delimiter, line 3\)"):
        make(config, tmp_path / "out", progress=False)


# init and the hub's layouts: init detects the format of a JSON Lines folder and of a folder `datasets`
# wrote, and what it writes builds as it stands, from a local folder or the hub cache, whatever the layout.

CARD = """---
license: apache-2.0
configs:
- config_name: default
  data_files:
  - split: train
    path: "chats/part-*"
  - split: test
    path: chats/held-out.jsonl
---
# Tool calls
"""


def layouts(tmp_path: Path) -> dict[str, Path]:
    """The conversations in each layout: {name: folder}."""
    rows = rows_of(False)
    out = {name: tmp_path / name for name in ("shards", "root-jsonl", "data-json", "card", "datasets")}
    write_jsonl(out["shards"] / "data" / "train-00000-of-00002.jsonl", rows[:5])
    write_zst(out["shards"] / "data" / "train-00001-of-00002.jsonl.zst", rows[5:])
    write_jsonl(out["root-jsonl"] / "train.jsonl", rows)
    (out["data-json"] / "data").mkdir(parents=True)
    (out["data-json"] / "data" / "train.json").write_text(json.dumps(rows))
    write_jsonl(out["card"] / "chats" / "part-0.jsonl.gz", rows[:9], gzip.open)
    write_jsonl(out["card"] / "chats" / "part-1.jsonl", rows[9:])
    write_jsonl(out["card"] / "chats" / "held-out.jsonl", rows[:2])  # the test split: not read
    write_jsonl(out["card"] / "data" / "train-00000-of-00001.jsonl", rows[:1])  # the card wins over the layout
    (out["card"] / "README.md").write_text(CARD)
    write_datasets(out["datasets"] / "data" / "train-00000-of-00001.parquet", rows)
    import datasets  # its own choice of types: the tools a struct (their schemas share keys), Json inside

    out["datasets-default"] = tmp_path / "datasets-default"
    (out["datasets-default"] / "data").mkdir(parents=True)
    datasets.Dataset.from_list(rows, on_mixed_types="use_json").to_parquet(
        str(out["datasets-default"] / "data" / "train-00000-of-00001.parquet"))
    return out


@pytest.mark.parametrize("origin", ["local", "hub"])
def test_init_detects_json_and_datasets_sources_and_its_config_builds(tmp_path, tools_tokenizer, origin):
    from test_hub import lay_out_repo
    from test_init import databuild_each

    folders = layouts(tmp_path / "sources")
    cache = tmp_path / "hub" if origin == "hub" else None
    work = tmp_path / "work"
    work.mkdir()
    given = {}
    for name, folder in folders.items():
        if origin == "local" and name not in ("shards", "datasets", "datasets-default"):  # layouts: through the hub
            continue
        given[name] = str(folder)
        if cache is not None:
            files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
            lay_out_repo(cache, "dataset", f"org/{name}", f"{len(given)}" * 40, files)
            given[name] = f"org/{name}"
    inits = databuild_each(*[("init", name, "--tokenizer", tools_tokenizer, "--source", source, "--rows", 2,
                              "--row-tokens", 64) for name, source in given.items()], cwd=work, cache=cache)
    for name, made in zip(given, inits):
        assert made.returncode == 0, made.stderr
        text = (work / "configs" / f"{name}.yaml").read_text()
        assert "format: messages # detected from the schema (columns messages)" in text, text
        entry = YAML(typ="safe").load(text)["sources"][0]
        # a struct where the record holds JSON: declared, said why (nothing of these rows is null there)
        assert entry.get("struct_nulls") == ("drop" if name == "datasets-default" else None), text
        pinned = list(entry["sha256"])
        assert pinned == {"shards": ["data/train-00000-of-00002.jsonl", "data/train-00001-of-00002.jsonl.zst"],
                          "root-jsonl": ["train.jsonl"], "data-json": ["data/train.json"],
                          "card": ["chats/part-0.jsonl.gz", "chats/part-1.jsonl"],
                          "datasets": ["data/train-00000-of-00001.parquet"],
                          "datasets-default": ["data/train-00000-of-00001.parquet"]}[name], text
    hashes = {}
    for name, built in zip(given, databuild_each(*[("make", name, "--offline") for name in given], cwd=work,
                                                 cache=cache)):
        assert built.returncode == 0, built.stderr
        manifest = json.loads((work / "build" / f"{name}.manifest.json").read_text())
        hashes[name] = manifest["output"]["rows_sha256"]
        assert manifest["output"]["rows"] == 2
    assert len(hashes) == len(given) and len(set(hashes.values())) == 1, hashes


def arrow_values(value, kind: pa.DataType):
    """A Python value in the layout of Arrow type `kind`, each Json place holding the value's JSON text."""
    if value is None:
        return None
    if isinstance(kind, pa.JsonType):
        return json.dumps(value)
    if pa.types.is_list(kind):
        return [arrow_values(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {f.name: arrow_values(value.get(f.name), f.type) for f in kind}
    return value


CALL = pa.struct([("id", pa.string()), ("type", pa.string()),
                  ("function", pa.struct([("name", pa.string()), ("arguments", pa.json_())]))])
MESSAGE_FIELDS = [("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
                  ("tool_call_id", pa.string()), ("name", pa.string())]


@pytest.mark.parametrize("where, messages", [
    ("the whole message list", pa.json_()),
    ("each tool call", pa.list_(pa.struct(MESSAGE_FIELDS + [("tool_calls", pa.list_(pa.json_()))]))),
    ("each call's arguments", pa.list_(pa.struct(MESSAGE_FIELDS + [("tool_calls", pa.list_(CALL))]))),
])
def test_json_wherever_it_stands_is_read_as_the_values_it_holds(tmp_path, tools_tokenizer, where, messages):
    """Json (Arrow's `extension<arrow.json>`, as `datasets` writes it) as the messages, a message's
    tool calls, or a call's arguments, with the tools as Json: the rows of the same conversations in
    JSON Lines."""
    rows = rows_of(False)
    schema = pa.schema([("id", pa.string()), ("messages", messages), ("tools", pa.json_())])
    columns = {f.name: pa.array([arrow_values(r.get(f.name), f.type) for r in rows], _storage(f.type))
               for f in schema}
    table = pa.table({name: _as_json(column, schema.field(name).type) for name, column in columns.items()})
    assert table.schema == schema
    root = tmp_path / "parquet"
    (root / "data").mkdir(parents=True)
    pq.write_table(table, root / "data" / "train-00000-of-00001.parquet")
    lines = write_jsonl(tmp_path / "jsonl" / "data" / "train.jsonl", rows).parents[1]
    hashes = [built(tmp_path / name, tools_tokenizer, folder, 4)[1].data["output"]["rows_sha256"]
              for name, folder in (("from-parquet", root), ("from-jsonl", lines))]
    assert hashes[0] == hashes[1], where
    # the values themselves (a template that writes a string as it is and an object by tojson shows no
    # difference between an object and its JSON text): the records hold what the JSON Lines hold
    records = read_records(tmp_path / "records", tools_tokenizer, root)[1]
    assert [(list(r.messages), r.tools) for r in records] == [
        ([{"content": m.get("content"), **m} for m in r["messages"]], r.get("tools")) for r in rows]


def _storage(kind: pa.DataType) -> pa.DataType:
    """`kind` with every Json replaced by its storage (string)."""
    if isinstance(kind, pa.JsonType):
        return pa.string()
    if pa.types.is_list(kind):
        return pa.list_(_storage(kind.value_type))
    if pa.types.is_struct(kind):
        return pa.struct([(f.name, _storage(f.type)) for f in kind])
    return kind


def _as_json(array: pa.Array, kind: pa.DataType) -> pa.Array:
    """`array` (of _storage(kind)) as type `kind`: its string leaves wrapped as Json where `kind` has Json."""
    if isinstance(kind, pa.JsonType):
        return pa.ExtensionArray.from_storage(kind, array)
    if pa.types.is_list(kind):
        return pa.ListArray.from_arrays(array.offsets, _as_json(array.values, kind.value_type), mask=array.is_null())
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([_as_json(array.field(f.name), f.type) for f in kind],
                                          fields=list(kind), mask=array.is_null())
    return array
