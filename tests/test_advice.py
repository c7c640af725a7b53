"""Every refusal names a fix that works for its cause: each test takes the advice a message gives, as a user
would (the config key, the command, the file), and the build then succeeds or moves on to another error."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from ruamel.yaml import YAML

from conftest import SOURCE_DIR, TEMPLATES, TINY, TINY_CONFIG, TOKENIZER_DIR, write_config
from databuild.cli import main


def cli(*args) -> tuple[int, str]:
    """Exit code and the one error line (or the output) of a databuild command."""
    result = CliRunner().invoke(main, [*map(str, args)])
    assert "Traceback" not in result.output, result.output
    if result.exit_code:
        assert result.stderr.count("\n") == 1, result.stderr  # one line
        return result.exit_code, result.stderr.strip()
    return result.exit_code, result.output.strip()


def edit(config: Path, **changes) -> None:
    yaml = YAML(typ="safe", pure=True)
    raw = yaml.load(config.read_text())
    raw.update(changes)
    with open(config, "w") as handle:
        yaml.dump(raw, handle)


def manifest(out: Path) -> dict:
    return json.loads((out / f"{TINY}.manifest.json").read_text())


def untagged_chatml(tmp_path: Path) -> Path:
    """A config whose template closes assistant turns on <|im_end|> (ChatML without generation tags), a
    special token of the tokenizer but not its EOS (<|endoftext|>), under loss_mask: assistant."""
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(TOKENIZER_DIR, tokenizer)
    template = (TEMPLATES / "chatml.jinja").read_text()
    (tokenizer / "chat_template.jinja").write_text(template.replace("{%- generation -%}", "").replace(
        "{%- endgeneration -%}", ""))
    pins = dict(YAML(typ="safe", pure=True).load(TINY_CONFIG.read_text())["tokenizer"]["sha256"])
    return write_config(tmp_path / f"{TINY}.yaml", loss_mask="assistant", template_kwargs=None,
                        tokenizer={"dir": str(tokenizer), "sha256": {"tokenizer.json": pins["tokenizer.json"]}})


def test_an_undeclared_end_of_turn_advises_end_of_turn_and_following_it_builds(tmp_path):
    """Skipping would skip every conversation: the message names end_of_turn, and following it builds."""
    config = untagged_chatml(tmp_path)
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "is not a stop token" in output, output
    assert "on_bad_conversation" not in output, output
    token = re.search(r"set end_of_turn: \['(.+?)'\] in the config", output)
    assert token and token.group(1) == "<|im_end|>", output
    edit(config, end_of_turn=[token.group(1)])
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 0, output


def test_skipping_does_not_hide_a_template_wide_refusal_and_the_fix_builds(tmp_path):
    """The advice above not taken, on_bad_conversation: skip set instead: every conversation is skipped,
    so no row is kept and the build stops saying they were all refused the same way, with the same fix,
    which then builds."""
    config = untagged_chatml(tmp_path)
    edit(config, on_bad_conversation="skip")
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "conversations refused were refused the same way (mask_error" in output, output
    assert not (tmp_path / "out" / f"{TINY}.parquet").exists()
    edit(config, end_of_turn=[re.search(r"end_of_turn: \['(.+?)'\]", output).group(1)])
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 0, output


def test_a_malformed_conversation_advises_skip_and_skipping_builds(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(SOURCE_DIR, source)
    shard = sorted((source / "data").glob("*.parquet"))[0]
    rows = pq.read_table(shard).to_pylist()
    rows[3]["id"] = ""
    pq.write_table(pq.read_table(shard).from_pylist(rows, schema=pq.read_schema(shard)), shard)
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": str(source), "sha256": None})
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "malformed conversation:" in output and "row 3" in output, output
    assert "set on_bad_conversation: skip in the config" in output
    edit(config, on_bad_conversation="skip")
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 0, output
    assert manifest(tmp_path / "out")["counts"]["conversations_skipped"]["malformed"] == 1


def test_an_overlong_conversation_advises_overlong_and_following_it_builds(tmp_path):
    config = write_config(tmp_path / f"{TINY}.yaml", packing="bfd", overlong="error", rows=10)
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and output.startswith("error: conversation longer than a row:"), output
    assert "set overlong: drop or truncate in the config" in output
    for overlong in ("drop", "truncate"):
        edit(config, overlong=overlong)
        code, output = cli("make", config, "--out", tmp_path / overlong)
        assert code == 0, output


def test_ran_out_advises_fewer_rows_and_asking_for_them_builds(tmp_path):
    config = write_config(tmp_path / f"{TINY}.yaml", rows=100000)
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "ask for fewer rows (rows in the config;" in output, output
    assert "rows: all keeps every row the sources give" in output, output
    assert "of its 300 conversations, 300 packed;" in output, output
    kept = int(re.search(r"ran out: (\d+) rows kept", output).group(1))
    edit(config, rows=kept)
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 0, output


def test_ran_out_counts_overlong_drops_and_advises_what_keeps_them(tmp_path):
    """Rows of 96 tokens under bfd: most conversations are longer and dropped; the message counts them
    apart from those packed, and its advice (overlong: truncate) builds."""
    config = write_config(tmp_path / f"{TINY}.yaml", packing="bfd", row_tokens=96, rows=200)
    code, output = cli("make", config, "--out", tmp_path / "out")
    found = re.search(r"of its 300 conversations, (\d+) packed, (\d+) dropped as longer than a row \(overlong: drop\)",
                      output)
    assert code == 1 and found, output
    packed, dropped = map(int, found.groups())
    assert packed + dropped == 300 and dropped > packed
    assert "most were longer than a row: raise row_tokens, or set overlong: truncate" in output
    edit(config, overlong="truncate")
    code, after = cli("make", config, "--out", tmp_path / "out")
    assert code == 0, after


def test_a_local_tokenizer_folder_missing_a_pinned_file_advises_copying_it(tmp_path):
    """Not `databuild fetch`, which reads the hub and leaves a local folder as it is."""
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(TOKENIZER_DIR, tokenizer)
    (tokenizer / "chat_template.jinja").unlink()
    config = write_config(tmp_path / f"{TINY}.yaml", tokenizer={"dir": str(tokenizer)})
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "missing file chat_template.jinja" in output, output
    assert "fetch" not in output
    assert f"copy it into {tokenizer} from databuild-fixtures/muse-tiny-tokenizer at 2222222222" in output
    shutil.copyfile(TOKENIZER_DIR / "chat_template.jinja", tokenizer / "chat_template.jinja")
    assert cli("make", config, "--out", tmp_path / "out")[0] == 0


def test_a_stray_file_beside_the_shards_advises_removing_it(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(SOURCE_DIR, source)
    stray = source / "data" / "train-copy.parquet"
    shutil.copyfile(sorted((source / "data").glob("*.parquet"))[0], stray)
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": str(source)})
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "data/train-copy.parquet is not a shard of the split" in output and "remove it" in output
    stray.unlink()
    assert cli("make", config, "--out", tmp_path / "out")[0] == 0


def test_verify_without_a_manifest_advises_what_to_expect_and_giving_it_verifies(tiny_build, tmp_path):
    parquet = tmp_path / tiny_build.parquet.name
    shutil.copyfile(tiny_build.parquet, parquet)
    code, output = cli("verify", parquet)
    assert code == 1 and "pass --manifest, --recipe or --rows-sha256 to say what to expect" in output
    for option, value in (("--manifest", tiny_build.manifest), ("--rows-sha256", tiny_build.data["output"]["rows_sha256"])):
        assert cli("verify", parquet, option, value)[0] == 0


def test_a_hash_on_an_export_advises_from_and_giving_it_verifies(tiny_build, tmp_path):
    out = tmp_path / "hf.parquet"
    assert cli("export", tiny_build.parquet, "--to", "hf", "-o", out)[0] == 0
    code, output = cli("verify", out, "--rows-sha256", tiny_build.data["output"]["rows_sha256"])
    assert code == 2 and "add --from NATIVE.parquet" in output
    code, output = cli("verify", out, "--rows-sha256", tiny_build.data["output"]["rows_sha256"], "--from",
                       tiny_build.parquet)
    assert code == 0, output


@pytest.mark.parametrize("dataset_dir", [True])
def test_dataset_dir_on_a_mixture_advises_each_source_s_dir(tmp_path, dataset_dir):
    yaml = YAML(typ="safe", pure=True)
    config = write_config(tmp_path / f"{TINY}.yaml")
    raw = yaml.load(config.read_text())
    source = raw.pop("source")
    raw["sources"] = [{**source, "take": 100}, {**source, "take": 50}]
    with open(config, "w") as handle:
        yaml.dump(raw, handle)
    code, output = cli("make", config, "--dataset-dir", SOURCE_DIR, "--out", tmp_path / "out")
    assert code == 1 and "set each one's 'dir' in the config instead" in output, output
    code, output = cli("make", config, "--out", tmp_path / "out")  # each source has its dir: the advice followed
    assert code == 0 or "ran out" in output, output


def test_a_local_dir_that_does_not_exist_advises_correcting_it(tmp_path):
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": str(tmp_path / "nowhere")})
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "does not exist: correct the config's 'dir'" in output, output
    edit(config, source={**YAML(typ="safe", pure=True).load(config.read_text())["source"], "dir": str(SOURCE_DIR)})
    assert cli("make", config, "--out", tmp_path / "out")[0] == 0


def test_a_recipe_without_a_dataset_block_advises_adding_one_and_make_then_fills_it(tiny_build, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  steps: 10\n")
    code, output = cli("make", TINY, "--out", tiny_build.parquet.parent, "--recipe", recipe)
    assert code == 1 and "no workload.dataset block; add one ('workload:' then '  dataset: {}')" in output, output
    recipe.write_text("workload:\n  steps: 10\n  dataset: {}\n")
    assert cli("make", TINY, "--out", tiny_build.parquet.parent, "--recipe", recipe)[0] == 0
    assert cli("verify", tiny_build.parquet, "--recipe", recipe)[0] == 0


def test_a_recipe_that_pins_nothing_advises_make_recipe_and_verify_then_checks_it(tiny_build, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  dataset:\n    name: tiny\n")
    code, output = cli("verify", tiny_build.parquet, "--recipe", recipe)
    assert code == 1 and f"'databuild make NAME --recipe {recipe}' writes them" in output, output
    assert cli("make", TINY, "--out", tiny_build.parquet.parent, "--recipe", recipe)[0] == 0
    code, output = cli("verify", tiny_build.parquet, "--recipe", recipe)
    assert code == 0 and "parquet_sha256" in output and "rows_sha256" in output, output


def test_a_template_that_reads_the_clock_advises_pinning_current_date(tmp_path):
    config = write_config(tmp_path / f"{TINY}.yaml", template_kwargs={"current_date": None})
    code, output = cli("make", config, "--out", tmp_path / "out")
    assert code == 1 and "pins no template_kwargs.current_date" in output, output
    edit(config, template_kwargs={"current_date": "2026-10-01", "reasoning_effort": "xhigh"})
    assert cli("make", config, "--out", tmp_path / "out")[0] == 0
