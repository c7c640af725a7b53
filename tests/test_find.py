"""show and report find their tokenizer without --tokenizer (a content-pinned one where it was read,
or a known config holding the same tokenizer.json); --tokenizer takes a config's path; the report is
written beside the parquet; configs are found by their `name:` as well as their file name."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import TOKENIZER_DIR, run, write_config
from databuild.build import make
from databuild.config import load_config, resolve_config
from databuild.errors import BuildError
from test_local_pins import content_pinned


@pytest.fixture
def local_build(tmp_path):
    """A build whose tokenizer is pinned by content alone, from a copy of the fixture tokenizer."""
    tokenizer = tmp_path / "tok"
    shutil.copytree(TOKENIZER_DIR, tokenizer)
    config = content_pinned(tmp_path, rows=3)
    config.write_text(config.read_text().replace(str(TOKENIZER_DIR), str(tokenizer)))
    return make(load_config(config), tmp_path / "out", progress=False), tokenizer, config


def test_show_and_report_find_a_content_pinned_tokenizer(local_build, tmp_path):
    result, tokenizer, config = local_build
    shown = run("show", result.parquet)
    assert shown.exit_code == 0, shown.output
    assert "⟦" in shown.stdout and "<|start|>" in shown.stdout  # decoded text, not ids
    reported = run("report", result.parquet)
    page = result.parquet.with_name(result.parquet.name.removesuffix(".parquet") + ".report.html")
    assert reported.exit_code == 0 and page.is_file()
    assert f"Decoded with the tokenizer in {tokenizer}" in page.read_text()
    assert "Where the source rows went" in page.read_text()
    assert run("show", result.parquet, "--tokenizer", config).exit_code == 0  # a config's path


def test_a_moved_tokenizer_is_found_by_content_or_named(local_build, tmp_path):
    result, tokenizer, _ = local_build
    tokenizer.rename(tmp_path / "elsewhere")
    # the repository's tiny config holds the same tokenizer.json: found by its pin
    assert run("show", result.parquet).exit_code == 0
    manifest = json.loads(result.manifest.read_text())
    manifest["inputs"]["tokenizer"]["sha256"]["tokenizer.json"] = "0" * 64
    result.manifest.write_text(json.dumps(manifest))
    shown = run("show", result.parquet)
    assert shown.exit_code == 1 and f"tokenizer pinned by content (read from {tokenizer}) is neither" in shown.stderr


def test_configs_are_found_by_their_name(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    write_config(tmp_path / "configs" / "file-name.yaml", name="declared-name")
    monkeypatch.setenv("DATABUILD_CONFIGS", str(tmp_path / "configs"))
    assert resolve_config("declared-name").name == "declared-name"
    assert resolve_config("file-name").name == "declared-name"
    write_config(tmp_path / "configs" / "second.yaml", name="declared-name")
    with pytest.raises(BuildError, match="several configs are named 'declared-name'"):
        resolve_config("declared-name")
