"""show and report mark a tool call from its name's first token to its arguments' last, from the record
(views/record_marks.py, views/arguments.py), on real template families: arguments as an object (which the
template writes through its JSON filter: found after the name as the filter writes them) and as JSON text
(written verbatim and placed, or through the filter and found); where the template writes an object some
other way (Qwen3.6's one tag per parameter) or the serialization stands twice, the name alone, counted in
the note."""

from __future__ import annotations

import hashlib
import html
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import write_config
from databuild.build import make
from databuild.config import load_config
from databuild.encode.encoder import Encoder
from databuild.encode.render import Renderer
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from databuild.views.record_marks import _parts, record_marks
from families import FAMILIES, KWARGS, family_tokenizer
from test_agentic_sources import WEATHER, call
from test_build import run_cli
from test_record_marks import stored_rows

OBJECT = {"city": "Oslo", "unit": "celsius"}
TEXT = '{"city": "Paris"}'


def weather(arguments) -> list[dict]:
    return [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", arguments)]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "3 degrees"},
            {"role": "assistant", "content": "Cold."}]


# each family's tool-call region, the object's and the text's, as its template writes them
# (tests/fixtures/templates/real): from the name to the arguments' end
REGIONS = {
    "llama3_1": ('get_weather", "parameters": {"city": "Oslo", "unit": "celsius"}',
                 'get_weather", "parameters": "{\\"city\\": \\"Paris\\"}"'),  # tojson of the text
    "qwen2_5": ('get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}',
                'get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"'),  # tojson of the text
    "qwen3": ('get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}',
              'get_weather", "arguments": {"city": "Paris"}'),  # the text verbatim
    # one <parameter=...> tag per key, no serialization of the whole: the name only; text arguments the
    # template refuses (it iterates them)
    "qwen3_6": ("get_weather", None),
}


