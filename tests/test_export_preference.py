"""The preference export. Its cut (databuild/exports/preference.py), on hand-made native rows: a
completion's untrained head joins the prompt when the pair shares it, its untrained tail is left out
and counted, the tokens between carry their target mask (0 inside a multi-turn completion); a
completion without a target is refused in one line naming the row, the id and the side; for any
generated pairs, every target kept and nothing else trained (a property test). Through
`databuild export` on a real preference build: every summed token a native target, checked
independently; verify passes, with --from too, and fails closed on a planted token; a file of the
wrong kind refused in one line; an unpaired build through --to trl-kto likewise. TRL's reading of it is tests/test_trl_preference_run.py (optional)."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run, verify_cli
from databuild.errors import BuildError
from databuild.exports.preference import DPO_SCHEMA, KTO_SCHEMA, dpo_table, kto_table


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
    kind = "paired" if to == "trl-dpo" else "unpaired"
    assert result.output.strip() == (f"error: {tiny_build.parquet}: refused: --to {to} exports {kind} row files, and "
                                     "this is a packed one: export it --to megatron-bridge or --to miles or --to hf")
    assert list(tmp_path.iterdir()) == []


# --- the export of a real preference build (configs/muse-spark-tiny-preference-v1.yaml) -----------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from databuild.config import resolve_config
    from databuild.preference.build import make_preference

    return make_preference(resolve_config("muse-spark-tiny-preference-v1"), tmp_path_factory.mktemp("pref"))


@pytest.fixture(scope="module")
def dpo_export(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("dpo") / "pairs.parquet"
    result = run("export", built.parquet, "--to", "trl-dpo", "-o", out)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_every_trained_token_is_a_native_target(built, dpo_export):
    """Independently of the cut's code: each sequence TRL scores (prompt_ids + a completion) is the native
    prompt + completion up to its last target, and the positions the script's trainer sums over (the
    completion's tokens where its target mask is 1) are exactly the native targets' positions."""
    out, _ = dpo_export
    native = pq.read_table(built.parquet).to_pylist()
    exported = pq.read_table(out).to_pylist()
    assert [r["id"] for r in exported] == [r["id"] for r in native] and native
    for mine, theirs in zip(exported, native):
        for side in ("chosen", "rejected"):
            sequence = theirs["prompt_input_ids"] + theirs[f"{side}_input_ids"]
            targets = [len(theirs["prompt_input_ids"]) + i for i, m in enumerate(theirs[f"{side}_loss_mask"]) if m]
            scored = mine["prompt_ids"] + mine[f"{side}_ids"]
            assert scored == sequence[:len(scored)]
            mask = mine[f"{side}_target_mask"]
            assert len(mask) == len(mine[f"{side}_ids"]) and mask[-1] == 1
            assert [len(mine["prompt_ids"]) + i for i, m in enumerate(mask) if m] == targets


def test_the_export_verifies_and_fails_closed(built, dpo_export, tmp_path):
    out, output = dpo_export
    assert "tails dropped" in output and "the trainer trains every one" in output
    assert verify_cli(out).exit_code == 0
    assert verify_cli(out, "--from", built.parquet).exit_code == 0
    manifest = json.loads(out.with_name("pairs.manifest.json").read_text())
    assert manifest["export"] == "trl-dpo" and manifest["source"]["kind"] == "paired"
    assert manifest["source"]["rows_sha256"] == built.data["output"]["rows_sha256"]
    assert manifest["counts"]["unrepresentable"] == {}
    planted = tmp_path / "pairs.parquet"  # one token changed in a copy, the manifest and configs copied beside it
    table = pq.read_table(out)
    rows = table.to_pylist()
    rows[3]["chosen_ids"][0] += 1
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), planted)
    for name in ("pairs.manifest.json", "pairs.dpo.yaml", "pairs.dpo.py"):
        shutil.copy(out.with_name(name), tmp_path / name)
    failed = verify_cli(planted)
    assert failed.exit_code != 0
    assert "content_sha256" in failed.output and "row 3" in failed.output
    assert "pairs.dpo.py: differs from the configuration the export writes" in failed.output  # moved: names its path


@pytest.mark.parametrize("to, expected", [
    ("hf", "--to hf exports packed row files, and this is a paired one: export it --to trl-dpo"),
    ("trl-kto", "--to trl-kto exports unpaired row files, and this is a paired one: export it --to trl-dpo"),
])
def test_a_preference_file_is_refused_by_other_formats(built, tmp_path, to, expected):
    result = run("export", built.parquet, "--to", to, "-o", tmp_path / "out.parquet")
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {built.parquet}: refused: {expected}"
    assert list(tmp_path.iterdir()) == []


def test_an_unpaired_build_exports_for_kto(tmp_path):
    """KTO's shape made (JSON Lines: prompt, completion, label) and exported --to trl-kto: each row's label
    kept, every summed token a native target, the export verified against a fresh one."""
    from databuild.config import load_config
    from conftest import write_config
    from databuild.preference.build import make_preference

    rows = [{"id": f"u-{k}", "prompt": [{"role": "user", "content": f"question {k}?"}],
             "completion": [{"role": "assistant", "content": f"answer {k}" + " more" * k}], "label": k % 3 != 0}
            for k in range(9)]
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = load_config(write_config(tmp_path / "kto.yaml", name="kto-test", task="preference", row_tokens=None,
                                      prompt_tokens=80, sequence_tokens=120, rows="all", on_bad_conversation="skip",
                                      source={"dir": str(tmp_path / "src"), "repo": "local/kto", "revision": "4" * 40,
                                              "format": "unpaired_preference", "ignore_fields": None}))
    built = make_preference(config, tmp_path / "out")
    out = tmp_path / "kto" / "rows.parquet"
    result = run("export", built.parquet, "--to", "trl-kto", "-o", out)
    assert result.exit_code == 0, result.output
    native, exported = pq.read_table(built.parquet).to_pylist(), pq.read_table(out).to_pylist()
    assert len(exported) == len(native) == len(rows)
    for mine, theirs in zip(exported, native):
        assert mine["label"] is theirs["label"] is rows[int(theirs["id"].split("-")[1])]["label"]
        sequence = theirs["prompt_input_ids"] + theirs["completion_input_ids"]
        targets = [len(theirs["prompt_input_ids"]) + i for i, m in enumerate(theirs["completion_loss_mask"]) if m]
        assert mine["prompt_ids"] + mine["completion_ids"] == sequence[:len(mine["prompt_ids"]) + len(mine["completion_ids"])]
        assert [len(mine["prompt_ids"]) + i for i, m in enumerate(mine["completion_target_mask"]) if m] == targets
    assert verify_cli(out, "--from", built.parquet).exit_code == 0
    assert (tmp_path / "kto" / "rows.kto.py").exists() and (tmp_path / "kto" / "rows.kto.yaml").exists()


def test_load_gives_a_preference_file_in_its_export_layout(built, dpo_export):
    import databuild

    assert databuild.load(built.parquet).to_list() == pq.read_table(dpo_export[0]).to_pylist()


def test_native_pins_are_checked_on_the_preference_source(built, dpo_export, tmp_path):
    """--rows-sha256, --parquet-sha256 and a recipe with --from are checked on the preference file, by its own
    verifier; --segments-sha256, a figure it has not, is refused (exit 2), never ignored."""
    out, rows_sha256 = dpo_export[0], built.data["output"]["rows_sha256"]
    assert verify_cli(out, "--from", built.parquet, "--rows-sha256", rows_sha256).exit_code == 0
    wrong = verify_cli(out, "--from", built.parquet, "--parquet-sha256", "0" * 64)
    assert wrong.exit_code == 1 and f"output.parquet_sha256: expected '{'0' * 64}'" in wrong.output
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"workload:\n  dataset:\n    rows_sha256: {'a' * 64}\n")
    pinned = verify_cli(out, "--from", built.parquet, "--recipe", recipe)
    assert pinned.exit_code == 1 and f"output.rows_sha256: expected '{'a' * 64}'" in pinned.output
    segments = verify_cli(out, "--from", built.parquet, "--segments-sha256", "0" * 64)
    assert segments.exit_code == 2 and "--segments-sha256 does not apply to a preference row file" in segments.output


@st.composite
def native_pairs(draw):
    """A pair's native ids and masks: a shared untrained head or not, targets anywhere, a tail or not."""
    def completion(head):
        body = draw(st.lists(st.tuples(st.integers(0, 99), st.integers(0, 1)), min_size=1, max_size=8))
        body[draw(st.integers(0, len(body) - 1))] = (body[0][0], 1)  # one target at least
        tail = draw(st.lists(st.integers(0, 99), max_size=3))
        ids = head + [i for i, _ in body] + tail
        return ids, [0] * len(head) + [m for _, m in body] + [0] * len(tail)
    head = draw(st.lists(st.integers(0, 99), max_size=3))
    other = head if draw(st.booleans()) else draw(st.lists(st.integers(0, 99), max_size=3))
    prompt = draw(st.lists(st.integers(0, 99), min_size=1, max_size=5))
    return ("p", prompt, *completion(head), *completion(other))


