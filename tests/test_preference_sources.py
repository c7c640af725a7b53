"""Preference sources (issue 34): each shape (TRL's explicit prompt, as message lists and as strings; its
implicit prompt, Tulu 3's preference mixture's shape; unpaired rows for KTO) read from parquet and JSON
Lines, local and through a hub cache, into PreferenceRecords in the permutation of sources/mixture.py;
every refusal one line naming file, row and id; the implicit prompt's split rejoining to exactly the
source's messages (hypothesis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, REPO, write_config
from databuild.config.load import load_config
from databuild.errors import BuildError
from databuild.inputs.resolve import resolve_inputs
from databuild.records.problems import (COMPLETION_NOT_ASSISTANT, DROPPED_KINDS, IDENTICAL_COMPLETIONS, MALFORMED,
                                        NO_SHARED_PROMPT, PREFERENCE_SKIPPED_KINDS)
from databuild.sources.mixture import mixed_of_positions
from databuild.sources.preference import implicit_split, preference_stream

PREFERENCE_DIR = FIXTURES / "tulu-preference-tiny"
FILES = sorted((PREFERENCE_DIR / "data").glob("*.parquet"))
ROWS = [row for path in FILES for row in pq.read_table(path).to_pylist()]


def plain(message: dict) -> dict:
    """A fixture message as the record carries it: its null fields left out (the struct's, not the row's)."""
    return {key: value for key, value in message.items() if value is not None or key == "content"}


def reference_split(chosen: list, rejected: list):
    """The implicit prompt, independently: the first messages equal as Python values (TRL's extract_prompt's
    comparison), with the refusals databuild makes in place of its guesses."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    return shared


def records(tmp_path, source: dict, **changes):
    config = load_config(write_config(tmp_path / "c.yaml", source=source, **changes))
    with preference_stream(config, resolve_inputs(config)) as stream:
        return config, list(stream.records())


def write_rows(directory: Path, rows: list[dict], kind: str) -> Path:
    """rows as the source's train split: one parquet file or one JSON Lines file."""
    (directory / "data").mkdir(parents=True)
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), directory / "data" / "train-00000-of-00001.parquet")
    else:
        (directory / "data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return directory


IMPLICIT = {"dir": str(PREFERENCE_DIR), "format": "preference_implicit", "ignore_fields": ["prompt"]}


def test_the_fixture_reads_in_the_permutation_with_its_refusals(tmp_path):
    config, found = records(tmp_path, IMPLICIT, on_bad_conversation="skip")
    inputs = resolve_inputs(config)
    order = mixed_of_positions(*inputs.selections, config.seed, range(len(ROWS)))
    assert [r.origin.id for r in found] == [ROWS[i]["id"] for i in order]
    assert [r.origin.position for r in found] == list(range(len(ROWS)))
    kinds = {r.origin.id: r.problem.kind for r in found if r.problem}
    assert sorted(kinds.values()) == [IDENTICAL_COMPLETIONS, NO_SHARED_PROMPT]
    for record in found:
        row = ROWS[record.origin.index]
        if record.problem is None:  # the split rejoins to the source's messages, each completion an answer
            chosen, rejected = [plain(m) for m in row["chosen"]], [plain(m) for m in row["rejected"]]
            assert len(record.prompt) == reference_split(chosen, rejected) > 0
            assert [list(c) for c in record.conversations()] == [chosen, rejected]
            assert record.paired and record.label is None
            assert record.chosen[0]["role"] == record.rejected[0]["role"] == "assistant"
    tool_pair = next(r for r in found if r.tools)
    assert tool_pair.tools == json.loads(ROWS[tool_pair.origin.index]["tools"])
    assert [m["role"] for m in tool_pair.chosen] == ["assistant", "tool", "assistant"]
    assert tool_pair.chosen[0] == {"content": None, "role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_tide", "arguments": '{"place": "Oskarn"}'}}]}
    assert max(len(r.prompt) for r in found) == 5  # multi-turn
    prompts = [json.dumps(r.prompt) for r in found if r.prompt]
    assert len(set(prompts)) < len(prompts)  # pairs sharing a prompt


def test_the_kinds_are_where_the_build_counts_them():
    assert IDENTICAL_COMPLETIONS in DROPPED_KINDS
    assert set(PREFERENCE_SKIPPED_KINDS) == {NO_SHARED_PROMPT, COMPLETION_NOT_ASSISTANT}


