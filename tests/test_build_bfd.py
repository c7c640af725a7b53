"""`packing: bfd` end to end on the fixtures: the production verifier, the issue's invariants, the
rows of an independent rebuild (transformers' tokenization + tests/support/bfd_reference.py), determinism
across workers, batch sizes and source windows, overlong conversations, the recipe block."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from bfd_reference import reference_bfd
from conftest import BFD_WINDOW, TINY, TINY_LOCK, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.publish.recipe import recipe_values
from databuild.verification import gather, verify
from test_build import independent_conversations, run_cli


def test_the_production_verifier_accepts_it(bfd_build):
    report = verify(bfd_build.parquet, gather(bfd_build.parquet))
    assert report.failures == [] and report.exit_code == 0


def test_whole_conversations_full_rows_and_padding_that_is_never_a_target(bfd_build, tokenizer):
    table = pq.read_table(bfd_build.parquet)
    ids = np.array(table.column("input_ids").to_pylist())
    mask = np.array(table.column("loss_mask").to_pylist())
    owners = table.column("conversation_ids").to_pylist()
    starts = table.column("seq_start_id").to_pylist()
    assert ids.shape == (40, 512)
    real = [c for row in owners for c in row if c]
    assert len(real) == len(set(real))  # no conversation id in two rows
    padding = 0
    for row_ids, row_mask, row_owners, row_starts in zip(ids, mask, owners, starts):
        assert "" not in row_owners[:-1]
        if row_owners[-1] == "":
            assert (row_ids[row_starts[-1]:] == tokenizer.pad_token_id).all()
            assert not row_mask[row_starts[-1]:].any()
            padding += 512 - row_starts[-1]
        for s in row_starts[1:len(row_owners) - (row_owners[-1] == "")]:
            assert row_ids[s - 1] == tokenizer.eos_token_id  # each conversation ends with its separator
    output = bfd_build.data["output"]
    assert padding > 0 and output["padding_tokens"] == padding
    assert output["tokens"] == 40 * 512 == sum(v["tokens"] for v in bfd_build.data["counts"]["by_source"].values()) \
        + padding
    assert bfd_build.data["continued_rows"] == []
    assert bfd_build.data["build"]["packing"] == {
        "policy": "bfd", "window": BFD_WINDOW, "overlong": "drop",
        "pad": {"token": "<|endoftext|>", "id": tokenizer.pad_token_id, "from": "tokenizer"}}


def test_rows_match_an_independent_rebuild(bfd_build, tokenizer, source_conversations):
    conversations = list(independent_conversations(tokenizer, source_conversations))
    expected, counts = reference_bfd(conversations, 512, tokenizer.eos_token_id, tokenizer.pad_token_id, BFD_WINDOW)
    table = pq.read_table(bfd_build.parquet)
    assert table.to_pylist() == expected[:40]
    # the build reads whole windows: its counts are those of the windows it took
    windows = -(-bfd_build.data["counts"]["conversations_read"] // BFD_WINDOW)
    taken, taken_counts = reference_bfd(conversations[:windows * BFD_WINDOW], 512, tokenizer.eos_token_id,
                                        tokenizer.pad_token_id, BFD_WINDOW)
    assert len(taken) >= 40 and taken[:40] == expected[:40]
    assert bfd_build.data["counts"]["overlong_conversations"] == {"dropped": taken_counts["dropped"], "truncated": 0}
    assert taken_counts["dropped"] > 0


@pytest.mark.parametrize("workers, batch_size, window, spill_prefix", [(1, 1, 7, 0), (2, 33, 64, 10)])
def test_same_bytes_across_workers_batches_and_source_windows(bfd_build, bfd_config, tmp_path, sixteen_cores, workers, batch_size,
                                                              window, spill_prefix):
    result = make(bfd_config, tmp_path, workers=workers, batch_size=batch_size, window=window,
                  spill_prefix=spill_prefix, progress=False)
    assert result.parquet.read_bytes() == bfd_build.parquet.read_bytes()
    assert result.manifest.read_bytes() == bfd_build.manifest.read_bytes()


def test_truncate_keeps_each_overlong_conversation_as_a_full_row_of_its_beginning(tmp_path, tokenizer,
                                                                                  source_conversations):
    config = load_config(write_config(tmp_path / "t.yaml", packing="bfd", packing_window=BFD_WINDOW,
                                      overlong="truncate", pad_token="<|end|>"))
    result = make(config, tmp_path / "out", progress=False)
    conversations = list(independent_conversations(tokenizer, source_conversations))
    pad = tokenizer.convert_tokens_to_ids("<|end|>")
    expected, _ = reference_bfd(conversations, 512, tokenizer.eos_token_id, pad, BFD_WINDOW, "truncate")
    assert pq.read_table(result.parquet).to_pylist() == expected[:40]
    assert result.data["counts"]["overlong_conversations"]["truncated"] > 0
    assert result.data["build"]["packing"]["pad"] == {"token": "<|end|>", "id": pad, "from": "config"}


def test_overlong_error_is_one_line_naming_file_row_and_id(tmp_path):
    config = write_config(tmp_path / "e.yaml", packing="bfd", overlong="error")
    result = run_cli("make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: conversation longer than a row: databuild-fixtures/tulu-tiny: data/train-")
    assert "tokens with its separator, longer than a row (512); set overlong: drop or truncate" in result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == [TINY_LOCK]  # nothing but the lock, kept


def test_a_manifest_with_another_padding_count_does_not_verify(bfd_build, tmp_path):
    manifest = json.loads(bfd_build.manifest.read_text())
    manifest["output"]["padding_tokens"] += 1
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    report = verify(bfd_build.parquet, gather(bfd_build.parquet, tmp_path / "m.json"))
    padding = bfd_build.data["output"]["padding_tokens"]
    assert report.failures == [f"padding_tokens: expected {padding + 1}, found {padding} ({tmp_path / 'm.json'})"]


def test_the_recipe_block_records_the_policy(bfd_build, tiny_build, tokenizer):
    assert dict(recipe_values(tiny_build.data))[("build", "packing_policy")] == "concat"
    assert dict(recipe_values(bfd_build.data))[("build", "packing_policy")] == (
        f"bfd (window {BFD_WINDOW}, overlong drop, pad <|endoftext|> id {tokenizer.pad_token_id} from tokenizer)")


def test_show_and_report_name_the_padding(bfd_build, tmp_path):
    padded = next(i for i, row in enumerate(pq.read_table(bfd_build.parquet).column("conversation_ids").to_pylist())
                  if row[-1] == "")
    shown = run_cli("show", str(bfd_build.parquet), "--row", str(padded))
    assert shown.returncode == 0, shown.stderr
    assert "⟦padding⟧" in shown.stdout and "<|endoftext|><|endoftext|>" not in shown.stdout
    report = run_cli("report", str(bfd_build.parquet), "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr
    assert "padding tokens" in (tmp_path / "r.html").read_text()


def test_a_concat_config_refuses_the_padding_keys(tmp_path):
    from databuild.errors import BuildError

    with pytest.raises(BuildError, match="key 'packing_window' = 8: applies to a policy that pads"):
        load_config(write_config(tmp_path / "c.yaml", packing_window=8))
    with pytest.raises(BuildError, match="key 'packing' = 'ffd': known policies: bfd, concat"):
        load_config(write_config(tmp_path / "c.yaml", packing="ffd"))
    with pytest.raises(BuildError, match="key 'overlong' = 'split': expected one of drop, truncate, error"):
        load_config(write_config(tmp_path / "c.yaml", packing="bfd", overlong="split"))
    assert TINY  # the tiny config itself names no packing: concat, golden bytes (tests/test_build.py)
