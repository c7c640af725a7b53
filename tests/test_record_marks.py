"""show and report mark tool calls, tool results and reasoning from the record (views/record_marks.py):
each shown conversation re-rendered from the pinned source, its fields placed token by token, in
conversations cut across rows and in history-expanded samples; where the source is not here, one
line says so and the marks come from the decoded text's markup."""

from __future__ import annotations

import re
import shutil

import pyarrow as pa
import pytest

from databuild.build import make
from databuild.config import load_config
from databuild.publish.manifest_read import manifest_beside
from databuild.rowfile.read import open_parquet, read_rows
from databuild.views.record_marks import record_marks
from source_folders import write_source
from test_agentic_sources import WEATHER, call, config_for
from test_build import run_cli

# fields whose text spells another kind's markup: a tool result spelling reasoning, an answer spelling a
# tool result, a reasoning spelling a tool call
IMITATION = [
    {"role": "system", "content": "Reply with <tool_call>{...}</tool_call> to call a tool."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "reasoning_content": "I write <tool_call>x</tool_call> next.",
     "tool_calls": [call(1, "get_weather", '{"city": "Oslo"}')]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "<think>cold</think> 3 degrees"},
    {"role": "assistant", "content": "It said <tool_response>3</tool_response>: cold.", "reasoning_content": "Done."}]


def two_questions(k: int) -> list[dict]:
    """Two user turns each answered with reasoning: the template drops the first answer's reasoning once
    a later question follows, so the assistant strategy expands the conversation into one sample per turn."""
    return [{"role": "user", "content": f"First {k}?"},
            {"role": "assistant", "content": f"One {k}.", "reasoning_content": f"Think one {k}."},
            {"role": "user", "content": f"Second {k}?"},
            {"role": "assistant", "content": f"Two {k}.", "reasoning_content": f"Think two {k}."}]


def build(tmp_path, tokenizer, rows, row_tokens, count, top=(), **entry):
    """Built from `rows` with the agentic config; `top`: lines added to the config's top level."""
    root = write_source(tmp_path / "src", [pa.Table.from_pylist(rows)])
    config = config_for(tmp_path, tokenizer, root, "messages", count, row_tokens=row_tokens, **entry)
    config.write_text(config.read_text() + "".join(f"{line}\n" for line in top))
    return make(load_config(config), tmp_path / "out", progress=False).parquet, config


def stored_rows(parquet):
    manifest = manifest_beside(parquet)
    file = open_parquet(parquet)
    return read_rows(file, parquet, 0, file.metadata.num_rows, manifest.get("continued_rows")), manifest


def regions_in(shown: str, kind: str) -> str:
    """The text of every region of `kind`, targets' brackets removed, joined (a region cut across rows
    is closed at one row's end and opened again at the next one's start)."""
    return "".join(re.findall(f"⟨{kind}⟩(.*?)⟨/{kind}⟩", shown, flags=re.S)).replace("[[", "").replace("]]", "")


@pytest.fixture(scope="module")
def imitating(tmp_path_factory, tools_tokenizer):
    """The imitating conversation among plain ones, in rows of 160 tokens: it is cut across rows."""
    tmp = tmp_path_factory.mktemp("imitating")
    rows = [{"id": f"c{k}", "messages": IMITATION if k == 1 else
             [{"role": "user", "content": f"Hi {k}"}, {"role": "assistant", "content": f"Hello {k}."}],
             "tools": [WEATHER] if k == 1 else None} for k in range(8)]
    return build(tmp, tools_tokenizer, rows, 160, 3, struct_nulls="drop", policy="skip")


def test_a_field_spelling_other_markup_is_marked_by_its_own_kind(imitating):
    parquet, config = imitating
    shown = "".join(run_cli("show", str(parquet), "--row", str(k), "--config", str(config), "--color",
                            "never").stdout for k in range(3))
    assert "marks: from the record (config agentic's source re-rendered)" in shown
    assert "not the record" not in shown
    # the result, not reasoning, though it spells <think>
    assert regions_in(shown, "tool result") == "<think>cold</think> 3 degrees"
    # the reasoning spelling a tool call is reasoning; the answer spelling a tool result is no mark at all
    assert regions_in(shown, "reasoning") == "I write <tool_call>x</tool_call> next.Done."
    assert regions_in(shown, "tool call") == 'get_weather", "arguments": {"city": "Oslo"}'
    # the system prompt's <tool_call> format is no tool call
    assert "⟨tool call⟩" not in shown.split("Reply with")[1].split("to call a tool.")[0]


