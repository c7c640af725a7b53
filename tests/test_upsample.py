"""Upsampling: a `take` above a source's rows repeats every row as often as it fits, then a seeded
remainder once more (open-instruct's mixer), each repeat placed by the permutation and counted in the
funnel; the stream recomputed with numpy alone from the seed."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from databuild.build import make
from databuild.config import load_config
from databuild.publish.funnel import funnel_lines
from test_build import independent_rows
from test_mixture import build, entry, mixture, split_fixture


def numpy_mixed(first_rows: int, second_rows: int, take: float, seed: int) -> list[int]:
    """The mixed source as source rows (of both halves, numbered across them), from data/README.md's
    rule with numpy alone: q, r = divmod(k, n); every row q times, default_rng([seed, 1]).permutation(n)[:r]
    once more; sorted; the second source's rows after. (independent_rows then orders them by
    default_rng(42).permutation over them all, repeats included.)"""
    count = int(np.floor(take * first_rows))
    repeats, remainder = divmod(count, first_rows)
    extra = np.random.default_rng([seed, 1]).permutation(first_rows)[:remainder]
    selected = np.sort(np.concatenate([np.repeat(np.arange(first_rows)[None], repeats, 0).ravel(), extra]))
    mixed = np.concatenate([selected, first_rows + np.arange(second_rows)])
    return mixed.tolist()


@pytest.fixture(scope="module")
def upsampled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("up")
    first, second = split_fixture(tmp)
    config = mixture(tmp, entry(first, repo="fixtures/first", take=2.5), entry(second, repo="fixtures/second"),
                     rows="all")
    return tmp, config, build(config, tmp / "out")


def test_every_row_twice_then_a_seeded_half_more_in_the_permutations_places(upsampled, tokenizer,
                                                                           source_conversations):
    _, _, result = upsampled
    mixed = numpy_mixed(170, 130, 2.5, 42)
    assert len(mixed) == 425 + 130
    table = pq.read_table(result.parquet)
    expected, skipped, _ = independent_rows(tokenizer, [source_conversations[i] for i in mixed], 512, table.num_rows)
    assert table.to_pylist() == expected
    source = result.data["inputs"]["sources"][0]
    assert (source["take"], source["rows"], source["selected"]) == (2.5, 170, 425)
    selected = np.array([i for i in mixed if i < 170])
    assert source["selected_sha256"] == hashlib.sha256(selected.astype("<i8").tobytes()).hexdigest()
    assert np.bincount(selected, minlength=170).min() == 2 and np.bincount(selected).max() == 3


def test_the_funnel_counts_each_repeat(upsampled):
    _, _, result = upsampled
    funnel = result.data["counts"]["funnel"]
    first, second = funnel["sources"]
    assert (first["rows"], first["not_taken"], first["taken"], first["repeats"]) == (170, 0, 170, 255)
    assert (second["taken"], second["repeats"]) == (130, 0)
    for box in (first, second, funnel["total"]):
        assert box["rows"] == box["not_taken"] + box["taken"]
        assert box["taken"] + box["repeats"] == box["not_reached"] + box["read"]
        assert box["read"] == sum(box["dropped"].values()) + box["packed"]
        assert box["packed"] == box["in_kept_rows"] + box["in_rows_without_target"] + box["not_written"]
    # rows: all reads every repeat; the copies in kept rows are counted one by one
    assert funnel["total"]["not_reached"] == 0 and first["read"] == 425
    assert first["in_kept_rows"] > 170
    assert any(line.strip().startswith("repeats added (take above 1)") and "255" in line
               for line in funnel_lines(funnel))
    assert result.data["counts"]["source_conversations"] == 555


def test_the_same_bytes_whatever_the_workers_batches_and_window(upsampled, sixteen_cores):
    tmp, config, result = upsampled
    again = make(load_config(config), tmp / "again", workers=2, batch_size=7, window=16, progress=False)
    assert again.parquet.read_bytes() == result.parquet.read_bytes()
    assert again.manifest.read_bytes() == result.manifest.read_bytes()


def test_a_count_above_the_rows_is_the_same_rule(tmp_path):
    first, second = split_fixture(tmp_path)
    by_fraction = build(mixture(tmp_path, entry(first, take=2.5), name="f.yaml", rows=20), tmp_path / "f")
    by_count = build(mixture(tmp_path, entry(first, take=425), name="c.yaml", rows=20), tmp_path / "c")
    assert by_count.data["output"]["rows_sha256"] == by_fraction.data["output"]["rows_sha256"]
