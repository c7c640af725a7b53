"""Hostile inputs as a class: generated source files and configs, each run through `databuild make` as a
user runs it. Every case must end in a clean build (it verifies; the directory holds the build and
its lock, nothing else) or in one line naming the file, row and id, or the config key, with no
traceback and nothing under a final name. A fixed seed and example counts keep CI's run the same."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from conftest import TINY, record_count, write_config
from databuild.cli import main
from databuild.verification import gather, verify

FIXED = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SOURCE_FILE = "data/train-00000-of-00001.parquet"
LONE_SURROGATE = "\ud800"  # written raw as its 3 bytes (ED A0 80): not UTF-8, as a damaged file might hold
SPECIAL = ["<|end|>", "<|return|>", "<|start|>assistant<|channel|>final<|message|>", "<|message|>", "<|endoftext|>"]

hostile_text = st.one_of(
    st.none(), st.just(""),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=10).map(lambda t: t + LONE_SURROGATE),
    st.lists(st.sampled_from(SPECIAL + ["hi", " ", "\n"]), max_size=5).map("".join),
    st.integers(1, 3).map(lambda k: "word " * (20_000 * k)),  # 100-300 kB in one field
)
# One field in eight hostile, so that a row of several fields is as often clean as not.
text = st.integers(0, 7).flatmap(lambda k: hostile_text if k == 0 else st.text(min_size=1, max_size=30))
role = st.one_of(st.none(), st.sampled_from(["system", "developer", "user", "assistant", "robot", ""]))
message = st.one_of(st.none(), st.fixed_dictionaries({"content": text, "role": role}))
row = st.fixed_dictionaries({"id": text, "messages": st.one_of(st.none(), st.lists(message, max_size=4)),
                             "source": text})
good_row = st.builds(lambda k: {"id": f"ok-{k}", "source": "s", "messages": [
    {"content": f"question {k} " * 20, "role": "user"}, {"content": f"answer {k} " * 20, "role": "assistant"}]},
    st.integers(0, 10**6))
# What a damaged schema looks like: a column missing or of another type, a message field missing or not a string.
SCHEMA_DAMAGE = [None, "drop id", "drop messages", "drop source", "id as int", "content as int", "no role",
                 "messages as string", "extra field"]


def string_array(values: list) -> pa.Array:
    """Strings written as their raw bytes (a lone surrogate stays the 3 bytes it is in memory), unvalidated,
    as a writer that does not check them would leave them in a file."""
    data = [None if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.cumsum([0] + [0 if d is None else len(d) for d in data]).astype(np.int32)
    valid = np.array([d is not None for d in data])
    return pa.Array.from_buffers(pa.string(), len(data), [pa.array(valid).buffers()[1] if not valid.all() else None,
                                                          pa.py_buffer(offsets.tobytes()),
                                                          pa.py_buffer(b"".join(d or b"" for d in data))])


def source_table(rows: list[dict], damage: str | None) -> pa.Table:
    flat = [m for r in rows for m in (r["messages"] or [])]
    contents, roles = string_array([m and m["content"] for m in flat]), string_array([m and m["role"] for m in flat])
    fields = [pa.field("content", pa.string()), pa.field("role", pa.string())]
    children = [contents, roles]
    if damage == "content as int":
        children[0] = pa.array([len(m["content"] or "") if m else None for m in flat], pa.int64())
        fields[0] = pa.field("content", pa.int64())
    if damage == "no role":
        children, fields = children[:1], fields[:1]
    if damage == "extra field":
        children.append(pa.array([1] * len(flat), pa.int8()))
        fields.append(pa.field("tool_calls", pa.int8()))
    struct = pa.StructArray.from_arrays(children, fields=fields, mask=pa.array([m is None for m in flat], pa.bool_()))
    lengths = [len(r["messages"] or []) for r in rows]
    offsets = pa.array(np.cumsum([0] + lengths).astype(np.int32))
    messages = pa.ListArray.from_arrays(offsets, struct, mask=pa.array([r["messages"] is None for r in rows], pa.bool_()))
    columns = {"id": string_array([r["id"] for r in rows]), "messages": messages,
               "source": string_array([r["source"] for r in rows])}
    if damage == "id as int":
        columns["id"] = pa.array(range(len(rows)), pa.int64())
    if damage == "messages as string":
        columns["messages"] = pa.array(["[]"] * len(rows))
    if damage and damage.startswith("drop "):
        del columns[damage.removeprefix("drop ")]
    return pa.table(columns)


def run_make(config: Path, out: Path, name: object = TINY) -> str:
    """`databuild make` as the CLI runs it (offline: a config whose local copies are gone must not reach for the
    network in a test); the outcome, after checking the invariants every case owes."""
    result = CliRunner().invoke(main, ["make", str(config), "--out", str(out), "--offline"])
    assert isinstance(result.exception, (SystemExit, type(None))), result.exception  # no traceback, ever
    assert "Traceback" not in result.output
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    if result.exit_code == 0:
        parquet = out / f"{name}.parquet"
        assert left == sorted([f".{name}.lock", parquet.name, f"{name}.manifest.json"])
        assert verify(parquet, gather(parquet)).failures == []
        return "built"
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 1000, result.output[:2000]
    assert left in ([], [f".{name}.lock"]), left  # nothing under a final name, no partial
    return lines[0]


RAN_OUT = "error: the source ran out"  # the config asks for more rows than the source has: its counts, no row
REFUSALS = {"schema": "schema", "not valid UTF-8": "not UTF-8", "malformed": "malformed", "ran out": "ran out",
            "template_error": "template error", "mask_error": "mask error", "key '": "config key",
            "hub cache": "input not there", "does not exist": "input not there", "no files data/": "input not there"}


def refusal_kind(line: str) -> str:
    return next((kind for needle, kind in REFUSALS.items() if needle in line), "other")


@settings(FIXED, max_examples=100)
@given(st.lists(row, min_size=1, max_size=6), st.lists(good_row, min_size=0, max_size=30),
       st.sampled_from(SCHEMA_DAMAGE + [None] * 16), st.sampled_from(["error", "skip", "skip"]),
       st.randoms(use_true_random=False))
def test_hostile_source_files(hostile, good, damage, policy, rng):
    rows = hostile + good
    rng.shuffle(rows)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "src" / "data").mkdir(parents=True)
        pq.write_table(source_table(rows, damage), scratch / "src" / SOURCE_FILE)
        config = write_config(scratch / "c.yaml", source={"dir": str(scratch / "src")}, rows=1, row_tokens=64,
                              on_bad_conversation=policy)
        outcome = run_make(config, scratch / "out")
    if outcome.startswith(RAN_OUT):  # too few buildable rows: no one row is to blame; where they went, counted
        assert re.search(r"of its \d+ conversations, \d+ packed", outcome), outcome
    elif outcome != "built":
        # The file and the row and id, or the file alone when its schema is what is wrong.
        assert SOURCE_FILE in outcome, outcome
        if "schema" not in outcome:
            assert "row " in outcome and "id " in outcome, outcome
    record_count("fuzz: source files", outcome if outcome == "built" else "refused: " + refusal_kind(outcome))


TOP_KEYS = ["name", "source", "tokenizer", "template_kwargs", "loss_mask", "seed", "row_tokens", "rows", "separator",
            "on_bad_conversation", "unknown_key"]
value = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(1, 300), st.floats(allow_nan=True),
                  st.text(max_size=20), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=5),
                                                                                             st.integers(), max_size=2),
                  st.sampled_from(["<|end|>", "<|return|>", "assistant", "muse_spark", "skip", "2026-10-01",
                                   "2026-02-30", "0" * 40]))


# Values a key takes in a config that builds, so that the changes also combine into builds, not only refusals.
VALID = {"rows": st.integers(1, 3), "row_tokens": st.integers(8, 128), "seed": st.integers(0, 2**64),
         "separator": st.sampled_from(["<|end|>", "<|return|>"]), "loss_mask": st.sampled_from(["muse_spark"]),
         "on_bad_conversation": st.sampled_from(["error", "skip"]), "name": st.from_regex(r"[a-z0-9._-]{1,20}", fullmatch=True),
         "template_kwargs.current_date": st.dates().map(lambda d: d.isoformat())}
change = st.sampled_from(TOP_KEYS + ["source.revision", "source.dir", "tokenizer.sha256", "tokenizer.revision",
                                     "template_kwargs.current_date"]).flatmap(
    lambda key: st.tuples(st.just(key), st.one_of(st.just("delete"), value, *[VALID.get(key, value)] * 3)))


@settings(FIXED, max_examples=60)
@given(st.lists(change, min_size=1, max_size=3))
def test_hostile_configs(changes):
    yaml = YAML(typ="safe", pure=True)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        raw = yaml.load(write_config(scratch / "base.yaml", rows=2, row_tokens=64).read_text())
        for key, new in changes:
            *parents, leaf = key.split(".")
            mapping = raw
            for parent in parents:  # a section an earlier change replaced by a scalar has no keys to change
                mapping = mapping.get(parent) if isinstance(mapping, dict) else None
            if not isinstance(mapping, dict):
                continue
            if new == "delete":
                mapping.pop(leaf, None)
            else:
                mapping[leaf] = new
        config = scratch / "c.yaml"
        with open(config, "w") as handle:
            yaml.dump(raw, handle)
        outcome = run_make(config, scratch / "out", raw.get("name"))
    if outcome != "built":
        # The config file, or the key by its name (a template that reads the clock names current_date), or the
        # input a local copy no longer stands in for (repo@commit, offline), or the directory source.dir names.
        named = [name for key, _ in changes for name in (key, key.replace(".", " "))]  # source.dir: "source dir"
        assert (str(config) in outcome or any(name in outcome for name in named) or outcome.startswith(RAN_OUT)
                or "not in the hub cache and offline" in outcome or ": no files data/train-" in outcome), outcome
    record_count("fuzz: configs", outcome if outcome == "built" else "refused: " + refusal_kind(outcome))


def test_the_base_config_of_the_config_fuzz_builds(tmp_path):
    """The fuzz starts from a config that builds: its refusals are the changes', not the base's."""
    assert run_make(write_config(tmp_path / "c.yaml", rows=2, row_tokens=64), tmp_path / "out") == "built"
