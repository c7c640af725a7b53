"""make of a preference config (configs/muse-spark-tiny-preference-v1.yaml, over the generated Tulu-shaped
preference fixture): golden hashes from an inspected build; the same bytes at every worker count, batch size,
spill window, hash seed, time zone and locale, and through the hub cache; each prompt the template's render
with its generation prompt as transformers writes it; every pair left out counted by kind; up to date means
done."""

import json

import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, REPO, TOKENIZER_DIR, write_config
from databuild.config import load_config, resolve_config
from databuild.errors import BuildError
from databuild.preference.build import make_preference
from test_build import make_elsewhere, run_cli

NAME = "muse-spark-tiny-preference-v1"
GOLDEN = json.loads((REPO / "tests" / "golden" / f"{NAME}.json").read_text())
PREFERENCE_DIR = FIXTURES / "tulu-preference-tiny"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return make_preference(resolve_config(NAME), tmp_path_factory.mktemp("pref"))


def test_golden(built):
    output, counts = built.data["output"], built.data["counts"]
    for key in ("rows_sha256", "parquet_sha256", "parquet_bytes", "rows", "prompt_tokens", "chosen_tokens",
                "rejected_tokens", "chosen_supervised_tokens", "rejected_supervised_tokens"):
        assert output[key] == GOLDEN[key], key
    for key in ("pairs_read", "prompts_cut", "prompt_tokens_cut"):
        assert counts[key] == GOLDEN[key], key
    left_out = {k: v for d in (counts["pairs_refused"], counts["pairs_dropped"]) for k, v in d.items() if v}
    assert left_out == GOLDEN["left_out"]
    assert counts["pairs_read"] == counts["pairs_kept"] + sum(left_out.values())
    assert pq.read_table(built.parquet, columns=["id"]).column("id").to_pylist()[:3] == GOLDEN["first_ids"]