def shapes(row: dict) -> dict[str, dict]:
    """One fixture row in each source shape."""
    chosen, rejected = [plain(m) for m in row["chosen"]], [plain(m) for m in row["rejected"]]
    shared = reference_split(chosen, rejected)
    explicit = {"id": row["id"], "prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}
    user, good, bad = chosen[shared - 1]["content"], chosen[shared]["content"], rejected[shared]["content"]
    return {"preference": explicit,
            "preference_strings": {"id": row["id"], "prompt": user, "chosen": good, "rejected": bad},
            "preference_implicit": {"id": row["id"], "chosen": chosen, "rejected": rejected},
            "unpaired_preference": {"id": row["id"], "prompt": chosen[:shared], "completion": chosen[shared:],
                                    "label": True}}


SIMPLE = [row for row in ROWS if row["source"] in ("fixture/single", "fixture/multi")][:8]


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("shape", ["preference", "preference_strings", "preference_implicit", "unpaired_preference"])
def test_each_shape_from_parquet_and_json_lines(tmp_path, shape, kind):
    rows = [shapes(row)[shape] for row in SIMPLE]
    if shape == "unpaired_preference":
        rows = [{**row, "label": k % 2 == 0} for k, row in enumerate(rows)]
    source = write_rows(tmp_path / "src", rows, kind)
    _, found = records(tmp_path, {"dir": str(source), "format": shape.removesuffix("_strings")})
    assert len(found) == len(rows) and all(r.problem is None for r in found)
    for record in found:
        row = rows[record.origin.index]
        if shape == "preference_strings":
            assert record.prompt == ({"content": row["prompt"], "role": "user"},)
            assert record.completions == (({"content": row["chosen"], "role": "assistant"},),
                                          ({"content": row["rejected"], "role": "assistant"},))
        elif shape == "unpaired_preference":
            assert (list(record.prompt), [list(c) for c in record.completions]) == (row["prompt"], [row["completion"]])
            assert record.label is row["label"] and not record.paired
        else:
            expected = shapes(SIMPLE[record.origin.index])["preference"]
            assert list(record.prompt) == expected["prompt"]
            assert [list(c) for c in record.completions] == [expected["chosen"], expected["rejected"]]


def _listed(found) -> list:
    return [[r.origin.id, list(map(dict, r.prompt)), [list(c) for c in r.completions], r.label,
             r.problem and r.problem.kind] for r in found]


def test_each_shape_through_the_hub_cache_reads_as_the_local_files(tmp_path):
    """The fixture, and each shape as parquet and as JSON Lines, laid out as huggingface_hub's cache, each
    config naming repo and commit only: the same records as from the local folders (one process of its
    own for them all: the cache's place is read at import)."""
    from test_hub import lay_out_repo
    cache, configs, expected = tmp_path / "hub", [], []
    cases = [("fixture", PREFERENCE_DIR, IMPLICIT)]
    for shape in ("preference", "preference_strings", "preference_implicit", "unpaired_preference"):
        for kind in ("parquet", "jsonl"):
            rows = [shapes(row)[shape] for row in SIMPLE]
            if shape == "unpaired_preference":
                rows = [{**row, "label": k % 2 == 1} for k, row in enumerate(rows)]
            folder = write_rows(tmp_path / f"{shape}-{kind}", rows, kind)
            cases.append((f"{shape}-{kind}", folder, {"format": shape.removesuffix("_strings")}))
    for number, (name, folder, source) in enumerate(cases):
        repo, commit = f"databuild-fixtures/{name}", f"{number + 10:040x}"
        files = {p.relative_to(folder).as_posix(): p for p in sorted((folder / "data").iterdir())}
        lay_out_repo(cache, "dataset", repo, commit, files)
        configs.append(write_config(tmp_path / f"hub-{name}.yaml", on_bad_conversation="skip", source={
            **source, "dir": None, "repo": repo, "revision": commit}))
        expected.append(_listed(records(tmp_path, {**source, "dir": str(folder)}, on_bad_conversation="skip")[1]))
    script = ("import json, sys; from databuild.config.load import load_config; "
              "from databuild.inputs.resolve import resolve_inputs; "
              "from databuild.sources.preference import preference_stream; "
              "from test_preference_sources import _listed\n"
              "for path in sys.argv[1:]:\n"
              "    c = load_config(path)\n"
              "    with preference_stream(c, resolve_inputs(c, offline=True)) as s:\n"
              "        print(json.dumps(_listed(s.records())))")
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO / "tests")}
    result = subprocess.run([sys.executable, "-c", script, *map(str, configs)], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(found) == len(cases)
    for (name, _, _), config, hub, local in zip(cases, configs, found, expected):
        assert load_config(config).sources[0].dir is None  # named by repo and commit alone
        assert hub == local and len(hub) >= len(SIMPLE), name


BAD_ROWS = [  # (shape, a bad row, what the refusal says)
    ("preference", {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistnt", "content": "a"}],
                    "rejected": [{"role": "assistant", "content": "b"}]}, "chosen: message 0: unknown role 'assistnt'"),
    ("preference_implicit", {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                             "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"},
                                          {"role": "user", "content": None}]},
     "rejected: message 2: content is null, not a string"),
    ("unpaired_preference", {"prompt": [{"role": "user", "content": "q"}], "label": False, "completion": [
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
            "name": "f", "arguments": "{\"city\": \"Paris\",}"}}]}]},
     "completion: message 0: tool_calls[0] (function 'f'): arguments are not valid JSON"),
    ("preference", {"prompt": [{"role": "user", "content": "q"}], "chosen": None,
                    "rejected": [{"role": "assistant", "content": "b"}]}, "chosen is null"),
    ("preference", {"prompt": [{"role": "user", "content": "q"}], "chosen": [],
                    "rejected": [{"role": "assistant", "content": "b"}]}, "chosen is an empty list of messages"),
    ("preference", {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a",
                    "score": 3}], "rejected": [{"role": "assistant", "content": "b"}]}, "unknown field 'score'"),
    ("unpaired_preference", {"prompt": [{"role": "user", "content": "q"}],
                             "completion": [{"role": "assistant", "content": "a"}], "label": 1}, "label is 1, not true"),
    ("preference", {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "user", "content": "a"}],
                    "rejected": [{"role": "assistant", "content": "b"}]}, "chosen message 0, the first after the prompt, "
                                                                          "is a 'user' message"),
    ("preference_implicit", {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                             "rejected": [{"role": "user", "content": "q"}]}, "rejected has no message after the prompt"),
]


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("shape, bad, reason", BAD_ROWS)
def test_a_bad_row_is_named_by_file_row_and_id(tmp_path, shape, bad, reason, kind):
    good = {"preference": {"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}],
                           "rejected": [{"role": "assistant", "content": "b"}]},
            "unpaired_preference": {"prompt": [{"role": "user", "content": "q"}],
                                    "completion": [{"role": "assistant", "content": "a"}], "label": True},
            "preference_implicit": {"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                                    "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}}
    if kind == "parquet" and bad.get("label") == 1:
        pytest.skip("a parquet column holds one type: an integer label is refused by the schema (tested below)")
    rows = [{"id": "good-0", **good[shape]}, {"id": "bad-1", **bad}]
    source = write_rows(tmp_path / "src", rows, kind)
    name = "data/train-00000-of-00001.parquet" if kind == "parquet" else "data/train.jsonl"
    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(source), "format": shape}))
    try:  # refused up front (malformed), or the record's own problem, named the same way
        with preference_stream(config, resolve_inputs(config)) as stream:
            message = next(stream.bad(r).message() for r in stream.records() if r.problem)
            assert [r.origin.id for r in stream.records() if r.problem] == ["bad-1"]
    except BuildError as exc:
        message = str(exc)
    assert "\n" not in message and f"{name}: row 1 (id 'bad-1')" in message and reason in message, message