def built(tmp_path, name: str):
    """The object call and (where the template takes it) the text call, each a conversation whole in a
    row of its own (bfd), built with `make`."""
    family = FAMILIES[name]
    family_tokenizer(family, tmp_path)
    directory = tmp_path / f"tokenizer-{name}"
    rows = [("obj", OBJECT)] + ([("txt", TEXT)] if REGIONS[name][1] else [])
    root = tmp_path / "src"
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([
        {"id": cid, "tools": json.dumps([WEATHER]),
         "messages": [{**m, "tool_calls": json.dumps(m["tool_calls"])} if m.get("tool_calls") else
                      {k: v for k, v in m.items() if k != "tool_calls"} for m in weather(arguments)]}
        for cid, arguments in rows]), root / "data" / "train-00000-of-00001.parquet")
    pins = {f: hashlib.sha256((directory / f).read_bytes()).hexdigest()
            for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")}
    config = write_config(tmp_path / "c.yaml", name=name, loss_mask="assistant", rows="all", row_tokens=1024,
                          packing="bfd", stop_tokens_in_fields=None, template_kwargs=KWARGS,
                          end_of_turn=list(family.stops) or None, source={"dir": str(root)},
                          tokenizer={"dir": str(directory), "sha256": pins})
    return make(load_config(config), tmp_path / "out", progress=False).parquet, config


def tool_call_texts(parquet, config, tokenizer) -> tuple[dict[str, list[str]], dict[str, list[bool]], str]:
    """By conversation id: the decoded text of each tool-call region; whether each is on its name only;
    and the note."""
    rows, manifest = stored_rows(parquet)
    marks = record_marks(rows, manifest, str(config))
    texts, name_only = {}, {}
    for row in rows:
        for segment, regions in marks.of_row(row).items():
            cid = row.conversation_ids[segment]
            for region in regions:
                if region.kind == "tool call":
                    texts.setdefault(cid, []).append(tokenizer.decode(row.input_ids[region.start:region.end]))
                    name_only.setdefault(cid, []).append(region.name_only)
    return texts, name_only, marks.note


@pytest.mark.parametrize("name", sorted(REGIONS))
def test_a_tool_call_runs_from_its_name_to_its_arguments_end(tmp_path, name):
    parquet, config = built(tmp_path, name)
    tokenizer = family_tokenizer(FAMILIES[name], tmp_path)
    texts, name_only, note = tool_call_texts(parquet, config, tokenizer)
    whole_object, whole_text = REGIONS[name]
    # Qwen3 expands the conversation into one sample per turn: the call stands in both
    assert set(texts["obj"]) == {whole_object} and len(texts["obj"]) == (2 if name == "qwen3" else 1)
    if whole_text is not None:
        assert set(texts["txt"]) == {whole_text} and not any(name_only["txt"])
    if name == "qwen3_6":
        assert name_only["obj"] == [True]
        assert note.endswith("; 1 of 1 tool calls marked on their name only (their arguments as the template "
                             "writes them not found once after it)")
    else:
        assert not any(name_only["obj"]) and "name only" not in note
    assert "not found in it" not in note  # every segment found in its re-render
    shown = "".join(run_cli("show", str(parquet), "--row", str(row), "--config", str(config), "--tokenizer",
                            str(config), "--color", "never").stdout for row in range(pq.read_metadata(parquet).num_rows))
    assert note in shown
    found = re.findall("⟨tool call⟩(.*?)⟨/tool call⟩", shown.replace("[[", "").replace("]]", ""), flags=re.S)
    assert sorted(found) == sorted(texts["obj"] + texts.get("txt", []))
    page = tmp_path / "report.html"
    assert run_cli("report", str(parquet), "-o", str(page), "--config", str(config), "--tokenizer",
                   str(config)).returncode == 0
    assert html.escape(note) in page.read_text()


def parts_of(tmp_path, name: str, template_edit, arguments):
    """The samples' regions of the weather conversation, with the family's template edited."""
    family = FAMILIES[name]
    family_tokenizer(family, tmp_path)
    template = tmp_path / f"tokenizer-{name}" / "chat_template.jinja"
    edited = template_edit(template.read_text())
    assert edited != template.read_text()
    template.write_text(edited)
    tokenizer = family_tokenizer(family, tmp_path)  # the directory as it is now
    encoder = Encoder(tokenizer, Renderer.for_tokenizer(tokenizer, KWARGS), "assistant", family.stops)
    conversation = Conversation(Origin(0, 0, "c", "r"), tuple(weather(arguments)), None, [WEATHER])
    return tokenizer, _parts(encoder, [conversation])


@pytest.mark.parametrize("edit, whole", [
    # the serialization twice before the tool result: no one place, the name only
    (lambda t: t.replace("{{- tool_call.arguments | tojson }}",
                         "{{- tool_call.arguments | tojson }}{{- tool_call.arguments | tojson }}"), None),
    # the filter's options (transformers' tojson takes sort_keys and indent) and Python's str of a dict
    (lambda t: t.replace("tool_call.arguments | tojson", "tool_call.arguments | tojson(sort_keys=True, indent=2)"),
     'get_weather", "arguments": {\n  "city": "Oslo",\n  "unit": "celsius"\n}'),
    (lambda t: t.replace("tool_call.arguments | tojson", "tool_call.arguments"),
     "get_weather\", \"arguments\": {'city': 'Oslo', 'unit': 'celsius'}"),
], ids=["written-twice", "sorted-indented", "unfiltered-dict"])
def test_an_object_is_found_only_once_after_the_name(tmp_path, edit, whole):
    tokenizer, parts = parts_of(tmp_path, "qwen2_5", edit, OBJECT)
    [part] = parts
    [region] = [r for r in part.regions if r.kind == "tool call"]
    assert region.name_only == (whole is None)
    assert tokenizer.decode(part.ids[region.start:region.end]) == (whole or "get_weather")