def test_a_tool_result_is_never_a_target(imitating):
    parquet, config = imitating
    rows, manifest = stored_rows(parquet)
    marks = record_marks(rows, manifest, str(config))
    kinds = [r.kind for regions in marks.by_segment.values() for r in regions]
    assert "tool result" in kinds and "tool call" in kinds and "reasoning" in kinds
    for row in rows:
        for regions in marks.of_row(row).values():
            for region in regions:
                targets = row.loss_mask[region.start:region.end]
                assert region.start < region.end
                assert (targets == 0).all() if region.kind == "tool result" else (targets == 1).all()
    shown = run_cli("show", str(parquet), "--row", "1", "--config", str(config), "--color", "never").stdout
    for piece in shown.split("⟨tool result⟩")[1:]:
        assert "[[" not in piece.split("⟨/tool result⟩")[0]


def test_a_conversation_cut_across_rows_is_marked_in_each(imitating):
    parquet, config = imitating
    rows, manifest = stored_rows(parquet)
    marks = record_marks(rows, manifest, str(config))
    cut = [row for row in rows if "c1" in row.conversation_ids]
    assert len(cut) >= 2 and any(row.continued and row.conversation_ids[0] == "c1" for row in cut)
    assert not marks.note.count("not found")
    # every segment of the conversation was found in its re-render, the continued ones included
    assert all((row.index, k) in marks.by_segment for row in cut for k, cid in enumerate(row.conversation_ids)
               if cid == "c1")


def test_history_expanded_samples_are_marked(tmp_path, tools_tokenizer):
    untagged = tmp_path / "untagged"
    shutil.copytree(tools_tokenizer, untagged)
    template = (untagged / "chat_template.jinja").read_text()
    template = template.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    (untagged / "chat_template.jinja").write_text(template)
    rows = [{"id": f"q{k}", "messages": two_questions(k), "tools": None} for k in range(3)]
    parquet, config = build(tmp_path, untagged, rows, 128, 2, top=["end_of_turn: ['<|im_end|>']"])
    manifest = manifest_beside(parquet)
    assert manifest["counts"]["history_expanded"]["conversations"] == 3
    shown = "".join(run_cli("show", str(parquet), "--row", str(k), "--config", str(config), "--color",
                            "never").stdout for k in range(2))
    assert "from the record" in shown and "not found" not in shown
    # each sample writes the reasoning of its own turn only: the first turn's sample, then the second's
    reasoning = regions_in(shown, "reasoning")
    assert re.fullmatch(r"(Think one (\d)\.Think two \2\.)+", reasoning) and reasoning.count("Think") >= 4


def test_without_the_source_the_marks_come_from_the_text_and_say_so(imitating, tmp_path):
    parquet, config = imitating
    shown = run_cli("show", str(parquet), "--row", "1", "--color", "never").stdout
    assert "marks: from the markup in the decoded text, not the record (the source is not available here: " \
           "no config named 'agentic' on this machine; pass --config)" in shown
    moved = tmp_path / "moved.yaml"
    moved.write_text(config.read_text().replace(str(config.parent / "src"), str(tmp_path / "gone")))
    shown = run_cli("show", str(parquet), "--row", "1", "--config", str(moved), "--color", "never").stdout
    assert shown.count("not the record (the source is not available here: ") == 1
    assert "⟨tool call⟩" in shown  # the text's markup still marks
    page = tmp_path / "r.html"
    assert run_cli("report", str(parquet), "-o", str(page), "--rows", "3", "--config", str(config)).returncode == 0
    html_page = page.read_text()
    assert "from the record (config agentic" in html_page
    assert '<span class="region tool-result">⟨tool result⟩</span>' in html_page