def test_under_skip_a_bad_row_is_counted_and_the_rest_read(tmp_path):
    rows = [{"id": "a", "prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "x"}],
             "rejected": [{"role": "assistant", "content": "y"}]},
            {"id": "b", "prompt": [{"role": "user", "content": "q"}], "chosen": None,
             "rejected": [{"role": "assistant", "content": "y"}]}]
    source = write_rows(tmp_path / "src", rows, "parquet")
    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(source), "format": "preference"},
                                      on_bad_conversation="skip"))
    with preference_stream(config, resolve_inputs(config)) as stream:
        assert [(b.id, b.row, b.kind) for b in stream.malformed.values()] == [("b", 1, MALFORMED)]
        found = {r.origin.id: r for r in stream.records()}
    assert found["a"].problem is None and found["b"].problem.kind == MALFORMED and found["b"].completions == ()


@pytest.mark.parametrize("shape, source_changes, needle", [
    ("preference_implicit", {}, "column 'prompt' is not one this format reads"),
    ("preference", {}, "a string prompt beside conversations in chosen and rejected is the implicit shape: format: "
                       "preference_implicit, with prompt in ignore_fields"),
    ("unpaired_preference", {}, "missing column 'label'"),
])
def test_a_file_of_another_shape_is_refused_naming_its_columns(tmp_path, shape, source_changes, needle):
    with pytest.raises(BuildError, match="train-00000-of-00002.parquet: schema: ") as refused:
        records(tmp_path, {"dir": str(PREFERENCE_DIR), "format": shape, **source_changes})
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_an_integer_label_column_is_refused(tmp_path):
    rows = [{"id": "a", "prompt": "q", "completion": "a", "label": 1}]
    source = write_rows(tmp_path / "src", rows, "parquet")
    with pytest.raises(BuildError, match="column 'label' is int64, not bool"):
        records(tmp_path, {"dir": str(source), "format": "unpaired_preference"})


