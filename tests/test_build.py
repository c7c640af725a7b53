"""databuild make end to end on the fixtures: golden hashes, an independent rebuild of the rows,
determinism across processes and settings, and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, SOURCE_DIR, TINY, TINY_LOCK, TOKENIZER_DIR, databuild_here, write_config
from source_folders import OK_ROWS, write_chat_source
from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError
from databuild.verification import gather, verify

GOLDEN = json.loads((REPO / "tests" / "golden" / f"{TINY}.json").read_text())
KWARGS = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
HEADER_END, CLOSINGS = "<|message|>", ("<|end|>", "<|return|>")


def run_cli(*args, env=None, cwd=REPO):
    """`databuild ARGS` from `cwd`: in this process (conftest.databuild_here), or, given environment
    variables to read, in a process of its own started with them."""
    if env is None:
        return databuild_here(*args, cwd=cwd)
    return subprocess.run([sys.executable, "-m", "databuild", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **env})


def test_golden_hashes(tiny_build):
    output = tiny_build.data["output"]
    for key in ("rows_sha256", "segments_sha256", "parquet_sha256", "parquet_bytes", "rows", "row_tokens",
                "supervised_tokens"):
        assert output[key] == GOLDEN[key], key
    assert tiny_build.data["counts"]["rows_skipped"]["no_supervised_token"] == GOLDEN[
        "rows_skipped_no_supervised_token"]
    first = pq.read_table(tiny_build.parquet).slice(0, 1).to_pylist()[0]
    assert first["conversation_ids"] == GOLDEN["first_row_conversation_ids"]
    assert first["seq_start_id"] == GOLDEN["first_row_seq_start_id"]


def test_the_production_verifier_accepts_it(tiny_build):
    report = verify(tiny_build.parquet, gather(tiny_build.parquet))
    assert report.failures == [] and report.exit_code == 0


def independent_conversations(tokenizer, source_conversations, muse_spark=True, dropped=frozenset()):
    """(id, ids, mask) of each conversation in stream order, without databuild: numpy's permutation,
    transformers' own chat template tokenization and assistant mask (for muse_spark, minus the
    closing token of empty answers); the conversations at the indices `dropped` left out where met."""
    order = [i for i in np.random.default_rng(42).permutation(len(source_conversations)) if i not in dropped]
    header_end = tokenizer.convert_tokens_to_ids(HEADER_END)
    closings = set(tokenizer.convert_tokens_to_ids(list(CLOSINGS)))
    for index in order:
        cid, messages = source_conversations[index]
        out = tokenizer.apply_chat_template(list(messages), tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True, **KWARGS)
        conv_ids, conv_mask = out["input_ids"], list(out["assistant_masks"])
        for i in range(1, len(conv_ids) if muse_spark else 0):  # an empty answer: header, then the closing
            if conv_ids[i - 1] == header_end and conv_ids[i] in closings:
                conv_mask[i] = 0
        yield cid, conv_ids, conv_mask


def independent_rows(tokenizer, source_conversations, row_tokens, rows_wanted, muse_spark=True, dropped=frozenset()):
    """The rows rebuilt without databuild: the conversations of independent_conversations, EOS
    between unless the render ends with it."""
    ids, mask, starts, owners = [], [], [], []
    kept, skipped, continued = [], 0, []
    for k, (cid, conv_ids, conv_mask) in enumerate(
            independent_conversations(tokenizer, source_conversations, muse_spark, dropped)):
        if k and ids[-1] != tokenizer.eos_token_id:
            ids.append(tokenizer.eos_token_id)
            mask.append(0)
        starts.append(len(ids))
        owners.append(cid)
        ids += conv_ids
        mask += conv_mask
        while len(ids) >= (len(kept) + skipped + 1) * row_tokens and len(kept) < rows_wanted:
            low = (len(kept) + skipped) * row_tokens
            row_mask = mask[low:low + row_tokens]
            if not any(row_mask):
                skipped += 1
                continue
            inside = [j for j, s in enumerate(starts) if low < s < low + row_tokens]
            first = max(j for j, s in enumerate(starts) if s <= low)
            if starts[first] < low:  # its conversation began in an earlier row, kept or skipped
                continued.append(len(kept))
            kept.append({"input_ids": ids[low:low + row_tokens], "loss_mask": row_mask,
                         "seq_start_id": [0] + [starts[j] - low for j in inside],
                         "conversation_ids": [owners[first]] + [owners[j] for j in inside]})
        if len(kept) == rows_wanted:
            return kept, skipped, continued
    raise AssertionError("fixtures ran out")


def test_rows_match_an_independent_rebuild(tiny_build, tokenizer, source_conversations):
    table = pq.read_table(tiny_build.parquet)
    expected, skipped, continued = independent_rows(tokenizer, source_conversations, 512, table.num_rows)
    assert table.to_pylist() == expected
    assert tiny_build.data["counts"]["rows_skipped"]["no_supervised_token"] == skipped
    assert tiny_build.data["continued_rows"] == continued


CHATML_BOS_DIR = REPO / "tests" / "fixtures" / "chatml-bos-tokenizer"


@pytest.fixture(scope="module")
def chatml_bos_build(tmp_path_factory):
    """The fixtures built with the ChatML tokenizer whose encode adds a BOS, whose tokenizer.json
    truncates to 64 tokens and pads, and whose template ends with EOS, under `loss_mask: assistant`."""
    tmp = tmp_path_factory.mktemp("chatml")
    pins = {n: hashlib.sha256((CHATML_BOS_DIR / n).read_bytes()).hexdigest()
            for n in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")}
    config = load_config(write_config(tmp / "c.yaml", name="chatml-bos", loss_mask="assistant", rows=30,
                                      tokenizer={"dir": str(CHATML_BOS_DIR), "sha256": pins}))
    return config, make(config, tmp / "out", progress=False)


def test_bos_adding_truncating_padding_tokenizer_matches_an_independent_rebuild(chatml_bos_build,
                                                                                 source_conversations):
    from transformers import AutoTokenizer

    _, result = chatml_bos_build
    reference = AutoTokenizer.from_pretrained(str(CHATML_BOS_DIR))
    table = pq.read_table(result.parquet)
    expected, skipped, continued = independent_rows(reference, source_conversations, 512, table.num_rows,
                                                    muse_spark=False)
    assert table.to_pylist() == expected
    assert (result.data["counts"]["rows_skipped"]["no_supervised_token"], result.data["continued_rows"]) == \
        (skipped, continued)
    ids = np.array(table.column("input_ids").to_pylist())
    bos = reference.convert_tokens_to_ids("<|begin_of_text|>")
    assert not ((ids[:, 1:] == bos) & (ids[:, :-1] == bos)).any()  # never a doubled BOS
    assert result.data["counts"]["separators_inserted"] == 0  # every render ends with EOS itself
    assert result.data["counts"]["empty_assistant_turns"] > 0
    switched_off = result.data["inputs"]["tokenizer"]["switched_off"]
    assert switched_off["truncation"]["max_length"] == 64
    assert switched_off["padding"]["length"] is None and switched_off["padding"]["pad_token"] == "<|endoftext|>"
    assert result.data["build"]["chat_template"] == {
        "name": None, "sha256": {"default": hashlib.sha256((CHATML_BOS_DIR / "chat_template.jinja").read_bytes())
                                 .hexdigest()}}


@pytest.mark.parametrize("batch_size, workers", [(1, 1), (2, 1), (7, 2), (256, 1)])
def test_chatml_bos_rows_do_not_depend_on_the_batch_size(chatml_bos_build, tmp_path, sixteen_cores, batch_size, workers):
    config, result = chatml_bos_build
    again = make(config, tmp_path, batch_size=batch_size, workers=workers, progress=False)
    assert again.parquet.read_bytes() == result.parquet.read_bytes()
    assert again.manifest.read_bytes() == result.manifest.read_bytes()


def test_packing_invariants_and_counts(tiny_build, tokenizer):
    table = pq.read_table(tiny_build.parquet)
    manifest = tiny_build.data
    ids = np.array(table.column("input_ids").to_pylist(), dtype=np.int64)
    mask = np.array(table.column("loss_mask").to_pylist(), dtype=np.int64)
    assert ids.shape == (40, 512) and table.schema.field("input_ids").type == pa.list_(pa.int32())
    assert mask.any(axis=1).all()  # no kept row without a target
    eos = tokenizer.eos_token_id
    assert not mask[ids == eos].any()  # the inserted separator is never a target
    for row_ids, starts in zip(ids, table.column("seq_start_id").to_pylist()):
        assert starts[0] == 0 and starts == sorted(set(starts))
        for s in starts[1:]:
            assert row_ids[s - 1] == eos  # a conversation starts right after exactly one separator
            assert s < 2 or row_ids[s - 2] != eos
    counts = manifest["counts"]
    assert manifest["output"]["tokens"] == 40 * 512 == sum(v["tokens"] for v in counts["by_source"].values())
    assert manifest["output"]["supervised_tokens"] == int(mask.sum())
    assert manifest["output"]["supervised_token_ratio"] == mask.sum() / mask.size
    assert manifest["output"]["padding_tokens"] == 0
    distinct = {cid for row in table.column("conversation_ids").to_pylist() for cid in row}
    assert sum(v["conversations"] for v in counts["by_source"].values()) == len(distinct)
    assert counts["separators_inserted"] == counts["conversations_read"] - 1


def make_elsewhere(name: str, built, out) -> str:
    """`make NAME` into `out` in another process, under another hash seed, time zone and locale; its file and
    manifest must be `built`'s, byte for byte. Returns make's output."""
    env = {"PYTHONHASHSEED": "12345", "TZ": "Pacific/Kiritimati", "LC_ALL": "C.UTF-8", "LANG": "de_DE.UTF-8"}
    result = run_cli("make", name, "--out", str(out), env=env, cwd=out)
    assert result.returncode == 0, result.stderr
    assert (out / f"{name}.parquet").read_bytes() == built.parquet.read_bytes()
    assert (out / f"{name}.manifest.json").read_bytes() == built.manifest.read_bytes()
    return result.stdout


def test_same_bytes_in_another_process_zone_locale_and_hash_seed(tiny_build, tmp_path):
    assert "rows_sha256            " + GOLDEN["rows_sha256"] in make_elsewhere(TINY, tiny_build, tmp_path)


@pytest.mark.parametrize("workers, batch_size, window, spill_prefix",
                         [(1, 1, 7, 0), (2, 7, 300, None), (3, 33, 64, 10), (1, 256, 5, 300)])
def test_output_does_not_depend_on_workers_batches_windows_or_spill_passes(tiny_build, tiny_config, tmp_path, sixteen_cores, workers,
                                                                           batch_size, window, spill_prefix):
    result = make(tiny_config, tmp_path, workers=workers, batch_size=batch_size, window=window,
                  spill_prefix=spill_prefix, progress=False)
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert result.manifest.read_bytes() == tiny_build.manifest.read_bytes()


def bad_source(tmp_path: Path) -> Path:
    """A one-file source whose rows 1, 3, 4 and 6 are malformed."""
    return write_chat_source(tmp_path, [
        ("ok-0", [("user", "hi"), ("assistant", "hello")]),
        ("bad-role", [("user", "hi"), ("robot", "beep")]),
        ("ok-2", [("user", "a"), ("assistant", "b")]),
        ("bad-empty", []),
        ("bad-null", [("user", None), ("assistant", "x")]),
        ("ok-5", [("user", "c"), ("assistant", "d")]),
        ("", [("user", "e"), ("assistant", "f")]),
    ] + OK_ROWS)


def strict_tokenizer(tmp_path: Path) -> dict:
    """The fixture tokenizer with a template that refuses answers mentioning "answer 1" (ok-10..ok-19),
    as the config's `tokenizer` block."""
    directory = tmp_path / "strict-tokenizer"
    shutil.copytree(TOKENIZER_DIR, directory)
    template = (TOKENIZER_DIR / "chat_template.jinja").read_text().replace(
        '{{- "<|start|>assistant<|channel|>final<|message|>" -}}',
        '{%- if "answer 1" in message.content -%}{{- raise_exception("no answer 1x, please") -}}{%- endif -%}'
        '{{- "<|start|>assistant<|channel|>final<|message|>" -}}')
    (directory / "chat_template.jinja").write_text(template)
    pins = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in ("tokenizer.json", "chat_template.jinja")}
    return {"dir": str(directory), "sha256": pins}


