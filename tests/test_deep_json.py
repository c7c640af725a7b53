"""JSON nested past any use, in a source's values (tool_calls, tools, a ShareGPT function_call), in a manifest
and in nested structures: refused in one line naming the file, row, id and field, never a RecursionError."""

from __future__ import annotations

import json

import pytest

from test_agentic_sources import WHERE, refused_build

DEEP = 100_000  # levels: a RecursionError, before, wherever JSON text was parsed or walked


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


GOOD = {"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


@pytest.mark.parametrize("levels", [DEEP, 900])
def test_deep_tool_calls_text(tmp_path, tools_tokenizer, levels):
    bad = {"id": "b", "messages": [{"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "x", "tool_calls": nested(levels)}]}
    error = refused_build(tmp_path, tools_tokenizer, [GOOD, bad])
    assert error.startswith(f"malformed conversation: {WHERE}: message 1: tool_calls is JSON nested deeper than ")


@pytest.mark.parametrize("levels", [DEEP, 900])
def test_deep_tools_text(tmp_path, tools_tokenizer, levels):
    messages = GOOD["messages"]
    error = refused_build(tmp_path, tools_tokenizer, [{"id": "a", "messages": messages, "tools": None},
                                                      {"id": "b", "messages": messages, "tools": nested(levels)}])
    assert error.startswith(f"malformed conversation: {WHERE}: tools is JSON nested deeper than ")


@pytest.mark.parametrize("levels", [DEEP, 900])
def test_deep_sharegpt_function_call(tmp_path, tools_tokenizer, levels):
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            {"id": "b", "conversations": [{"from": "human", "value": "hi"},
                                          {"from": "function_call", "value": nested(levels)}]}]
    error = refused_build(tmp_path, tools_tokenizer, rows, "sharegpt")
    assert error.startswith(f"malformed conversation: {WHERE}: message 1: function_call value is JSON nested deeper "
                            "than ")


@pytest.fixture
def deep_manifest(tiny_build, tmp_path):
    """A copy of the tiny build whose manifest holds a value nested DEEP levels (under `description`, a key
    no reader uses), and the untouched build beside it."""
    import shutil

    copy = tmp_path / "deep"
    copy.mkdir()
    for path in (tiny_build.parquet, tiny_build.manifest):
        shutil.copyfile(path, copy / path.name)
    manifest = copy / tiny_build.manifest.name
    text = manifest.read_text()
    manifest.write_text(text[:-2].rstrip() + f', "description": {nested(DEEP)}' + "\n}\n")
    return copy / tiny_build.parquet.name, manifest


def cli(*args):
    from click.testing import CliRunner

    from databuild.cli import main

    result = CliRunner().invoke(main, [*map(str, args)])
    assert "Traceback" not in result.output and not isinstance(result.exception, RecursionError), result.output
    return result


def test_verify_refuses_a_deep_manifest_in_one_line(deep_manifest):
    from databuild.utils.json_depth import MOST_JSON_DEPTH

    parquet, manifest = deep_manifest
    result = cli("verify", parquet)
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert f"{manifest}: cannot read manifest: nested deeper than {MOST_JSON_DEPTH} levels" in result.output


def test_diff_refuses_a_deep_manifest_as_an_unreadable_side(deep_manifest, tiny_build):
    parquet, manifest = deep_manifest
    for sides in ((manifest, tiny_build.manifest), (tiny_build.parquet, parquet)):
        result = cli("diff", *sides)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert f"{manifest}: cannot read manifest: nested deeper than" in result.output


@pytest.mark.parametrize("levels", [DEEP, 900])
def test_deep_element_of_a_json_array_file(tmp_path, tools_tokenizer, levels):
    """A `.json` file of one array of rows is parsed element by element (sources/json_files): an element
    nested past the bound is a malformed row, named by its line, whether the parser stops on it (DEEP) or
    parses it (900 levels, under Python's recursion limit: the depth walk refuses it)."""
    from databuild.build import make
    from databuild.config import load_config
    from databuild.errors import BuildError
    from test_agentic_sources import config_for

    root = tmp_path / "src"
    (root / "data").mkdir(parents=True)
    bad = {"id": "b", "messages": GOOD["messages"], "tools": "DEEP"}
    text = json.dumps([GOOD, bad], indent=1).replace('"DEEP"', nested(levels))
    (root / "data" / "train.json").write_text(text)
    config = load_config(config_for(tmp_path, tools_tokenizer, root, "messages", 1))
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    line = text[:text.index('"b"')].count("\n")
    message = str(error.value)
    if levels == DEEP:  # past the parser's own stack: where the element ends is unknown, so the file is refused
        assert message.endswith(f"data/train.json: line {line}: not JSON (nested deeper than 100 levels)"), message
    else:
        assert message.startswith("malformed conversation: org/agentic: data/train.json: row 1 ") and \
            f"line {line}: nested deeper than 100 levels" in message, message


def test_the_documented_bound_is_exact():
    """data/README: JSON text "may nest at most 100 levels": 100 parse, 101 are refused."""
    from databuild.utils.json_depth import MOST_JSON_DEPTH, TooDeep, loads

    assert MOST_JSON_DEPTH == 100
    assert loads(nested(100)) is not None and loads('{"a": ' + nested(99) + "}") is not None
    for text in (nested(101), '{"a": ' + nested(100) + "}"):
        with pytest.raises(TooDeep):
            loads(text)
