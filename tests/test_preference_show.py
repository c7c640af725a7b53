"""`databuild show` on a preference row file (issue 34): both sides of a pair (or an unpaired completion and
its label), the shared prompt once and marked, each completion decoded after the prompt with exactly its
targets wrapped; checked against the tokenizer's own decode of the stored ids."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from conftest import run
from databuild.config import resolve_config
from databuild.encode.render import load_tokenizer
from databuild.preference.build import make_preference
from databuild.rowfile.preference_read import read_pairs

NAME = "muse-spark-tiny-preference-v1"
OPTIONS = dict(skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _runs(mask):
    return len(re.findall(r"1+", "".join(map(str, mask.tolist()))))


def _built(tmp_path_factory, source=None):
    config = resolve_config(NAME)
    if source is not None:
        config = dataclasses.replace(config, name=f"{NAME}-unpaired", sources=(
            dataclasses.replace(config.sources[0], dir=source, format="unpaired_preference", ignore_fields=(),
                                sha256=()),))
    return make_preference(config, tmp_path_factory.mktemp("show"))


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    return _built(tmp_path_factory)


def check_shown(parquet, tokenizer, row: int):
    pair = next(p for p in read_pairs(parquet) if p.row == row)
    shown = run("show", parquet, "--row", row, "--color", "never")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.split("\n")
    names = ("chosen", "rejected") if len(pair.completion_ids) == 2 else ("completion",)
    assert lines[0] == lines[-2] and repr(pair.id) in lines[0]
    text = shown.output
    prompt = tokenizer.decode(pair.prompt_ids.tolist(), **OPTIONS)
    assert f"⟦prompt⟧ {len(pair.prompt_ids):,} tokens, rendered once" in text and f"\n{prompt}\n⟦{names[0]}⟧" in text
    assert text.count("⟦prompt⟧") == 1
    for k, (name, ids, mask) in enumerate(zip(names, pair.completion_ids, pair.completion_masks)):
        start = text.index(f"⟦{name}⟧")
        body = text[text.index("\n", start) + 1:text.index(f"\n⟦{names[k + 1]}⟧") if k + 1 < len(names)
                    else text.rindex("\n", 0, text.rindex("\n"))]
        whole = tokenizer.decode(np.concatenate([pair.prompt_ids, ids]).tolist(), **OPTIONS)
        assert body.replace("[[", "").replace("]]", "") == whole[len(prompt):]
        assert body.count("[[") == _runs(mask) and f"{int(mask.sum()):,} targets" in text[start:]
        targets = "".join(re.findall(r"\[\[(.*?)\]\]", body, re.S))
        expected = "".join(tokenizer.decode(ids[a:b].tolist(), **OPTIONS) for a, b in (
            (m.start(), m.end()) for m in re.finditer(r"1+", "".join(map(str, mask.tolist())))))
        assert targets == expected
    return pair, text


def test_show_prints_both_sides_of_a_pair_around_one_prompt(paired):
    tokenizer = load_tokenizer(resolve_config(NAME).tokenizer.dir)
    for row in (0, 5, paired.data["output"]["rows"] - 1):
        check_shown(paired.parquet, tokenizer, row)


def test_show_refuses_a_row_past_the_end_in_one_line(paired):
    rows = paired.data["output"]["rows"]
    shown = run("show", paired.parquet, "--row", rows)
    assert shown.exit_code == 1 and f"no row {rows}: the file has {rows} rows" in shown.output
    assert "Traceback" not in shown.output and shown.output.count("\n") == 1


def test_show_refuses_an_id_equal_to_the_tokenizers_size_in_one_line(paired, tmp_path):
    """The boundary of show's id check on a pair: an id equal to the size is none of the tokenizer's (decoded
    as nothing, or an OverflowError further out), refused in one line; one below it is shown."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    size = len(load_tokenizer(resolve_config(NAME).tokenizer.dir))
    table = pq.read_table(paired.parquet)
    for value in (size - 1, size):
        folder = tmp_path / str(value)
        folder.mkdir()
        shutil.copyfile(paired.manifest, folder / paired.manifest.name)
        ids = table.column("chosen_input_ids").to_pylist()
        ids[0][0] = value
        column = pa.array(ids, type=table.schema.field("chosen_input_ids").type)
        index = table.schema.get_field_index("chosen_input_ids")
        pq.write_table(table.set_column(index, table.schema.field(index), column), folder / paired.parquet.name)
        shown = run("show", folder / paired.parquet.name, "--row", 0)
        if value < size:
            assert shown.exit_code == 0, shown.output
        else:
            assert shown.exit_code == 1 and shown.output.count("\n") == 1, shown.output
            assert f"row 0: token 0 has id {size}, outside 0..{size - 1} (the {size:,} ids of the tokenizer it is " \
                   "decoded with)" in shown.output


def test_show_prints_an_unpaired_completion_with_its_label(tmp_path_factory, tmp_path):
    data = tmp_path / "unpaired" / "data"
    data.mkdir(parents=True)
    rows = [{"id": f"u{k}", "prompt": [{"role": "user", "content": f"Question {k}?"}],
             "completion": [{"role": "assistant", "content": f"Answer {k}."}], "label": k % 2 == 0} for k in range(4)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    built = _built(tmp_path_factory, tmp_path / "unpaired")
    tokenizer = load_tokenizer(resolve_config(NAME).tokenizer.dir)
    for row in range(4):
        pair, text = check_shown(built.parquet, tokenizer, row)
        label = "desirable (label True)" if pair.label else "undesirable (label False)"
        assert f"targets, {label}" in text and "unpaired completion" in text and "⟦chosen⟧" not in text


def test_report_on_a_preference_file_has_its_funnel_lengths_and_pairs(paired, tmp_path):
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from html.parser import HTMLParser

    made = run("report", paired.parquet, "-o", tmp_path / "r.html", "--rows", 2)
    assert made.exit_code == 0, made.output
    page = (tmp_path / "r.html").read_text()
    HTMLParser().feed(page)
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    counts = paired.data["counts"]
    for group, what in (("pairs_refused", "refused"), ("pairs_dropped", "dropped")):
        for kind, n in counts[group].items():
            assert (f"{what}: {kind.replace('_', ' ')}" in page) == bool(n), kind
    table = pq.read_table(paired.parquet)
    chosen = pc.list_value_length(table.column("chosen_input_ids")).to_numpy()
    rejected = pc.list_value_length(table.column("rejected_input_ids")).to_numpy()
    data = json.loads(re.search(r'id="pair-lengths">(.*?)</script>', page).group(1))
    assert data["chosen"] == chosen.tolist() and data["rejected"] == rejected.tolist()
    assert data["prompt"] == pc.list_value_length(table.column("prompt_input_ids")).to_numpy().tolist()
    assert f"chosen longer in {int((chosen > rejected).sum()):,} pairs" in page
    assert page.count("<details") == 2 and page.count("⟦prompt⟧") == 2 and "&lt;|start|&gt;" in page
    assert "<|start|>" not in page


def test_report_diff_on_a_preference_file_points_at_diff(paired, tmp_path):
    made = run("report", paired.parquet, "-o", tmp_path / "r.html", "--diff", paired.parquet)
    assert made.exit_code == 1 and "run databuild diff A B instead" in made.output