def test_malformed_conversation_is_one_line_naming_file_row_and_id(tmp_path):
    config = write_config(tmp_path / "bad.yaml", source={"dir": str(bad_source(tmp_path))}, rows=2)
    out = tmp_path / "out"
    result = run_cli("make", str(config), "--out", str(out))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert ("data/train-00000-of-00001.parquet: row 1 (id 'bad-role'): message 1: unknown role 'robot'"
            in result.stderr)
    assert "and 3 more" in result.stderr and "on_bad_conversation: skip" in result.stderr
    assert [p.name for p in out.iterdir()] == [TINY_LOCK]


def test_a_tokenizer_that_does_not_load_is_named_before_the_sources_malformed_rows(tmp_path, sixteen_cores):
    """make reads the source while the tokenizer loads (prepare.pin, wait=False): with both broken, the
    tokenizer's error is the one said, as when the load came first, whichever ends first."""
    broken = tmp_path / "broken-tokenizer"
    shutil.copytree(TOKENIZER_DIR, broken)
    (broken / "chat_template.jinja").write_text("{% if %}")
    pins = {name: hashlib.sha256((broken / name).read_bytes()).hexdigest()
            for name in ("tokenizer.json", "chat_template.jinja")}
    config = write_config(tmp_path / "bad.yaml", source={"dir": str(bad_source(tmp_path))}, rows=2,
                          tokenizer={"dir": str(broken), "sha256": pins})
    for workers in ("1", "2"):
        result = run_cli("make", str(config), "--out", str(tmp_path / "out"), "--workers", workers)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert "error: the chat template does not compile: TemplateSyntaxError" in result.stderr
        assert [p.name for p in (tmp_path / "out").iterdir()] == [TINY_LOCK]