def test_each_prompt_is_transformers_render_with_its_generation_prompt(built):
    """Independently of databuild: each row's prompt is apply_chat_template(prompt, add_generation_prompt=True)
    of its source row, its last prompt_tokens where it was cut, and each completion the rest of the whole
    render's tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    kwargs = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
    source = {r["id"]: r for path in sorted((PREFERENCE_DIR / "data").glob("*.parquet"))
              for r in pq.read_table(path).to_pylist()}
    plain = lambda messages: [{"role": m["role"], "content": m["content"]} for m in messages]
    cut = 0
    for row in pq.read_table(built.parquet).to_pylist():
        chosen, rejected = plain(source[row["id"]]["chosen"]), plain(source[row["id"]]["rejected"])
        shared = next(k for k in range(len(chosen)) if chosen[k] != rejected[k])
        prompt = tokenizer.apply_chat_template(chosen[:shared], add_generation_prompt=True, tokenize=True,
                                               return_dict=True, **kwargs)["input_ids"]
        assert prompt[len(prompt) - len(row["prompt_input_ids"]):] == row["prompt_input_ids"], row["id"]
        cut += len(prompt) > len(row["prompt_input_ids"])
        assert len(row["prompt_input_ids"]) <= 128
        for whole, name in ((chosen, "chosen"), (rejected, "rejected")):
            ids = tokenizer.apply_chat_template(whole, tokenize=True, return_dict=True, **kwargs)["input_ids"]
            assert ids[:len(prompt)] == prompt and ids[len(prompt):] == row[f"{name}_input_ids"], (row["id"], name)
            assert len(row["prompt_input_ids"]) + len(ids) - len(prompt) <= 168
    assert cut == GOLDEN["prompts_cut"]


@pytest.mark.parametrize("workers, batch_size, window", [(1, 1, 7), (2, 7, 300), (3, 33, 5)])
def test_same_bytes_at_any_workers_batch_and_window(built, tmp_path, sixteen_cores, workers, batch_size, window):
    result = make_preference(resolve_config(NAME), tmp_path, workers=workers, batch_size=batch_size, window=window)
    assert result.encoding == f"{workers} process{'es' if workers > 1 else ''}"  # the processes really ran
    assert result.parquet.read_bytes() == built.parquet.read_bytes()
    assert result.manifest.read_bytes() == built.manifest.read_bytes()


def test_same_bytes_in_another_process_zone_locale_and_hash_seed(built, tmp_path):
    output = make_elsewhere(NAME, built, tmp_path)
    assert f"rows_sha256            {GOLDEN['rows_sha256']}" in output
    assert "left out               1 template_error, 1 no_shared_prompt, 1 identical_completions, 5 " \
           "sequence_too_long" in output
    again = run_cli("make", NAME, "--out", str(tmp_path), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("up to date")
    assert run_cli("verify", str(tmp_path / f"{NAME}.parquet")).returncode == 0


def test_the_hub_cache_builds_the_same_rows(built, tmp_path):
    """The fixture and tokenizer laid out as huggingface_hub's cache, the config naming repos and commits
    only, built offline: the same file (the manifest differs only in where the inputs came from)."""
    from test_hub import lay_out_repo

    config = resolve_config(NAME)
    cache = tmp_path / "hub"
    lay_out_repo(cache, "dataset", config.sources[0].repo, config.sources[0].revision,
                 {f"data/{p.name}": p for p in sorted((PREFERENCE_DIR / "data").glob("*.parquet"))})
    lay_out_repo(cache, "model", config.tokenizer.repo, config.tokenizer.revision,
                 {p.name: p for p in TOKENIZER_DIR.iterdir()})
    raw = (REPO / "configs" / f"{NAME}.yaml").read_text()
    hub_config = tmp_path / f"{NAME}.yaml"
    hub_config.write_text("\n".join(line for line in raw.splitlines() if not line.strip().startswith("dir:")) + "\n")
    env = {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1"}
    result = run_cli("make", str(hub_config), "--out", str(tmp_path / "out"), "--offline", env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / f"{NAME}.parquet").read_bytes() == built.parquet.read_bytes()
    manifest = json.loads((tmp_path / "out" / f"{NAME}.manifest.json").read_text())
    assert manifest["inputs"]["sources"][0]["origin"] == "hub" and manifest["output"] == built.data["output"]


def preference_config(tmp_path, **changes):
    raw = {"name": "pref-test", "task": "preference", "row_tokens": None, "prompt_tokens": 128, "sequence_tokens": 168,
           "source": {"dir": str(PREFERENCE_DIR), "repo": "databuild-fixtures/tulu-preference-tiny",
                      "revision": "3" * 40, "format": "preference_implicit", "ignore_fields": ["prompt"]},
           "on_bad_conversation": "skip", "rows": "all", **changes}
    return load_config(write_config(tmp_path / "p.yaml", **raw))


def test_a_long_prompt_dropped_is_counted(tmp_path, built):
    result = make_preference(preference_config(tmp_path, overlong_prompt="drop"), tmp_path)
    counts = result.data["counts"]
    # the fixture's 7 prompts over 128 tokens: under cut_left 4 were kept cut and 3 then went over sequence_tokens
    assert counts["pairs_dropped"]["prompt_too_long"] == 7 and counts["prompts_cut"] == 0
    assert counts["pairs_dropped"]["sequence_too_long"] == GOLDEN["left_out"]["sequence_too_long"] - 3
    assert result.data["output"]["longest_prompt"] <= 128
    kinds = {bad["kind"] for bad in result.data["skipped_pairs"]}
    assert {"prompt_too_long", "template_error", "identical_completions", "no_shared_prompt"} <= kinds


def test_rows_takes_the_first_pairs_and_running_out_is_one_line(tmp_path, built):
    first = make_preference(preference_config(tmp_path, rows=5, overlong_prompt="cut_left"), tmp_path / "five")
    ids = pq.read_table(first.parquet, columns=["id"]).column("id").to_pylist()
    assert ids == pq.read_table(built.parquet, columns=["id"]).column("id").to_pylist()[:5]
    with pytest.raises(BuildError, match=r"rows: 40 pairs asked: the sources gave 31 of 39 read \(left out: 5 "
                                         r"sequence_too_long"):
        make_preference(preference_config(tmp_path, rows=40, overlong_prompt="cut_left"), tmp_path / "forty")
    assert not [p for p in (tmp_path / "forty").iterdir() if not p.name.endswith(".lock")]  # nothing published


def test_on_bad_conversation_error_stops_at_the_first_refused_pair(tmp_path):
    with pytest.raises(BuildError, match=r"conversation cannot be built \(no_shared_prompt\): .*row 16 \(id "
                                         r"'pref-0038'\)"):
        make_preference(preference_config(tmp_path, on_bad_conversation="error"), tmp_path / "out")


def test_an_unpaired_build_keeps_each_completion_and_its_label(tmp_path):
    """KTO's shape (prompt, completion, label) in JSON Lines: one row per completion with its label, the
    unpaired schema, verified; the row's prompt and completion are transformers' renders, as for pairs."""
    from transformers import AutoTokenizer

    rows = [{"id": f"u-{k}", "prompt": [{"role": "user", "content": f"question {k}?"}],
             "completion": [{"role": "assistant", "content": f"answer {k}" + " more" * (4 * k)}], "label": k % 3 != 0}
            for k in range(12)]
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = preference_config(tmp_path, source={"dir": str(tmp_path / "src"), "repo": "local/kto", "revision": "4" * 40,
                                                 "format": "unpaired_preference", "ignore_fields": None},
                               prompt_tokens=80, sequence_tokens=100, name="kto-test")
    result = make_preference(config, tmp_path / "out")
    table = pq.read_table(result.parquet)
    assert table.column_names == ["id", "prompt_input_ids", "completion_input_ids", "completion_loss_mask", "label"]
    assert result.data["output"]["kind"] == "unpaired" and result.data["counts"]["pairs_dropped"][
        "sequence_too_long"] == 12 - table.num_rows > 0  # the longest answers are over 100 tokens
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    kwargs = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
    for row in table.to_pylist():
        source = rows[int(row["id"].split("-")[1])]
        assert row["label"] is source["label"]
        whole = tokenizer.apply_chat_template(source["prompt"] + source["completion"], tokenize=True,
                                              return_dict=True, **kwargs)["input_ids"]
        assert whole == row["prompt_input_ids"] + row["completion_input_ids"]
    assert result.data["output"]["labels_true"] == sum(table.column("label").to_pylist())
    assert run_cli("verify", str(result.parquet)).returncode == 0