@settings(derandomize=True, database=None, deadline=None, print_blob=False, max_examples=200)
@given(st.lists(native_pairs(), min_size=1, max_size=4))
def test_the_cut_keeps_every_target_and_nothing_else(rows):
    """For any pairs: each scored sequence (prompt_ids + completion) is a prefix of the native prompt +
    completion, the mask's 1s sit exactly on the native targets, and what is left out is untrained."""
    out, tail = dpo_table(pairs(*rows), 0, "f.parquet")
    dropped = 0
    for mine, (_, prompt, *sides) in zip(out.to_pylist(), rows):
        for side, (ids, mask) in zip(("chosen", "rejected"), (sides[:2], sides[2:])):
            scored = mine["prompt_ids"] + mine[f"{side}_ids"]
            assert scored == (prompt + ids)[:len(scored)]
            start = len(mine["prompt_ids"]) - len(prompt)
            assert mine[f"{side}_target_mask"] == mask[start:start + len(mine[f"{side}_ids"])]
            assert not any(mask[:start]) and not any(mask[start + len(mine[f"{side}_ids"]):])
            assert mine[f"{side}_target_mask"][-1] == 1
            dropped += len(ids) - start - len(mine[f"{side}_ids"])
    assert tail == dropped


def _changed_row(rows, column):
    row = rows[2]
    return rows[:2] + [{**row, column: [1 - row[column][0]] + row[column][1:]}] + rows[3:]