def test_skip_policy_counts_and_lists_every_skip(tmp_path):
    config = load_config(write_config(tmp_path / "bad.yaml", source={"dir": str(bad_source(tmp_path))},
                                      rows=2, on_bad_conversation="skip"))
    result = make(config, tmp_path / "out", progress=False)
    counts = result.data["counts"]
    assert counts["malformed_in_source"] == 4
    # Expected: the malformed rows the stream meets before the last conversation packed, in stream order.
    order = np.random.default_rng(42).permutation(40).tolist()
    last_id = pq.read_table(result.parquet).column("conversation_ids")[-1].as_py()[-1]
    last = order.index(int(last_id.removeprefix("ok-")))
    reasons = {1: "message 1", 3: "missing or empty 'messages'", 4: "message 0", 6: "missing or empty id"}
    expected = [(row, reasons[row]) for row in order[:last] if row in reasons]
    listed = [(m["row"], m["reason"].split(":")[0]) for m in result.data["skipped_conversations"]]
    assert expected and listed == expected
    assert counts["conversations_skipped"] == {"malformed": len(expected), "template_error": 0, "mask_error": 0,
                                               "stop_token_in_field": 0, "history_rewritten": 0}
    assert counts["conversations_read"] == last + 1 - len(expected)


def test_a_conversation_the_template_refuses_is_one_line_naming_file_row_and_id(tmp_path):
    config = write_config(tmp_path / "strict.yaml", source={"dir": str(write_chat_source(tmp_path, OK_ROWS))},
                          tokenizer=strict_tokenizer(tmp_path), rows=4)
    out = tmp_path / "out"
    result = run_cli("make", str(config), "--out", str(out))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert re.search(r"^error: conversation cannot be built \(template_error\): databuild-fixtures/tulu-tiny: "
                     r"data/train-00000-of-00001.parquet: "
                     r"row (\d+) \(id 'ok-1\d'\): the chat template raised TemplateError: no answer 1x, please; "
                     r"set on_bad_conversation: skip", result.stderr)
    row = int(re.search(r"row (\d+)", result.stderr).group(1))
    assert f"id 'ok-{row + 7}'" in result.stderr  # OK_ROWS start at ok-7
    assert [p.name for p in out.iterdir()] == [TINY_LOCK]


