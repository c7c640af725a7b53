"""Mixtures and source formats end to end on the fixtures: a list of sources, each in its own format
and with an optional take, builds exactly the rows of the equivalent single source."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import SOURCE_DIR, TINY, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError
from databuild.sources.formats import COLUMN_KEYS
from databuild.sources.mixture import take_count, take_rows
from test_build import independent_rows, run_cli

SHARDS = sorted((SOURCE_DIR / "data").glob("*.parquet"))
REPO = "databuild-fixtures/tulu-tiny"
COMMIT = "1" * 40
# Inspected: datasets.Dataset.shuffle(generator=numpy.random.default_rng([42, 1])).select(range(10)) on
# 1,000 rows, sorted (test_take_is_what_datasets_selects checks it against datasets itself).
GOLDEN_TAKE_10_OF_1000_SEED_42 = [173, 357, 373, 630, 745, 812, 831, 861, 865, 874]


def entry(directory: Path, **keys) -> dict:
    return {"repo": keys.pop("repo", REPO), "revision": COMMIT, "split": "train", "dir": str(directory), **keys}


def mixture(tmp_path: Path, *entries: dict, name: str = "mix.yaml", **changes) -> Path:
    return write_config(tmp_path / name, source=None, sources=list(entries), **changes)


def write_copy(root: Path, shards: dict[str, list[dict]], schema: pa.Schema | None = None) -> Path:
    """root/data/NAME for each shard's rows (Python dicts)."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    for name, rows in shards.items():
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), root / "data" / name)
    return root


def fixture_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def copy_in_format(root: Path, convert) -> Path:
    """The fixture source, shard for shard, with each row's messages rewritten by `convert`."""
    shards = {}
    for shard in SHARDS:
        shards[shard.name] = [{"id": r["id"], **convert(r["messages"]), "source": r["source"]}
                              for r in fixture_rows(shard)]
    return write_copy(root, shards)


def build(config: Path, out: Path, **options):
    return make(load_config(config), out, progress=False, **options)


def test_a_one_entry_list_is_the_single_source_byte_for_byte(tiny_build, tmp_path):
    result = build(mixture(tmp_path, entry(SOURCE_DIR), name=f"{TINY}.yaml"), tmp_path / "out")
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert result.manifest.read_bytes() == tiny_build.manifest.read_bytes()


