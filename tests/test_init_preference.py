"""`databuild init` on preference sources (issue 34): the shape told from the columns as TRL tells it
(explicit prompt, implicit prompt, unpaired), a preference config written (task: preference and its
lengths) that loads and reads back every row; an ambiguous file, a mix of preference and SFT sources
and a missing length each refused in one line."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, SOURCE_DIR, TOKENIZER_DIR, run
from databuild.config.load import load_config
from databuild.inputs.resolve import resolve_inputs
from databuild.sources.preference import preference_stream

PREFERENCE_DIR = FIXTURES / "tulu-preference-tiny"
LENGTHS = ["--prompt-tokens", 256, "--sequence-tokens", 512]


def init(tmp_path, *sources, extra=(), lengths=LENGTHS):
    given = [arg for source in sources for arg in ("--source", source)]
    return run("init", "pref", "--tokenizer", TOKENIZER_DIR, *given, "--rows", "all", *lengths, *extra,
               "--loss-mask", "muse_spark", "--current-date", "2026-10-01",
               "-o", tmp_path / "pref.yaml")


def jsonl_source(tmp_path, rows):
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "src"


def test_init_writes_a_preference_config_for_the_tulu_shaped_fixture(tmp_path):
    made = init(tmp_path, PREFERENCE_DIR)
    assert made.exit_code == 0, made.output
    assert "source 0 format: preference_implicit" in made.output and "task: preference" in made.output
    config = load_config(tmp_path / "pref.yaml")
    assert config.task == "preference" and config.row_tokens is None
    assert (config.prompt_tokens, config.sequence_tokens, config.overlong_prompt) == (256, 512, "drop")
    assert [(s.format, s.ignore_fields) for s in config.sources] == [("preference_implicit", ("prompt",))]
    with preference_stream(config, resolve_inputs(config)) as stream:
        found = list(stream.records())
    assert len(found) == 39 and sum(r.problem is None for r in found) == 37


USER, ANSWER, OTHER = ({"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                       {"role": "assistant", "content": "b"})


@pytest.mark.parametrize("row, format_name", [
    ({"prompt": [USER], "chosen": [ANSWER], "rejected": [OTHER]}, "preference"),
    ({"prompt": "q", "chosen": "a", "rejected": "b"}, "preference"),
    ({"prompt": "q", "chosen": [USER, ANSWER], "rejected": [USER, OTHER]}, "preference_implicit"),
    ({"chosen": [USER, ANSWER], "rejected": [USER, OTHER]}, "preference_implicit"),
    ({"prompt": [USER], "completion": [ANSWER], "label": True}, "unpaired_preference"),
])
def test_init_tells_each_shape_as_trl_does(tmp_path, row, format_name):
    made = init(tmp_path, jsonl_source(tmp_path, [{"id": "r0", **row}]))
    assert made.exit_code == 0, made.output
    config = load_config(tmp_path / "pref.yaml")
    assert config.sources[0].format == format_name
    with preference_stream(config, resolve_inputs(config)) as stream:
        (record,) = stream.records()
    assert record.problem is None and record.origin.id == "r0"


@pytest.mark.parametrize("sources, lengths, needle", [
    ("ambiguous", LENGTHS, "has both a pair's columns (chosen, rejected) and an unpaired row's (prompt, completion, "
                           "label): one file is one shape"),
    ("mixed", LENGTHS, "is a preference source and --source"),
    ("preference", ["--prompt-tokens", 256], "init cannot decide sequence-tokens: pass --sequence-tokens N"),
    ("preference", ["--row-tokens", 256], "init cannot decide prompt-tokens"),
    ("preference", [*LENGTHS, "--row-tokens", 256], "--row-tokens is for a build of conversations"),
    ("sft", [*LENGTHS, "--row-tokens", 256], "--prompt-tokens is for a build of pairs"),
])
def test_init_refuses_what_it_cannot_write(tmp_path, sources, lengths, needle):
    given = {"ambiguous": [jsonl_source(tmp_path, [{"id": "r", "prompt": [USER], "chosen": [ANSWER],
                                                     "rejected": [OTHER], "completion": [ANSWER], "label": True}])],
             "mixed": [PREFERENCE_DIR, SOURCE_DIR], "preference": [PREFERENCE_DIR], "sft": [SOURCE_DIR]}[sources]
    made = init(tmp_path, *given, lengths=lengths)
    assert made.exit_code == 1 and needle in made.output, made.output
    assert "Traceback" not in made.output and not (tmp_path / "pref.yaml").exists()


def test_init_reads_the_ultrafeedback_binarized_columns_as_an_implicit_prompt(tmp_path):
    """HuggingFaceH4/ultrafeedback_binarized's columns (its card's dataset_info): prompt (a string), prompt_id,
    chosen and rejected (whole conversations), messages (the chosen one again), score_chosen, score_rejected.
    A pair, implicit: the columns it does not read written to ignore_fields, never taken as an SFT source
    (its `messages` column alone would fit the messages format)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"prompt": "q", "prompt_id": "p0", "chosen": [USER, ANSWER], "rejected": [USER, OTHER],
           "messages": [USER, ANSWER], "score_chosen": 8.0, "score_rejected": 5.5}
    (tmp_path / "uf" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row, {**row, "prompt_id": "p1"}]),
                   tmp_path / "uf" / "data" / "train_prefs-00000-of-00001.parquet")
    made = run("init", "uf", "--tokenizer", TOKENIZER_DIR, "--source", tmp_path / "uf", "--split", "train_prefs",
               "--rows", "all", *LENGTHS, "--loss-mask", "muse_spark", "--current-date", "2026-10-01",
               "-o", tmp_path / "uf.yaml")
    assert made.exit_code == 0, made.output
    (source,) = load_config(tmp_path / "uf.yaml").sources
    assert source.format == "preference_implicit"
    assert set(source.ignore_fields) == {"prompt", "prompt_id", "messages", "score_chosen", "score_rejected"}
