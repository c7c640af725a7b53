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
from databuild.rowfile.preference import read_pairs

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