def test_an_sft_build_refuses_preference_sources_and_a_mix_is_refused(tmp_path):
    from databuild.prepare import prepare
    config = load_config(write_config(tmp_path / "c.yaml", source=IMPLICIT))
    with pytest.raises(BuildError, match="set task: preference"):
        prepare(config)
    mixed = load_config(write_config(tmp_path / "m.yaml", source=None, sources=[
        {**IMPLICIT, "repo": "a/preference", "revision": "3" * 40, "take": 1.0},
        {"dir": str(FIXTURES / "tulu-tiny"), "repo": "a/sft", "revision": "1" * 40, "take": 1.0}]))
    with pytest.raises(BuildError, match=r"sources\[0\] has the preference format 'preference_implicit' and "
                                         r"sources\[1\] the SFT format 'messages'"):
        prepare(mixed)


MESSAGE = st.builds(lambda role, text: {"content": text, "role": role},
                    st.sampled_from(["user", "assistant", "system", "tool"]), st.sampled_from(["a", "b", "", "a b"]))


@settings(max_examples=400, deadline=None)
@given(st.lists(MESSAGE, max_size=4), st.lists(MESSAGE, max_size=3), st.lists(MESSAGE, max_size=3))
def test_the_implicit_split_rejoins_to_the_source_or_says_why_not(shared, tail_a, tail_b):
    chosen, rejected = shared + tail_a, shared + tail_b
    prompt, chosen_part, rejected_part, problem = implicit_split(chosen, rejected)
    if problem is None:
        assert list(prompt + chosen_part) == chosen and list(prompt + rejected_part) == rejected
        assert prompt and chosen_part[0]["role"] == rejected_part[0]["role"] == "assistant"
        assert chosen_part[0] != rejected_part[0]  # the longest prefix: the first messages after it differ
        return
    assert (prompt, chosen_part, rejected_part) == ((), (), ())
    shared_count = reference_split(chosen, rejected)
    if chosen == rejected:
        assert problem.kind == IDENTICAL_COMPLETIONS
    elif shared_count == 0:
        assert problem.kind == NO_SHARED_PROMPT
    else:
        assert problem.kind == COMPLETION_NOT_ASSISTANT
        rests = (chosen[shared_count:], rejected[shared_count:])
        assert any(not rest or rest[0]["role"] != "assistant" for rest in rests)


RENAMED = {"preference": {"preference": "explicit", "prompt": "context", "chosen": "better", "rejected": "worse"},
           "preference_implicit": {"preference": "implicit", "chosen": "better", "rejected": "worse",
                                   "role": "speaker", "content": "text"},
           "unpaired_preference": {"preference": "unpaired", "prompt": "context", "completion": "answer",
                                   "label": "good"}}


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("shape", list(RENAMED))
def test_a_column_mapping_reads_renamed_columns_as_the_named_format(tmp_path, shape, kind):
    mapping = RENAMED[shape]
    fields = {"role": mapping.get("role", "role"), "content": mapping.get("content", "content")}

    def renamed(value):
        return [{fields[k]: v for k, v in m.items()} for m in value] if isinstance(value, list) else value
    plain_rows = [shapes(row)[shape] for row in SIMPLE]
    if shape == "unpaired_preference":
        plain_rows = [{**row, "label": k % 2 == 0} for k, row in enumerate(plain_rows)]
    rows = [{mapping.get(key, key): renamed(value) for key, value in row.items()} for row in plain_rows]
    source = write_rows(tmp_path / "src", rows, kind)
    config, found = records(tmp_path, {"dir": str(source), "format": mapping})
    assert config.sources[0].format == shape and config.sources[0].format_config == mapping
    write_rows(tmp_path / "plain", plain_rows, kind)
    _, expected = records(tmp_path, {"dir": str(tmp_path / "plain"), "format": shape})
    assert [(r.origin.id, r.prompt, r.completions, r.label) for r in found] == \
        [(r.origin.id, r.prompt, r.completions, r.label) for r in expected]
    assert all(r.problem is None for r in found) and len(found) == len(rows)


