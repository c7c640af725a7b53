"""The preference export's cut (databuild/export/preference.py), on hand-made native rows: a
completion's untrained head joins the prompt when the pair shares it, its untrained tail is left out
and counted, the tokens between carry their target mask (0 inside a multi-turn completion); a
completion without a target is refused in one line naming the row, the id and the side. TRL's reading of the result is tests/test_trl_preference_run.py (optional: torch, trl)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from databuild.errors import BuildError
from conftest import run
from databuild.export.preference import DPO_SCHEMA, KTO_SCHEMA, dpo_table, kto_table


def pairs(*rows) -> pa.Table:
    """rows of (id, prompt ids, chosen ids, chosen mask, rejected ids, rejected mask)."""
    names = ["id", "prompt_input_ids", "chosen_input_ids", "chosen_loss_mask", "rejected_input_ids", "rejected_loss_mask"]
    kinds = [pa.string(), *[pa.list_(pa.int32()), pa.list_(pa.int32()), pa.list_(pa.int8())], pa.list_(pa.int32()),
             pa.list_(pa.int8())]
    return pa.table({n: pa.array([r[i] for r in rows], type=k) for i, (n, k) in enumerate(zip(names, kinds))})


def test_head_joins_the_prompt_and_tail_is_counted():
    table = pairs(("a", [1, 2], [7, 8, 30, 31, 9], [0, 0, 1, 1, 0], [7, 8, 40, 9, 9], [0, 0, 1, 0, 0]),
                  ("b", [3], [50, 51], [1, 1], [60], [1]))
    out, tail = dpo_table(table, 0, "f.parquet")
    assert out.schema.equals(DPO_SCHEMA)
    assert out.to_pylist() == [
        {"id": "a", "prompt_ids": [1, 2, 7, 8], "chosen_ids": [30, 31], "rejected_ids": [40],
         "chosen_target_mask": [1, 1], "rejected_target_mask": [1]},
        {"id": "b", "prompt_ids": [3], "chosen_ids": [50, 51], "rejected_ids": [60],
         "chosen_target_mask": [1, 1], "rejected_target_mask": [1]},
    ]
    assert tail == 3  # one after the chosen's last target, two after the rejected's


def test_untrained_tokens_inside_a_completion_or_heads_that_differ_are_masked():
    """A multi-turn completion keeps its untrained middle, masked 0; heads that differ in a pair stay in
    their completions, masked 0, and the prompt stays the native one."""
    out, tail = dpo_table(pairs(("m", [1], [7, 30, 5, 6, 31, 9], [0, 1, 0, 0, 1, 0], [7, 40], [0, 1]),
                                ("h", [1], [7, 30], [0, 1], [8, 40], [0, 1])), 0, "f.parquet")
    assert out.to_pylist() == [
        {"id": "m", "prompt_ids": [1, 7], "chosen_ids": [30, 5, 6, 31], "rejected_ids": [40],
         "chosen_target_mask": [1, 0, 0, 1], "rejected_target_mask": [1]},
        {"id": "h", "prompt_ids": [1], "chosen_ids": [7, 30], "rejected_ids": [8, 40],
         "chosen_target_mask": [0, 1], "rejected_target_mask": [0, 1]},
    ]
    assert tail == 1


def test_a_completion_without_a_target_is_refused_naming_row_id_and_side():
    with pytest.raises(BuildError) as raised:
        dpo_table(pairs(("ok", [1], [30], [1], [40], [1]), ("e", [1], [30], [1], [40, 41], [0, 0])), 11, "f.parquet")
    assert str(raised.value).startswith("f.parquet: row 12 (id e), rejected: refused: the completion has no target")
    assert "\n" not in str(raised.value)


def test_unpaired_rows_keep_their_label():
    table = pa.table({"id": ["u", "v"], "prompt_input_ids": pa.array([[1], [2, 3]], pa.list_(pa.int32())),
                      "completion_input_ids": pa.array([[7, 30, 9], [40]], pa.list_(pa.int32())),
                      "completion_loss_mask": pa.array([[0, 1, 0], [1]], pa.list_(pa.int8())),
                      "label": [True, False]})
    out, tail = kto_table(table, 0, "f.parquet")
    assert out.schema.equals(KTO_SCHEMA)
    assert out.to_pylist() == [
        {"id": "u", "prompt_ids": [1, 7], "completion_ids": [30], "label": True, "completion_target_mask": [1]},
        {"id": "v", "prompt_ids": [2, 3], "completion_ids": [40], "label": False, "completion_target_mask": [1]}]
    assert tail == 1


@pytest.mark.parametrize("to", ["trl-dpo", "trl-kto"])
def test_a_packed_sft_file_is_refused_in_one_line(tiny_build, tmp_path, to):
    result = run("export", tiny_build.parquet, "--to", to, "-o", tmp_path / "out.parquet")
    assert result.exit_code == 1
    assert result.output.strip() == (f"error: {tiny_build.parquet}: refused: --to {to} reads a preference row file "
                                     f"with id, prompt_input_ids, " + ("chosen_input_ids, chosen_loss_mask, rejected_input_ids, "
                                     "rejected_loss_mask" if to == "trl-dpo" else "completion_input_ids, completion_loss_mask, "
                                     "label") + ", and this file has no id (a packed SFT row file exports --to hf)")
    assert list(tmp_path.iterdir()) == []