@pytest.mark.parametrize("workers, batch_size", [(1, 1), (2, 5)])
def test_skips_are_counted_where_the_stream_meets_them(tmp_path, sixteen_cores, workers, batch_size):
    """Skipped conversations are counted in stream order, up to the last one the build packs:
    neither the tokenizer running ahead (batch size, workers) nor the kind of skip changes the count."""
    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(bad_source(tmp_path))},
                                      tokenizer=strict_tokenizer(tmp_path), rows=4, on_bad_conversation="skip"))
    ahead = make(config, tmp_path / "ahead", batch_size=256, progress=False)  # reads the whole source ahead
    result = make(config, tmp_path / "out", workers=workers, batch_size=batch_size, progress=False)
    assert result.manifest.read_bytes() == ahead.manifest.read_bytes()
    counts = result.data["counts"]
    skipped = counts["conversations_skipped"]
    assert skipped["template_error"] > 0 and skipped["mask_error"] == 0
    assert skipped["malformed"] < counts["malformed_in_source"] == 4  # some lie beyond the last row built
    listed = result.data["skipped_conversations"]
    assert [b["kind"] for b in listed].count("template_error") == skipped["template_error"]
    assert all(b["id"] in {f"ok-{i}" for i in range(10, 20)} for b in listed if b["kind"] == "template_error")