@pytest.mark.parametrize("plant, message", [
    (lambda out: _rewrite(out, lambda rows: _changed_row(rows, "rejected_ids")), "first differing row 2"),
    (lambda out: _rewrite(out, lambda rows: _changed_row(rows, "chosen_target_mask")), "first differing row 2"),
    (lambda out: _rewrite(out, lambda rows: rows[:-1]), "missing rows: expected 31, found 30"),
    (lambda out: _rewrite(out, lambda rows: [{**r, "prompt_ids": r["prompt_ids"][1:]} for r in rows]),
     "first differing row 0"),
    (lambda out: out.with_name("pairs.dpo.yaml").write_text(
        out.with_name("pairs.dpo.yaml").read_text().replace("max_length: null", "max_length: 1024")),
     "pairs.dpo.yaml: differs from the configuration the export writes"),
    (lambda out: out.with_name("pairs.dpo.py").write_text(out.with_name("pairs.dpo.py").read_text() + "\n"),
     "pairs.dpo.py: differs from the configuration the export writes"),
    (lambda out: out.with_name(out.name + ".123-abc.partial").write_bytes(b""),
     "pairs.parquet.123-abc.partial: an incomplete export was left behind"),
])
def test_verify_fails_closed_on_each_planted_corruption(built, tmp_path, plant, message):
    import databuild

    out = databuild.export(built.parquet, "trl-dpo", tmp_path / "pairs.parquet").path
    again = databuild.export(built.parquet, "trl-dpo", tmp_path / "again" / "pairs.parquet").path
    assert again.read_bytes() == out.read_bytes()  # the same source, the same bytes
    assert verify_cli(out, "--from", built.parquet).exit_code == 0
    plant(out)
    result = verify_cli(out)
    assert result.exit_code == 1 and message in result.output, result.output


def _rewrite(path, change):
    from databuild.rowfile.write import WRITER_OPTIONS

    table = pq.read_table(path)
    pq.write_table(pa.Table.from_pylist(change(table.to_pylist()), schema=table.schema), path, **WRITER_OPTIONS)