def split_fixture(tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's two shards as two one-shard sources."""
    halves = []
    for k, shard in enumerate(SHARDS):
        (tmp_path / f"half{k}" / "data").mkdir(parents=True)
        shutil.copy(shard, tmp_path / f"half{k}" / "data" / "train-00000-of-00001.parquet")
        halves.append(tmp_path / f"half{k}")
    return halves[0], halves[1]


def test_two_halves_in_order_build_the_whole(tiny_build, tmp_path):
    first, second = split_fixture(tmp_path)
    result = build(mixture(tmp_path, entry(first, repo="fixtures/first"), entry(second, repo="fixtures/second")),
                   tmp_path / "out")
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    sources, counts = result.data["inputs"]["sources"], result.data["counts"]
    assert [s["repo"] for s in sources] == ["fixtures/first", "fixtures/second"]
    assert [s["rows"] for s in sources] == [s["selected"] for s in sources] == [170, 130]
    assert [s["files"][0]["sha256"] for s in sources] == [f["sha256"] for f in
                                                          tiny_build.data["inputs"]["sources"][0]["files"]]
    per_source = counts["sources"]
    assert sum(s["selected"] for s in per_source) == counts["source_conversations"] == 300
    assert sum(s["conversations_read"] for s in per_source) == counts["conversations_read"]
    assert all(s["conversations_read"] > 0 for s in per_source)
    # the order of the list is the order of the mixed source: swapped, it is another stream
    swapped = build(mixture(tmp_path, entry(second), entry(first), name="swapped.yaml"), tmp_path / "swapped")
    assert swapped.data["output"]["rows_sha256"] != tiny_build.data["output"]["rows_sha256"]


def sharegpt(messages: list[dict]) -> dict:
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    return {"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in messages]}


def prompt_completion(messages: list[dict]) -> dict:
    return {"prompt": messages[:-1], "completion": messages[-1:]}


def renamed(messages: list[dict]) -> dict:
    return {"turns": [{"speaker": m["role"], "text": m["content"], "weight": 1} for m in messages]}


@pytest.mark.parametrize("format, convert", [
    ("sharegpt", sharegpt),
    ("prompt_completion", prompt_completion),
    ({"messages": "turns", "role": "speaker", "content": "text"}, renamed),
])
def test_copies_in_other_formats_build_the_same_rows(tiny_build, tmp_path, format, convert):
    copy = copy_in_format(tmp_path / "copy", convert)
    ignored = ["weight"] if convert is renamed else []  # a field the record does not carry: left out on purpose
    result = build(mixture(tmp_path, entry(copy, format=format, ignore_fields=ignored)), tmp_path / "out")
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    recorded = result.data["inputs"]["sources"][0]
    assert recorded["format"] == (format if isinstance(format, str) else {**COLUMN_KEYS, **format})
    assert recorded["ignore_fields"] == ignored
    if ignored:  # without the key, the field that would be dropped is refused, naming it
        with pytest.raises(BuildError, match=r"row 0 \(id 'tiny-0000'\): message 0: unknown field 'weight'"):
            build(mixture(tmp_path, entry(copy, format=format), name="unignored.yaml"), tmp_path / "refused")


def test_prompt_completion_strings_are_a_user_and_an_assistant_turn(tmp_path):
    pairs = [r for r in fixture_rows(SHARDS[0]) if [m["role"] for m in r["messages"]] == ["user", "assistant"]]
    assert len(pairs) == 99
    as_messages = write_copy(tmp_path / "messages", {"train-00000-of-00001.parquet": pairs})
    as_strings = write_copy(tmp_path / "strings", {"train-00000-of-00001.parquet": [
        {"id": r["id"], "prompt": r["messages"][0]["content"], "completion": r["messages"][1]["content"]}
        for r in pairs]})
    expected = build(mixture(tmp_path, entry(as_messages), rows=10), tmp_path / "a")
    result = build(mixture(tmp_path, entry(as_strings, format="prompt_completion"), rows=10, name="s.yaml"),
                   tmp_path / "b")
    assert result.parquet.read_bytes() == expected.parquet.read_bytes()
    assert result.data["counts"]["by_source"].keys() == {REPO}  # no source column: the repo stands in


def test_rows_without_an_id_get_file_and_row(tmp_path):
    rows = [{"messages": r["messages"]} for r in fixture_rows(SHARDS[1])]
    source = write_copy(tmp_path / "noid", {"train-00000-of-00001.parquet": rows})
    result = build(mixture(tmp_path, entry(source, repo="org/no-ids"), rows=5), tmp_path / "out")
    ids = {i for row in pq.read_table(result.parquet).column("conversation_ids").to_pylist() for i in row}
    assert ids and all(i.startswith("org/no-ids/data/train-00000-of-00001.parquet#") for i in ids)
    # the id is the row: its messages are that row's
    from databuild.prepare import prepare

    with prepare(load_config(tmp_path / "mix.yaml"), offline=True) as prepared:
        for conversation in list(prepared.conversations())[:20]:
            row = int(conversation.origin.id.rsplit("#", 1)[1])
            assert conversation.messages == tuple({"content": m["content"], "role": m["role"]} for m in rows[row]["messages"])


def test_take_is_what_datasets_selects():
    assert take_rows(1000, 10, 42).tolist() == GOLDEN_TAKE_10_OF_1000_SEED_42
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"i": list(range(1000))})
    shuffled = rows.shuffle(generator=np.random.default_rng([42, 1])).select(range(10))
    assert sorted(shuffled["i"]) == GOLDEN_TAKE_10_OF_1000_SEED_42