def test_files_of_other_string_and_list_flavours_give_the_same_rows(tiny_build, tmp_path):
    """The Tulu schema comes as string or large_string, list or large_list, struct fields in either
    order: one source mixing them builds the same bytes as the fixture."""
    (tmp_path / "src" / "data").mkdir(parents=True)
    first, second = sorted((SOURCE_DIR / "data").glob("*.parquet"))
    shutil.copy(first, tmp_path / "src" / "data" / first.name)
    table = pq.read_table(second)
    large = pa.large_list(pa.struct([("role", pa.large_string()), ("content", pa.large_string())]))
    table = pa.table({"source": table.column("source").cast(pa.large_string()),
                      "messages": table.column("messages").cast(large),
                      "id": table.column("id").cast(pa.large_string())})
    pq.write_table(table, tmp_path / "src" / "data" / second.name)
    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(tmp_path / "src")}))
    result = make(config, tmp_path / "out", progress=False)
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()


def test_an_unreadable_source_file_is_one_line_naming_it(tmp_path):
    shutil.copytree(SOURCE_DIR, tmp_path / "src")
    damaged = sorted((tmp_path / "src" / "data").glob("*.parquet"))[1]
    data = bytearray(damaged.read_bytes())
    data[200:2000] = bytes(b ^ 0x5A for b in data[200:2000])  # page headers and data of the first column
    damaged.write_bytes(bytes(data))
    config = write_config(tmp_path / "c.yaml", source={"dir": str(tmp_path / "src")})
    result = run_cli("make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: databuild-fixtures/tulu-tiny: data/{damaged.name}: unreadable after row 0: ")


