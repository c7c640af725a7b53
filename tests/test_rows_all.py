"""`rows: all`: a build keeps every row its sources give, and records the count it reached; a recipe
then pins that count."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from conftest import write_config
from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError
from test_build import independent_rows, run_cli


def test_rows_all_keeps_every_row_an_independent_rebuild_reaches(tmp_path, tokenizer, source_conversations):
    result = make(load_config(write_config(tmp_path / "c.yaml", rows="all")), tmp_path / "out", progress=False)
    table = pq.read_table(result.parquet)
    reached = table.num_rows
    expected, skipped, continued = independent_rows(tokenizer, source_conversations, 512, reached)
    assert table.to_pylist() == expected
    with pytest.raises(AssertionError, match="fixtures ran out"):  # one row more is not there to build
        independent_rows(tokenizer, source_conversations, 512, reached + 1)
    assert result.data["build"]["rows"] == "all" and result.data["output"]["rows"] == reached
    funnel = result.data["counts"]["funnel"]["total"]
    assert funnel["not_reached"] == 0 and funnel["read"] == funnel["taken"] == len(source_conversations)
    # the count it reached, pinned, builds the same rows
    pinned = make(load_config(write_config(tmp_path / "p.yaml", rows=reached)), tmp_path / "pinned", progress=False)
    assert pinned.parquet.read_bytes() == result.parquet.read_bytes()


def test_make_says_all_and_the_recipe_pins_the_count(tmp_path):
    config = write_config(tmp_path / "c.yaml", rows="all")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  dataset: {}\n")
    done = run_cli("make", str(config), "--out", str(tmp_path / "out"), "--recipe", str(recipe))
    assert done.returncode == 0, done.stderr
    line = next(l for l in done.stdout.splitlines() if l.strip().startswith("rows "))
    assert "(rows: all; every row the sources give)" in line
    count = int(line.split()[1])
    assert f"rows: {count}\n" in recipe.read_text()
    listed = run_cli("list", env={"DATABUILD_CONFIGS": str(tmp_path)})
    assert "\tall rows x 512 tokens\t" in listed.stdout, listed.stdout


@pytest.mark.parametrize("value", ["every", 0, -3, True, 1.5])
def test_rows_is_a_count_or_all(tmp_path, value):
    with pytest.raises(BuildError, match="key 'rows'"):
        load_config(write_config(tmp_path / "c.yaml", rows=value))


def test_rows_all_with_nothing_to_build_names_its_counts(tmp_path):
    config = load_config(write_config(tmp_path / "c.yaml", rows="all", row_tokens=10**7))
    with pytest.raises(BuildError, match=r"^the source ran out: rows: all, and no row could be built; of its 300 "):
        make(config, tmp_path / "out", progress=False)
