"""make --recipe on a preference config writes its workload.dataset block (only that block's values,
comments kept), a second make leaves it as it is, a differing pinned value is refused unless --repin, and
verify --recipe checks a preference file against the block."""

from click.testing import CliRunner

from conftest import verify_cli
from databuild.cli import main

NAME = "muse-spark-tiny-preference-v1"
RECIPE = """\
# A DPO stage after SFT (the recipe's own words stay as they are)
workload:
  model: muse-spark-open  # the SFT checkpoint
  dataset:
    description: fixture preference pairs
  trainer: dpo
"""


def make_into(recipe, out, *flags):
    return CliRunner().invoke(main, ["make", NAME, "--out", str(out), "--recipe", str(recipe), *flags])


def test_the_block_is_written_then_checked(tmp_path):
    from ruamel.yaml import YAML

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    result = make_into(recipe, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "(updated)" in result.output
    text = recipe.read_text()
    assert text.startswith(RECIPE.split("  trainer")[0].rstrip("\n").split("    description")[0])
    assert "# the SFT checkpoint" in text and "  trainer: dpo\n" in text
    block = YAML(typ="safe").load(text)["workload"]["dataset"]
    manifest = __import__("json").loads((tmp_path / "out" / f"{NAME}.manifest.json").read_text())
    assert block["rows_sha256"] == manifest["output"]["rows_sha256"]
    assert block["build"] | {"tokenizer": None} == {
        "name": NAME, "task": "preference", "kind": "paired", "tokenizer": None, "loss_mask": "muse_spark",
        "rows": manifest["output"]["rows"], "prompt_tokens": 128, "sequence_tokens": 168,
        "overlong_prompt": "cut_left", "seed": 42,
        "chosen_supervised_tokens": manifest["output"]["chosen_supervised_tokens"],
        "rejected_supervised_tokens": manifest["output"]["rejected_supervised_tokens"],
        "parquet_sha256": manifest["output"]["parquet_sha256"], "parquet_bytes": manifest["output"]["parquet_bytes"],
        "template_kwargs": "current_date 2026-10-01, reasoning_effort xhigh"}
    assert block["build"]["tokenizer"].startswith("muse-tiny-tokenizer (revision 2222")
    again = make_into(recipe, tmp_path / "out")
    assert again.exit_code == 0 and "(already up to date)" in again.output and recipe.read_text() == text
    parquet = tmp_path / "out" / f"{NAME}.parquet"
    assert verify_cli(parquet, "--recipe", recipe).exit_code == 0
    recipe.write_text(text.replace(block["rows_sha256"], "f" * 64))
    result = verify_cli(parquet, "--recipe", recipe)
    assert result.exit_code == 1 and f"output.rows_sha256: expected '{'f' * 64}'" in result.output
    refused = make_into(recipe, tmp_path / "out")
    assert refused.exit_code == 1 and "workload.dataset.rows_sha256 is 'fff" in refused.output
    assert make_into(recipe, tmp_path / "out", "--repin").exit_code == 0 and recipe.read_text() == text