def test_a_template_that_does_not_compile_is_named_before_the_build(tmp_path):
    tokenizer = strict_tokenizer(tmp_path)
    template = Path(tokenizer["dir"]) / "chat_template.jinja"
    template.write_text(template.read_text() + "{% if %}")
    tokenizer["sha256"]["chat_template.jinja"] = hashlib.sha256(template.read_bytes()).hexdigest()
    config = load_config(write_config(tmp_path / "c.yaml", tokenizer=tokenizer, on_bad_conversation="skip"))
    with pytest.raises(BuildError, match="^the chat template does not compile: TemplateSyntaxError: "):
        make(config, tmp_path / "out", progress=False)


def test_source_running_out_fails_and_writes_nothing(tmp_path):
    config = load_config(write_config(tmp_path / "c.yaml", rows=100000))
    with pytest.raises(BuildError, match=r"the source ran out: \d+ rows kept of the 100000"):
        make(config, tmp_path / "out", progress=False)
    assert [p.name for p in (tmp_path / "out").iterdir()] == [TINY_LOCK]


def test_schema_errors_name_the_file(tmp_path):
    (tmp_path / "src" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "messages": pa.array([[{"content": 1, "role": "user"}]]),
                             "source": ["s"]}), tmp_path / "src" / "data" / "train-00000-of-00001.parquet")
    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(tmp_path / "src")}))
    with pytest.raises(BuildError, match="data/train-00000-of-00001.parquet: schema: messages field 'content' is int64"):
        make(config, tmp_path / "out", progress=False)


def test_list_and_help_show_examples():
    listed = run_cli("list")
    assert listed.returncode == 0 and TINY in listed.stdout and "muse-spark-tulu3-fixed8192-v1" in listed.stdout
    for command in ("make", "verify", "hash", "fetch"):
        helped = run_cli(command, "--help")
        assert helped.returncode == 0 and "Example" in helped.stdout, command


