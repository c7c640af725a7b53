"""`databuild show` and `databuild report` on the tiny build: what they print matches the file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import TOKENIZER_DIR, run
from databuild.build import make
from databuild.config import resolve_config
from databuild.encode.render import load_tokenizer
from databuild.inputs.tokenizer import tokenizer_dir
from databuild.rowfile.read import StoredRow, open_parquet, read_rows
from databuild.views.show import decode_spans, spans

NAME = "muse-spark-tiny-fixed512-v1"

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    make(resolve_config(NAME), out, progress=False)
    parquet = out / f"{NAME}.parquet"
    manifest = json.loads((out / f"{NAME}.manifest.json").read_text(encoding="utf-8"))
    table = pq.read_table(parquet)
    return parquet, manifest, table


def supervised_runs(output: str) -> list[str]:
    return re.findall(r"\[\[(.*?)\]\]", output, flags=re.S)


@pytest.mark.parametrize("row", [0, 1, 17, 39])
def test_show_marks_targets_and_conversations(built, row):
    parquet, _, table = built
    result = run("show", parquet, "--row", row)
    assert result.exit_code == 0, result.output
    supervised = int(np.count_nonzero(table.column("loss_mask")[row].as_py()))
    assert f"row {row} of 40: supervised {supervised} / 512 tokens" in result.stdout
    for conversation_id in table.column("conversation_ids")[row].as_py():
        assert f"⟦{conversation_id}⟧" in result.stdout
    assert supervised_runs(result.stdout)


def test_show_plain_output_has_no_ansi(built):
    result = run("show", built[0], "--row", 2)
    assert result.exit_code == 0 and "\x1b" not in result.output


def test_show_colour_on_request(built):
    result = run("show", built[0], "--row", 2, "--color", "always")
    assert result.exit_code == 0 and "\x1b[32m" in result.stdout and "[[" not in result.stdout


def test_show_supervised_runs_end_in_closings(built):
    parquet, _, table = built
    closings = [run_ for row in range(3) for run_ in supervised_runs(run("show", parquet, "--row", row).stdout)]
    assert any(text.endswith(("<|return|>", "<|end|>")) for text in closings)
    assert "<|return|>" in "".join(closings)


def test_continuation_is_marked(built):
    parquet, _, table = built
    ids = table.column("conversation_ids").to_pylist()
    row = next(i for i in range(1, len(ids)) if ids[i][0] == ids[i - 1][-1])
    assert "continued from an earlier row" in run("show", parquet, "--row", row).stdout


def test_run_decoding_keeps_every_character(built):
    """Decoding by runs gives the same text as decoding the whole row: no split multi-byte characters."""
    parquet, manifest, _ = built
    tokenizer = load_tokenizer(tokenizer_dir(parquet, None, manifest))
    for row in read_rows(open_parquet(parquet), parquet, 0, 40):
        parts = spans(row)
        assert [p.start for p in parts][0] == 0 and parts[-1].end == 512
        assert "".join(decode_spans(tokenizer, row, parts)) == tokenizer.decode(
            row.input_ids.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def test_show_tokenizer_by_config_name(built):
    result = run("show", built[0], "--tokenizer", NAME)
    assert result.exit_code == 0 and "⟦" in result.stdout


def test_show_refuses_a_tokenizer_that_is_not_the_pinned_one(built, tmp_path):
    parquet, manifest, _ = built
    shutil.copy(parquet, tmp_path / parquet.name)
    manifest = json.loads(json.dumps(manifest))
    manifest["inputs"]["tokenizer"]["sha256"]["tokenizer.json"] = "0" * 64
    (tmp_path / f"{NAME}.manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    result = run("show", tmp_path / parquet.name)
    assert result.exit_code != 0 and "the manifest pins 0000" in result.stderr


@pytest.fixture(scope="module")
def page(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = run("report", built[0], "-o", out)
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_report_numbers_match_the_manifest(built, page):
    _, manifest, _ = built
    out = manifest["output"]
    for text in (f"{out['rows']:,}", out["rows_sha256"], out["parquet_sha256"], f"{out['supervised_token_ratio']:.4f}",
                 manifest["inputs"]["tokenizer"]["revision"], manifest["versions"]["pyarrow"]):
        assert text in page
    for name, counts in manifest["counts"]["by_source"].items():
        assert f"<th>{name}</th><td>{counts['conversations']:,} conversations, {counts['tokens']:,} tokens</td>" in page
    skipped = manifest["counts"]["rows_skipped"]["no_supervised_token"]
    assert f"{skipped} of {out['rows'] + skipped} rows" in page
    assert 'class="warn"' not in page  # the file and its manifest agree


def test_report_per_row_figures_match_the_parquet(built, page):
    _, _, table = built
    data = json.loads(re.search(r'<script type="application/json" id="row-stats">(.*?)</script>', page).group(1))
    masks = table.column("loss_mask").to_pylist()
    assert data["supervised"] == [int(np.count_nonzero(m)) for m in masks]
    assert data["conversation_segments"] == [len(s) for s in table.column("seq_start_id").to_pylist()]
    assert f"row 3: {data['supervised'][3]:,} supervised of 512" in page
    assert f"min {min(data['supervised']):,}, max {max(data['supervised']):,}" in page
    assert page.count("<details") == 8 and "<mark>" in page and "&lt;|return|&gt;" in page


def test_report_is_self_contained(page):
    for pattern in (r"https?://", r"<link\b", r"@import", r"<img\b", r"<iframe\b", r"<script(?![^>]*application/json)",
                    r"\bsrc\s*=", r"\bhref\s*=\s*[\"'](?!#)"):
        assert not re.search(pattern, page, flags=re.I), pattern
    assert all(u.startswith("data:") for u in re.findall(r"url\(\s*['\"]?([^'\")]*)", page))


def test_report_without_manifest_or_tokenizer(built, tmp_path):
    shutil.copy(built[0], tmp_path / "rows.parquet")
    result = run("report", tmp_path / "rows.parquet", "-o", tmp_path / "r.html", "--rows", 2)
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "no manifest beside rows.parquet" in page and "Token ids shown" in page and page.count("<details") == 2


@pytest.mark.parametrize("args", [["show", "{p}", "--row", "40"], ["show", "{p}", "--row", "-1"],
                                  ["show", "{missing}"], ["report", "{missing}"],
                                  ["show", "{p}", "--tokenizer", "no-such-tokenizer"]])
def test_errors_are_one_line(built, tmp_path, args):
    values = {"p": built[0], "missing": tmp_path / "missing.parquet"}
    result = run(*(a.format(**values) for a in args))
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@pytest.mark.parametrize("command", ["show", "report"])
def test_a_row_file_with_nulls_is_one_line(built, tmp_path, command):
    table = pq.read_table(built[0])
    rows = table.to_pylist()
    rows[0]["loss_mask"] = [None] + rows[0]["loss_mask"][1:]
    damaged = tmp_path / "rows.parquet"
    pq.write_table(pq.read_table(built[0]).from_pylist(rows, schema=table.schema), damaged)
    result = run(command, str(damaged), *(["--tokenizer", str(TOKENIZER_DIR)] if command == "show" else
                                          ["-o", str(tmp_path / "r.html")]))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == f"error: {damaged}: row 0: column 'loss_mask' holds a null value"


@pytest.mark.parametrize("command", ["show", "report"])
@pytest.mark.parametrize("change, field", [
    (lambda m: m["counts"].update(by_source={"s": 3}), "counts.by_source[0] is int 3, expected dict"),
    (lambda m: m["output"].update(rows="40"), "output.rows is str '40', expected int"),
    (lambda m: m.update(name=5), "name is int 5, expected str"),
    (lambda m: m["counts"]["rows_skipped"].update(no_supervised_token="4"),
     "counts.rows_skipped[0] is str '4', expected int"),
])
def test_a_manifest_edited_by_hand_is_one_line(built, tmp_path, command, change, field):
    shutil.copy(built[0], tmp_path / "rows.parquet")
    manifest = json.loads(json.dumps(built[1]))
    change(manifest)
    (tmp_path / "rows.manifest.json").write_text(json.dumps(manifest))
    result = run(command, str(tmp_path / "rows.parquet"), *(["-o", str(tmp_path / "r.html")] if command == "report"
                                                            else []))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == f"error: {tmp_path / 'rows.manifest.json'}: manifest field {field}"


def test_spans_read_as_in_the_row_with_a_metaspace_decoder():
    """Decoded alone, a span would lose the leading space a Metaspace decoder strips from a text's
    first token: 'Hello' + 'world again' for 'Hello world again'."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "\u2581Hello": 1, "\u2581world": 2, "\u2581again": 3},
                                         unk_token="<unk>"))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    row = StoredRow(0, np.array([1, 2, 3], np.int32), np.array([0, 1, 1], np.int8), np.array([0], np.int32), ("c",), False)
    texts = decode_spans(PreTrainedTokenizerFast(tokenizer_object=backend), row, spans(row))
    assert texts == ["Hello", " world again"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(page, tmp_path):
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", (tmp_path / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "<svg" in dom.stdout and "Supervised tokens per row" in dom.stdout