@pytest.mark.parametrize("take, rows, count", [(None, 300, 300), (300, 300, 300), (1, 300, 1), (1.0, 300, 300),
                                               (0.5, 300, 150), (0.29, 100, 29), (0.999, 300, 299),
                                               (1e-2, 300, 3)])
def test_take_counts(take, rows, count):
    assert take_count(take, rows, "c.yaml: source") == count  # 0.29 * 100 is 28.999999999999996 in floats


def test_take_nests_and_every_row_is_the_identity():
    small, large = take_rows(300, 50, 7), take_rows(300, 200, 7)
    assert set(small) <= set(large) and len(set(large)) == 200 and list(large) == sorted(large)
    assert take_rows(300, 300, 7).tolist() == list(range(300))
    assert take_rows(300, 50, 8).tolist() != small.tolist()


@pytest.mark.parametrize("take, message", [
    (2**32 + 1, "key 'take' = 4294967297: selects 4,294,967,297 rows of the source's 300, more than the"),
    (0.001, "key 'take' = 0.001: selects no row of the source's 300"),
])
def test_a_take_the_source_cannot_give_is_named(tmp_path, take, message):
    config = load_config(mixture(tmp_path, entry(SOURCE_DIR, take=take)))
    with pytest.raises(BuildError, match="sources\\[0\\]: " + message.replace("(", "\\(")):
        make(config, tmp_path / "out", progress=False)


# Inspected: the tiny config with `take: 0.5` (150 of the 300 fixture conversations), its rows equal to
# the independent rebuild below (numpy's selection and permutation, transformers' template and mask).
GOLDEN_TAKE_HALF_ROWS_SHA256 = "3459c41c06932f18a43a416767cb3c0ab2497a6b66f29fbdd188dba427844280"