def test_list_shows_every_config_and_marks_the_broken_ones(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    write_config(configs / "b-good.yaml")
    (configs / "a-unparsable.yaml").write_text("name: [unclosed\n")
    (configs / "c-incomplete.yaml").write_text("rows: 3\n")
    listed = run_cli("list", env={"DATABUILD_CONFIGS": str(configs)}, cwd=tmp_path)
    lines = {line.split("\t")[0]: line for line in listed.stdout.splitlines()}
    assert {"a-unparsable", "b-good", "c-incomplete", TINY} <= set(lines)  # the configs after a broken one too
    assert lines["a-unparsable"].split("\t")[1] == "BROKEN" and "cannot read config" in lines["a-unparsable"]
    assert lines["c-incomplete"].split("\t")[1] == "BROKEN" and "missing key" in lines["c-incomplete"]
    assert lines["b-good"].split("\t")[1] == "40 rows x 512 tokens"
    assert listed.returncode == 1
    assert listed.stderr == "error: 2 config(s) do not load: a-unparsable, c-incomplete (the BROKEN lines above say why)\n"


def test_a_closed_pipe_is_not_an_error_and_the_command_finishes(tiny_build, tmp_path):
    """`make NAME | head -n 1`: the reader is gone before make writes its summary; make says nothing
    about it, still updates the recipe it was given (work after the summary), and exits 0."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("workload:\n  dataset:\n    name: x\n")
    command = [sys.executable, "-m", "databuild", "make", TINY, "--out", str(tiny_build.parquet.parent),
               "--recipe", str(recipe)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    process.stdout.close()  # the pipe's reader has gone: each write make tries fails with EPIPE
    stderr = process.stderr.read().decode()
    assert process.wait() == 0 and stderr == ""
    assert tiny_build.data["output"]["rows_sha256"] in recipe.read_text()


def invalid_utf8_source(tmp_path: Path) -> Path:
    """OK_ROWS, with row 2's answer and row 5's id made of bytes that are not UTF-8."""
    ids = [r[0].encode() for r in OK_ROWS]
    ids[5] = b"ok-\xff"
    contents, roles, offsets = [], [], [0]
    for k, (_, msgs) in enumerate(OK_ROWS):
        for role, content in msgs:
            contents.append(content.encode() + (b"\xc3(" if k == 2 and role == "assistant" else b""))
            roles.append(role)
        offsets.append(len(contents))
    text = lambda values: pa.array(values, pa.binary()).view(pa.string())  # noqa: E731
    messages = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                        pa.StructArray.from_arrays([text(contents), pa.array(roles)],
                                                                   names=["content", "role"]))
    (tmp_path / "src" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"id": text(ids), "messages": messages, "source": ["s"] * len(OK_ROWS)}),
                   tmp_path / "src" / "data" / "train-00000-of-00001.parquet")
    return tmp_path / "src"


def test_invalid_utf8_is_a_malformed_conversation(tmp_path):
    source = invalid_utf8_source(tmp_path)
    result = run_cli("make", str(write_config(tmp_path / "c.yaml", source={"dir": str(source)}, rows=2)),
                     "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert ("data/train-00000-of-00001.parquet: row 2 (id 'ok-9'): message 1: content is not valid UTF-8 "
            "(and 1 more)") in result.stderr
    config = load_config(write_config(tmp_path / "s.yaml", source={"dir": str(source)}, rows=12,
                                      on_bad_conversation="skip"))
    built = make(config, tmp_path / "skip", progress=False)
    assert built.data["counts"]["malformed_in_source"] == 2
    reasons = {(b["row"], b["id"], b["reason"]) for b in built.data["skipped_conversations"]}
    assert reasons <= {(2, "ok-9", "message 1: content is not valid UTF-8"), (5, "ok-\\xff", "'id' is not valid UTF-8")}


def untagged_harmony(tmp_path: Path) -> dict:
    """The fixture tokenizer with its harmony template untagged: it closes the last answer with <|return|>
    and earlier ones with <|end|>, so a turn as generated (last, <|return|>) is not the turn as trained."""
    directory = tmp_path / "untagged"
    shutil.copytree(TOKENIZER_DIR, directory)
    template = directory / "chat_template.jinja"
    template.write_text(re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template.read_text()))
    return {"dir": str(directory), "sha256": {n: hashlib.sha256((directory / n).read_bytes()).hexdigest()
                                              for n in ("tokenizer.json", "tokenizer_config.json",
                                                        "chat_template.jinja")}}


@pytest.mark.parametrize("history", ["expand", "refuse"])
def test_history_policy_is_applied_and_counted(tmp_path, history):
    """A template that rewrites history: expand gives one sample (segment) per assistant turn and counts
    the conversations and samples; refuse skips them under kind history_rewritten, by source."""
    config = load_config(write_config(tmp_path / "c.yaml", name=f"h-{history}", loss_mask="assistant", rows=8,
                                      tokenizer=untagged_harmony(tmp_path), history=history,
                                      end_of_turn=["<|end|>", "<|return|>"], on_bad_conversation="skip"))
    result = make(config, tmp_path / "out", progress=False)
    counts, build = result.data["counts"], result.data["build"]
    assert build["history"] == history
    skipped = counts["conversations_skipped"]["history_rewritten"]
    expanded = counts["history_expanded"]
    if history == "expand":
        assert skipped == 0 and 0 < expanded["conversations"] < expanded["samples"]
        assert sum(v["conversations"] for v in expanded["by_source"].values()) == expanded["conversations"]
        ids = pq.read_table(result.parquet, columns=["conversation_ids"])["conversation_ids"].to_pylist()
        assert any(len(row) > len(set(row)) for row in ids)  # an expanded conversation's samples share its id
        report = verify(result.parquet, gather(result.parquet))
        assert report.failures == [] and report.exit_code == 0
    else:
        assert skipped > 0 and expanded["conversations"] == expanded["samples"] == 0
        assert sum(s["conversations_skipped"]["history_rewritten"] for s in counts["sources"]) == skipped