@pytest.mark.parametrize("mapping, needle", [
    ({"preference": "pairs"}, "key 'format.preference' = 'pairs': a preference shape: explicit, implicit, unpaired"),
    ({"preference": "implicit", "prompt": "p"}, "format: unknown key 'prompt'"),
    ({"preference": "explicit", "chosen": "x", "rejected": "x"}, "also the name of"),
    ({"preference": "unpaired", "label": ""}, "key 'format.label' = '': expected a column or field name"),
])
def test_a_bad_column_mapping_is_refused_naming_the_key(tmp_path, mapping, needle):
    with pytest.raises(BuildError) as refused:
        load_config(write_config(tmp_path / "c.yaml", source={"dir": str(PREFERENCE_DIR), "format": mapping}))
    assert needle in str(refused.value), str(refused.value)


def test_ignore_fields_may_not_name_a_mapped_column(tmp_path):
    with pytest.raises(BuildError, match="ignore_fields.*'worse'.*cannot build without it"):
        load_config(write_config(tmp_path / "c.yaml", source={"dir": str(PREFERENCE_DIR), "format": {
            "preference": "implicit", "chosen": "better", "rejected": "worse"}, "ignore_fields": ["worse"]}))


def test_the_records_do_not_depend_on_the_spill_window_or_threads(tmp_path, monkeypatch):
    config = load_config(write_config(tmp_path / "c.yaml", source=IMPLICIT, on_bad_conversation="skip"))
    seen = []
    for window, cores in ((3, "1"), (7, "4"), (8192, "2")):
        monkeypatch.setenv("DATABUILD_CORES", cores)
        with preference_stream(config, resolve_inputs(config), window) as stream:
            seen.append([(r.origin, r.prompt, r.completions, r.label, r.tools, r.problem) for r in stream.records()])
            assert stream.spill.passes == 1
    assert seen[0] == seen[1] == seen[2] and len(seen[0]) == len(ROWS)


VALUE = st.sampled_from([1, 1.0, True, "1", None, {"a": 1, "b": 2}, {"b": 2, "a": 1}])
STRICT_MESSAGE = st.builds(lambda role, value: {"content": "x", "role": role, "tool_calls": [{"arguments": value}]},
                           st.sampled_from(["user", "assistant"]), VALUE)


@settings(max_examples=300, deadline=None)
@given(st.lists(STRICT_MESSAGE, min_size=1, max_size=4), st.lists(STRICT_MESSAGE, min_size=1, max_size=4))
def test_messages_are_compared_as_json_values_not_python_equality(chosen, rejected):
    """1, 1.0 and true, and two key orders, are equal in Python and different JSON: never one shared message."""
    texts = [[json.dumps(m) for m in side] for side in (chosen, rejected)]
    shared = 0
    while shared < min(map(len, texts)) and texts[0][shared] == texts[1][shared]:
        shared += 1
    prompt, chosen_part, rejected_part, problem = implicit_split(chosen, rejected)
    if problem is None:
        assert len(prompt) == shared
    elif texts[0] == texts[1]:
        assert problem.kind == IDENTICAL_COMPLETIONS
    else:
        assert problem.kind == (NO_SHARED_PROMPT if shared == 0 else COMPLETION_NOT_ASSISTANT)


def test_a_mixture_of_preference_sources_of_two_shapes_reads_in_one_permutation(tmp_path):
    """An implicit source and an explicit one, with takes (one upsampled): the records in the order
    sources/mixture.py places the rows, each read by its own source's format."""
    explicit = [shapes(row)["preference"] for row in SIMPLE]
    write_rows(tmp_path / "explicit", explicit, "jsonl")
    sources = [{**IMPLICIT, "repo": "a/implicit", "revision": "3" * 40, "take": 10},
               {"dir": str(tmp_path / "explicit"), "format": "preference", "repo": "a/explicit", "revision": "4" * 40,
                "take": 2.0}]
    config = load_config(write_config(tmp_path / "m.yaml", source=None, sources=sources, on_bad_conversation="skip"))
    inputs = resolve_inputs(config)
    with preference_stream(config, inputs) as stream:
        found = list(stream.records())
    order = mixed_of_positions(*inputs.selections, config.seed, range(len(found)))
    assert len(found) == 10 + 2 * len(explicit)
    assert [r.origin.index for r in found] == order.tolist()
    assert "a/explicit" in {r.origin.source for r in found} <= {"fixture/single", "fixture/multi", "fixture/tools",
                                                                 "fixture/refused", "a/explicit"}
    for record in found:
        if record.origin.index >= len(ROWS):  # the explicit source's rows, each twice
            row = explicit[record.origin.index - len(ROWS)]
            assert (list(record.prompt), [list(c) for c in record.completions]) == (
                row["prompt"], [row["chosen"], row["rejected"]])