@pytest.fixture(scope="module")
def half_take(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("half")
    return build(mixture(tmp, entry(SOURCE_DIR, take=0.5)), tmp / "out")


def test_a_take_builds_the_selected_rows_permuted(half_take, tokenizer, source_conversations):
    selected = take_rows(300, 150, 42)
    table = pq.read_table(half_take.parquet)
    expected, skipped, _ = independent_rows(tokenizer, [source_conversations[i] for i in selected], 512,
                                            table.num_rows)
    assert table.to_pylist() == expected
    assert half_take.data["output"]["rows_sha256"] == GOLDEN_TAKE_HALF_ROWS_SHA256
    source = half_take.data["inputs"]["sources"][0]
    assert (source["take"], source["rows"], source["selected"]) == (0.5, 300, 150)
    assert source["selected_sha256"] == hashlib.sha256(selected.astype("<i8").tobytes()).hexdigest()
    assert half_take.data["counts"]["source_conversations"] == 150


@pytest.mark.parametrize("take, workers, batch_size, window", [(0.5, 2, 7, 16), (150, 1, 1, 300)])
def test_a_take_is_the_same_whatever_the_workers_or_the_spelling(half_take, tmp_path, sixteen_cores, take, workers, batch_size,
                                                                 window):
    config = load_config(mixture(tmp_path, entry(SOURCE_DIR, take=take)))
    result = make(config, tmp_path / "out", workers=workers, batch_size=batch_size, window=window, progress=False)
    assert result.parquet.read_bytes() == half_take.parquet.read_bytes()
    assert result.data["inputs"]["sources"][0]["selected_sha256"] == \
        half_take.data["inputs"]["sources"][0]["selected_sha256"]


def bad_sharegpt(tmp_path: Path) -> Path:
    rows = [{"id": f"ok-{i}", **sharegpt(r["messages"])} for i, r in enumerate(fixture_rows(SHARDS[1])[:60])]
    rows[3]["conversations"][1]["from"] = "function_response"  # no converter knows it
    rows[5]["conversations"] = None
    return write_copy(tmp_path / "bad", {"train-00000-of-00001.parquet": rows})


def test_a_malformed_row_of_any_format_is_one_line_naming_source_file_row_and_id(tmp_path):
    first, _ = split_fixture(tmp_path)
    config = mixture(tmp_path, entry(first), entry(bad_sharegpt(tmp_path), repo="org/chats", format="sharegpt"))
    result = run_cli("make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert ("error: malformed conversation: org/chats: data/train-00000-of-00001.parquet: row 3 (id 'ok-3'): "
            "message 1: unknown 'from' value 'function_response' (sharegpt knows human, user, User, gpt,") in result.stderr
    assert "(and 1 more)" in result.stderr


def test_per_source_counts_add_up_under_skip(tmp_path):
    first, _ = split_fixture(tmp_path)
    config = load_config(mixture(tmp_path, entry(bad_sharegpt(tmp_path), repo="org/chats", format="sharegpt"),
                                 entry(first), on_bad_conversation="skip"))
    result = make(config, tmp_path / "out", progress=False)
    counts = result.data["counts"]
    per_source = counts["sources"]
    assert [s["malformed"] for s in per_source] == [2, 0] and counts["malformed_in_source"] == 2
    for key in ("selected", "malformed", "conversations_read"):
        assert sum(s[key] for s in per_source) == counts[{"selected": "source_conversations",
                                                          "malformed": "malformed_in_source"}.get(key, key)]
    for kind, total in counts["conversations_skipped"].items():
        assert sum(s["conversations_skipped"][kind] for s in per_source) == total
    listed = result.data["skipped_conversations"]
    assert {(b["source"], b["id"]) for b in listed} <= {("org/chats", "ok-3"), ("org/chats", "ok-5")}
    assert per_source[0]["conversations_skipped"]["malformed"] == len(listed)
    # read + skipped of each source = its rows among the stream positions the packer consumed
    stream = counts["conversations_read"] + len(listed)
    order = np.random.default_rng(42).permutation(60 + 170)[:stream]
    assert [int((order < 60).sum()), int((order >= 60).sum())] == [
        s["conversations_read"] + sum(s["conversations_skipped"].values()) for s in per_source]


def test_schema_of_another_format_is_named(tmp_path):
    source = copy_in_format(tmp_path / "copy", sharegpt)
    config = load_config(mixture(tmp_path, entry(source, repo="org/chats")))
    with pytest.raises(BuildError, match=r"^dataset org/chats@1{40}: data/train-00000-of-00002.parquet: schema: "
                                         r"missing column 'messages' \(expected messages: list<struct<content: "
                                         r"string, role: string, and optionally tool_calls, tool_call_id, name, "
                                         r"reasoning_content, thinking, reasoning, train>>, optionally tools\)$"):
        make(config, tmp_path / "out", progress=False)


@pytest.mark.parametrize("changes, message", [
    ({"sources": [{"repo": "a", "revision": COMMIT, "format": "alpaca"}]},
     "sources[0]: key 'format' = 'alpaca': known formats: messages, prompt_completion, sharegpt; preference "
     "formats: preference, preference_implicit, unpaired_preference; or a column mapping with keys messages, role, "
     "content"),
    ({"sources": [{"repo": "a", "revision": COMMIT, "format": {"messages": "turns", "speaker": "x"}}]},
     "sources[0]: format: unknown key 'speaker'"),
    ({"sources": [{"repo": "a", "revision": COMMIT, "take": 0}]}, "sources[0]: key 'take' = 0: a count of rows"),
    ({"sources": [{"repo": "a", "revision": COMMIT, "take": -1.5}]}, "key 'take' = -1.5: a fraction is a positive float"),
    ({"sources": [{"repo": "a", "revision": COMMIT, "take": float("inf")}]}, "key 'take' = inf: a fraction is a "
                                                                             "positive float"),
    ({"sources": [{"repo": "a", "revision": COMMIT, "take": "10%"}]}, "key 'take' = '10%': expected int/float"),
    ({"sources": [{"repo": "a", "revision": COMMIT}, {"repo": "b", "revision": "main"}]},
     "sources[1]: key 'revision' = 'main'"),
    ({"sources": []}, "key 'sources' = []: expected a non-empty list"),
    ({"sources": [{"repo": "a", "revision": COMMIT}], "source": {"repo": "a"}}, "give either 'source' (one) or "
                                                                                "'sources' (a list), not both"),
])
def test_bad_source_lists_are_named(tmp_path, changes, message):
    raw_source = changes.pop("source", None)
    path = write_config(tmp_path / "c.yaml", source=raw_source, **changes)
    with pytest.raises(BuildError) as error:
        load_config(path)
    assert message in str(error.value) and str(path) in str(error.value)


def test_dataset_dir_overrides_one_source_and_says_it_cannot_with_several(tmp_path):
    first, second = split_fixture(tmp_path)
    config = mixture(tmp_path, entry(first), entry(second))
    result = run_cli("make", str(config), "--out", str(tmp_path / "out"), "--dataset-dir", str(SOURCE_DIR))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "--dataset-dir replaces the one source of a config, and this one lists 2" in result.stderr


def test_list_shows_a_mixtures_sources(tmp_path):
    first, second = split_fixture(tmp_path)
    configs = tmp_path / "configs"
    configs.mkdir()
    mixture(configs, entry(first, repo="org/first"), entry(second, repo="org/second", take=0.25, format="sharegpt"),
            name="my-mix.yaml")
    result = run_cli("list", env={"DATABUILD_CONFIGS": str(configs)}, cwd=tmp_path)
    line = next(line for line in result.stdout.splitlines() if line.startswith("my-mix\t"))
    assert f"org/first@{'1' * 12} + org/second@{'1' * 12} (take 0.25) [sharegpt]" in line
    assert line.endswith(str(configs / "my-mix.yaml"))


def normalised(adapter, table: pa.Table) -> tuple[list[dict], dict[int, str]]:
    from databuild.sources.reader import SourceFile

    file = SourceFile(Path("x.parquet"), "data/x.parquet", table.num_rows, 10, 0, "org/x", adapter)
    batch, refused, _ = adapter.normalise(table.to_batches()[0], file, 10)
    return batch.to_pylist(), refused


def test_adapters_row_by_row():
    from databuild.sources.formats import FORMATS

    table = pa.table({"id": pa.array([7, 8, 9], pa.int64()),
                      "prompt": ["hi", None, "q"],
                      "completion": pa.array([[{"role": "assistant", "content": "a"}],
                                              [{"role": "assistant", "content": "b"}], []],
                                             pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))})
    rows, refused = normalised(FORMATS["prompt_completion"], table)
    assert [r["id"] for r in rows] == ["7", "8", "9"] and {r["source"] for r in rows} == {"org/x"}
    assert [[(m["role"], m["content"]) for m in r["messages"]] for r in rows] == [
        [("user", "hi"), ("assistant", "a")], [("assistant", "b")], [("user", "q")]]
    assert refused == {1: "prompt is null"}  # row 2 (nothing to answer) is left to the reader's checks

    chats = pa.table({"conversations": [[{"from": "system", "value": "s"}, {"from": "human", "value": "h"},
                                         {"from": "chatgpt", "value": "g"}],
                                        [{"from": "human", "value": "h"}, {"from": "function_call", "value": "{}"}]]})
    rows, refused = normalised(FORMATS["sharegpt"], chats)
    assert [r["id"] for r in rows] == ["org/x/data/x.parquet#0", "org/x/data/x.parquet#1"]
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert refused == {1: "message 1: function_call value: call 0 function.name is null, not a non-empty string"}
