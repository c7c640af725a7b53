"""The measured paths, each run by run.py in a process of its own: `python bench/workers.py JOB.json`.

A process per path keeps peak RSS (VmHWM) per path and stops one path's warm caches or
thread pools from helping the next. Each worker reads its job (a JSON file), writes its result
JSON to job["result"], and times only what its path is about:

- size:  tokens per conversation on a sample, to choose how many rows the build asks for;
- floor: the tokenizer's batch encode of already-rendered text, nothing else;
- peer:  transformers' apply_chat_template(tokenize=True, return_assistant_tokens_mask=True), one
         conversation at a time, as TRL-style trainers prepare SFT data;
- make:  databuild.build.make end to end (read, permute, render, tokenize, mask, pack, hash, write);
- read:  one read of the whole source (every file, the columns a build reads), on every core: the
         source's share of the job's limit;
- driver: the driver's per-token work alone (pack, hash, write) over a stream tokenized beforehand:
         the ceiling, in tokens/s, of any executor, however many workers feed it;
- pfloor: the parallel floor: the job's conversations (or the samples its history policy expands them
         into) split into C equal parts, rendered and encoded by C single-threaded processes at once,
         started and loaded beforehand, clocked from the first start to the last end (`part` is one of them).
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # CLOCK_MONOTONIC, as the bench's own: this process's start, its imports after it

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _start_as_make_does(argv: list[str]) -> None:
    """A make path's encode processes' fork server, started before this process imports anything more, as
    `databuild make` starts it before it reads the config (cli_make.make: the bench's builds are forced)."""
    if len(argv) != 2:  # a part of the parallel floor (--part)
        return
    job = json.loads(Path(argv[1]).read_text())
    if job["path"] != "make":
        return
    try:
        from databuild.executors import start_early
    except ImportError:  # a databuild (--databuild) from before it
        return
    start_early("local", job["workers"])


if __name__ == "__main__":
    _start_as_make_does(sys.argv)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

# Phi-3's template has no {% generation %} block, so return_assistant_tokens_mask would return all
# zeros. The peer path uses a copy with the block around what databuild's `assistant` strategy
# supervises (the content and the <|end|> after it), so both paths really compute masks.
PHI3_ASSISTANT = "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
PHI3_ASSISTANT_GENERATION = ("{{'<|assistant|>\n'}}{% generation %}{{message['content'] + '<|end|>'}}"
                             "{% endgeneration %}{{'\n'}}")


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


class TreePeak(threading.Thread):
    """The largest sum of RSS over this process and its descendants, sampled every 0.1 s.

    For builds with --workers > 1. RUSAGE_CHILDREN cannot stand in: a spawned child inherits its
    parent's RSS high-water mark from the fork that precedes its exec, so it reports the parent's
    size, not the worker's."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kib, self._done = 0, threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.1):
            self.peak_kib = max(self.peak_kib, sum(_rss_kib(pid) for pid in _tree(os.getpid())))

    def stop(self) -> float:
        self._done.set()
        self.join()
        return round(self.peak_kib / 1024, 1)


def _tree(root: int) -> list[int]:
    """root and its descendants: from each task's `children` list (a few reads, not a scan of /proc,
    whose time would be taken from the driver being measured), else from every process's parent."""
    if Path(f"/proc/{root}/task").is_dir() and next(Path(f"/proc/{root}/task").glob("*/children"), None):
        found, todo = [], [root]
        while todo:
            pid = todo.pop()
            found.append(pid)
            for children in Path(f"/proc/{pid}/task").glob("*/children"):
                try:
                    todo += [int(c) for c in children.read_text().split()]
                except OSError:
                    continue
        return found
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _machine_busy_seconds() -> float:
    """CPU time every process on the machine has used since boot (/proc/stat, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class Load:
    """CPU this path used over a region, and what the rest of the machine used meanwhile.

    The machine may be shared: another process busy on one of 2 cores halves a parallel path's
    throughput. `other_cores` (other processes' CPU seconds per wall second) says how far to
    trust a figure; `cpu_seconds` gives a contention-independent cost alongside the wall time.
    """

    def __enter__(self):
        self.wall, self.cpu, self.busy = time.perf_counter(), _cpu_seconds(), _machine_busy_seconds()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.wall
        self.cpu_seconds = _cpu_seconds() - self.cpu
        other = _machine_busy_seconds() - self.busy - self.cpu_seconds
        self.figures = {"cpu_seconds": round(self.cpu_seconds, 2),
                        "other_cores": round(max(other, 0.0) / wall, 2) if wall else 0.0}


def load_tokenizer(directory: str):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


def conversations_in_order(corpus: str, seed: int, count: int, with_tools: bool = False) -> list:
    """The first `count` conversations of the build's stream: its permutation, its file order; with
    `with_tools`, (messages as the template reads them, tools) pairs.

    The files read on a thread per core (pyarrow releases the GIL), each holding only the rows wanted,
    so a path's peak RSS reflects what it processes, not the corpus."""
    from databuild.utils.machine import available_cores

    paths = sorted((Path(corpus) / "data").glob("train-*.parquet"))
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in paths]
    wanted = np.random.default_rng(seed).permutation(sum(sizes))[:count]
    position_of = {int(index): position for position, index in enumerate(wanted)}
    firsts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    columns = ["messages", "tools"] if with_tools else ["messages"]

    def taken(k: int) -> tuple[np.ndarray, pa.Table | None]:
        first = firsts[k]
        indices = np.sort(wanted[(wanted >= first) & (wanted < first + sizes[k])])
        if not len(indices):
            return indices, None
        return indices, pq.read_table(paths[k], columns=columns).take(pa.array(indices - first))

    found: dict[int, object] = {}
    with ThreadPoolExecutor(max_workers=min(len(paths), available_cores())) as pool:
        for indices, table in pool.map(taken, range(len(paths))):
            if table is None:
                continue
            messages = table.column("messages").to_pylist()
            tools = table.column("tools").to_pylist() if with_tools else [None] * len(messages)
            for index, conversation, listed in zip(indices, messages, tools):
                found[position_of[int(index)]] = (
                    ([_as_chat(m) for m in conversation], json.loads(listed) if listed else None) if with_tools
                    else conversation)
    return [found[position] for position in range(len(wanted))]


def _as_chat(message: dict) -> dict:
    """A message as `datasets` gives it to a template, the fields it lacks (nulls of the struct) left out."""
    return {key: value for key, value in message.items() if value is not None or key == "content"}


def peer_template(tokenizer) -> str:
    template = tokenizer.chat_template
    if "{% generation %}" in template or "{%- generation -%}" in template:
        return template
    if PHI3_ASSISTANT in template:
        return template.replace(PHI3_ASSISTANT, PHI3_ASSISTANT_GENERATION)
    raise SystemExit("peer path: the chat template has no {% generation %} block and is not Phi-3's; "
                     "transformers cannot compute assistant masks with it")


class StreamHasher:
    """databuild's rows_sha256 recomputed from per-conversation (ids, mask): the pack rules of
    databuild/pack/concat.py (one separator between conversations unless the render already ends with it,
    fixed rows, rows without a target skipped) and the row bytes of databuild/rowfile/hashes.py."""

    def __init__(self, row_tokens: int, separator_id: int, rows: int):
        self.row_tokens, self.separator_id, self.rows_wanted = row_tokens, separator_id, rows
        self.sha = hashlib.sha256()
        self.ids: list[np.ndarray] = []
        self.mask: list[np.ndarray] = []
        self.pending = self.rows = 0
        self.last: int | None = None

    def add(self, ids: list[int], mask: list[int]) -> None:
        if self.rows >= self.rows_wanted:
            return
        if self.last is not None and self.last != self.separator_id:
            self._push(np.array([self.separator_id], dtype=np.int32), np.zeros(1, dtype=np.int8))
        self._push(np.asarray(ids, dtype=np.int32), np.asarray(mask, dtype=np.int8))
        self.last = ids[-1] if ids else self.last

    def _push(self, ids: np.ndarray, mask: np.ndarray) -> None:
        self.ids.append(ids)
        self.mask.append(mask)
        self.pending += len(ids)
        if self.pending < self.row_tokens:
            return
        ids, mask = np.concatenate(self.ids), np.concatenate(self.mask)
        full = self.pending // self.row_tokens * self.row_tokens
        for low in range(0, full, self.row_tokens):
            row_mask = mask[low:low + self.row_tokens]
            if row_mask.any() and self.rows < self.rows_wanted:
                self.sha.update(ids[low:low + self.row_tokens].astype("<i4").tobytes())
                self.sha.update(row_mask.astype(np.uint8).tobytes())
                self.rows += 1
        self.ids, self.mask, self.pending = [ids[full:]], [mask[full:]], self.pending - full

    def hexdigest(self) -> str | None:
        return self.sha.hexdigest() if self.rows == self.rows_wanted else None


def run_size(job: dict) -> dict:
    """Mean tokens per conversation over a sample of the stream (rendered as the floor renders)."""
    tokenizer = load_tokenizer(job["tokenizer"])
    sample = conversations_in_order(job["corpus"], job["seed"], job["sample"])
    texts = [tokenizer.apply_chat_template(c, tokenize=False, **job["template_kwargs"]) for c in sample]
    encodings = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    return {"conversations": len(sample), "tokens": sum(len(e.ids) for e in encodings)}


def run_floor(job: dict) -> dict:
    tokenizer = load_tokenizer(job["tokenizer"])
    conversations = conversations_in_order(job["corpus"], job["seed"], job["conversations"])
    started = time.perf_counter()
    texts = [tokenizer.apply_chat_template(c, tokenize=False, **job["template_kwargs"]) for c in conversations]
    render_seconds = time.perf_counter() - started
    del conversations
    backend, size = tokenizer.backend_tokenizer, job["batch_size"]
    # job["fast"]: encode_batch_fast, the same ids without character offsets (what databuild's build encodes
    # with where its added tokens place the tokens: encode/positions.py), a floor below the issue's
    encode = backend.encode_batch_fast if job.get("fast") else backend.encode_batch
    tokens, seconds, release = 0, 0.0, 0.0
    with Load() as load:
        for low in range(0, len(texts), size):
            batch = texts[low:low + size]
            started = time.perf_counter()
            encodings = encode(batch, add_special_tokens=False)
            seconds += time.perf_counter() - started
            tokens += sum(len(e) for e in encodings)
            # Freeing the Encodings (a Rust String per token among them) is serial and not part of
            # the floor as the issue defines it; timed apart so the report can say what it costs.
            started = time.perf_counter()
            del encodings
            release += time.perf_counter() - started
    return {"conversations": len(texts), "tokens": tokens, "seconds": seconds, "release_seconds": release,
            "render_seconds": render_seconds, **load.figures}


def run_peer(job: dict) -> dict:
    tokenizer = load_tokenizer(job["tokenizer"])
    template = peer_template(tokenizer)
    conversations = conversations_in_order(job["corpus"], job["seed"], job["conversations"])
    separator = job.get("separator") or tokenizer.eos_token
    hasher = StreamHasher(job["row_tokens"], tokenizer.convert_tokens_to_ids(separator), job["rows"])
    tokens, supervised, seconds = 0, 0, 0.0
    with Load() as load:  # spans the cross-check too: its CPU figure over-counts, slightly
        for conversation in conversations:
            started = time.perf_counter()
            out = tokenizer.apply_chat_template(conversation, chat_template=template, tokenize=True,
                                                return_dict=True, return_assistant_tokens_mask=True,
                                                **job["template_kwargs"])
            seconds += time.perf_counter() - started
            # Outside the timed region: the cross-check against the build's rows_sha256.
            tokens += len(out["input_ids"])
            supervised += sum(out["assistant_masks"])
            hasher.add(out["input_ids"], out["assistant_masks"])
    return {"conversations": len(conversations), "tokens": tokens, "seconds": seconds,
            "supervised_tokens": supervised, "rows_sha256": hasher.hexdigest(), **load.figures}


def run_make(job: dict) -> dict:
    # What make imports, imported before it is timed (its start_and_imports_seconds counts them): not
    # transformers.AutoTokenizer, which databuild no longer imports (it imports torch where torch is installed).
    # In the order `databuild make` takes them (cli_make.make): the workers' fork server started (it builds:
    # force; _start_as_make_does, as this process started), the config, then the build's imports.
    import databuild
    from databuild.config import load_config

    config = load_config(job["config"])
    import databuild.build
    from databuild.build import make

    phases = _timed(databuild.build, ("pin", "prepare", "check_unchanged"))
    stages = _stages()
    waits = _waits()
    tree = TreePeak() if (job["workers"] or 2) > 1 else None
    if tree:
        tree.start()
    with Load() as load:
        started = time.perf_counter()
        window = {"window": job["window"]} if job.get("window") else {}
        if job.get("profile"):  # the driver's main thread only
            import cProfile

            profiler = cProfile.Profile()
            result = profiler.runcall(make, config, Path(job["out"]), offline=True, workers=job["workers"],
                                      batch_size=job["batch_size"], progress=False, force=True, **window)
            profiler.dump_stats(job["profile"])
        else:
            # force: a repeat builds into the same directory, where the first run's build is up to date
            result = make(config, Path(job["out"]), offline=True, workers=job["workers"],
                          batch_size=job["batch_size"], progress=False, force=True, **window)
        seconds = time.perf_counter() - started
        stages = _stage_figures(stages, started)
        _stop_fork_server()
    output, counts = result.data["output"], result.data["counts"]
    # concat cuts a conversation at each row boundary it straddles: the first segment of a continued row
    firsts = pq.read_table(result.parquet, columns=["conversation_ids"]).column("conversation_ids").to_pylist()
    cut = len({firsts[row][0] for row in result.data["continued_rows"]})
    return {"conversations": counts["conversations_read"], "tokens": output["tokens"], "seconds": seconds,
            "padding_tokens": output["padding_tokens"], "conversations_cut": cut,
            "overlong_dropped": counts.get("overlong_conversations", {}).get("dropped", 0),
            "rows": output["rows"], "supervised_tokens": output["supervised_tokens"],
            "rows_skipped": counts["rows_skipped"]["no_supervised_token"],
            "rows_sha256": output["rows_sha256"], "parquet_bytes": output["parquet_bytes"],
            "databuild": str(Path(databuild.__file__).parent),
            "encoding": getattr(result, "encoding", None),  # None: a databuild from before it said
            "phases": {k: round(v, 3) for k, v in {**phases, **waits}.items()}, "stages": stages,
            "start_and_imports_seconds": round(started - _spawned_at(), 3),
            "history_expanded": counts.get("history_expanded"),
            "tree_peak_rss_mib": tree.stop() if tree else None, **load.figures}


def _stop_fork_server() -> None:
    """The workers are the fork server's children, not this process's: their CPU time reaches this
    process's RUSAGE_CHILDREN (Load's cpu_seconds) only once the server has exited and been waited for.
    Outside the timed wall seconds; multiprocessing has no public call for it (the method its own tests use)."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


def _spawned_at() -> float:
    """When run.py started this process (its CLOCK_MONOTONIC, passed in the environment); else this
    module's first line (the interpreter's own start then left out)."""
    return float(os.environ.get("BENCH_SPAWNED_AT", STARTED))


# Where a build's seconds go, stage by stage (bench/README.md, "The parallel floor"): (module, function,
# stage). Wall seconds of the build's own thread, except those marked threads (summed over the source
# pass's threads). A name a databuild no longer has is reported as not measured: keep them current.
STAGES = (
    ("databuild.inputs.resolve", "source_files", "pin: the source's footers (its hash beside them)"),
    ("databuild.inputs.pins", "hash_files", "hash the source (threads: pin, end check)"),
    ("databuild.executors.loader", "load_tokenizer", "pin: load the tokenizer"),
    ("databuild.build", "pin", "pin (all)"),
    ("databuild.prepare", "placement", "source pass: permutation"),
    ("databuild.sources.spill", "iter_batches", "source pass: read (threads)"),
    ("databuild.sources.spill", "check_batch", "source pass: check (threads)"),
    ("databuild.sources.spill", "with_valid_utf8", "source pass: utf-8 (threads)"),
    ("databuild.build", "prepare", "source pass (all: read, check, spill)"),
    ("databuild.build", "write_rows", "encode, pack, hash, write (the stream)"),
    ("databuild.build", "check_unchanged", "end: source unchanged"),
    ("databuild.build", "manifest_of", "end: manifests"),
    ("databuild.build", "publish", "end: rename"),
    ("databuild.build", "write_manifest", "end: write the manifest"),
    ("databuild.executors.local", "end_pool", "end: stop the workers"),
)


def timed(function, add):
    """`function` wrapped so that `add(started)` is called with the perf_counter at each start of its work:
    a call, or each step of a generator (the time inside each step, not the consumer's between them)."""
    import inspect

    def call(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            add(started)

    def steps(*args, **kwargs):
        items = function(*args, **kwargs)
        while True:
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                add(started)
                return
            add(started)
            yield item

    return steps if inspect.isgeneratorfunction(function) else call


def _stages() -> dict:
    """Wraps each of STAGES' functions (generators: the time inside each step), and the driver's
    first and last result from the encoding (worker results, or this process's own finish)."""
    import importlib

    spent, seen = {label: 0.0 for *_, label in STAGES}, {"results": []}
    for module_name, name, label in STAGES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:  # a databuild (--databuild) from before the module was added
            module = None
        function = getattr(module, name, None)
        if function is None:  # moved in this databuild: not measured
            spent[label] = None
            continue

        def add(started, _label=label):
            spent[_label] += time.perf_counter() - started

        setattr(module, name, timed(function, add))
    import databuild.executors.local as local
    from databuild.encode.encoder import Encoder

    def noted(function):
        def note(*args, **kwargs):
            value = function(*args, **kwargs)
            if "stream" in seen:  # not the template's probe while pinning
                seen["results"].append(time.perf_counter())
            return value
        return note

    local.from_columns = noted(local.from_columns)
    Encoder.finish = noted(Encoder.finish)
    write_rows = sys.modules["databuild.build"].write_rows

    def driver_cpu(*args, **kwargs):
        seen["stream"], started = time.perf_counter(), time.thread_time()
        try:
            return write_rows(*args, **kwargs)
        finally:
            spent["the driver's own CPU in the stream (unpickle, pack, hash)"] = time.thread_time() - started

    sys.modules["databuild.build"].write_rows = driver_cpu
    build = sys.modules["databuild.build"]
    pin = build.pin

    def loaded_when(*args, **kwargs):  # when the tokenizer's load (on a thread, or in a child) has ended
        pinned = pin(*args, **kwargs)
        if hasattr(pinned, "loaded"):  # an older databuild (--databuild) loads within pin: nothing to watch
            pinned.loaded.add_done_callback(lambda _: seen.setdefault("loaded", time.perf_counter()))
        return pinned

    build.pin = loaded_when
    return {"spent": spent, "seen": seen}


def _stage_figures(stages: dict, started: float) -> dict:
    results = stages["seen"]["results"]
    return {**{k: None if v is None else round(v, 3) for k, v in stages["spent"].items()},
            "tokenizer loaded after (s from make's start)": round(stages["seen"]["loaded"] - started, 3)
            if "loaded" in stages["seen"] else None,
            "first result after (s from make's start)": round(results[0] - started, 3) if results else None,
            "last result after": round(results[-1] - started, 3) if results else None,
            "results (batches)": len(results)}


def _timed(module, names: tuple[str, ...]) -> dict[str, float]:
    """Wall seconds spent in each of module's functions `names` (the build's serial phases), summed."""
    spent = dict.fromkeys(names, 0.0)

    def wrap(name, function):
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return timed

    for name in names:
        setattr(module, name, wrap(name, getattr(module, name)))
    return spent


def _waits() -> dict[str, float]:
    """Wall seconds the driver's threads spend blocked on futures: on the encode workers' results
    (little: the workers are the bottleneck; much: the driver is) and on the background writer."""
    from concurrent.futures import Future

    spent = {"waiting for workers": 0.0, "waiting for the writer": 0.0, "waiting for the tokenizer threads": 0.0,
             "waiting for other threads (source pass, hashing)": 0.0, "waiting for the tokenizer's load": 0.0}
    result = Future.result

    def timed(self, timeout=None):
        started = time.perf_counter()
        value = result(self, timeout)
        # results of a worker / of encode_batch in this process / of the source pass's parts or the hashing /
        # of write_table
        kind = ("the tokenizer's load" if type(value[0]).__name__ == "Packing" else "workers") if isinstance(
            value, tuple) and value else (
            ("the tokenizer threads" if value and type(value[0]).__name__ == "Encoding" else
             "other threads (source pass, hashing)") if isinstance(value, list) else "the writer")
        spent[f"waiting for {kind}"] += time.perf_counter() - started
        return value

    Future.result = timed
    return spent


def run_read(job: dict) -> dict:
    """Every file of the source decoded once, the files at once on one thread per core (pyarrow
    releases the GIL): as fast as the source can be read, whatever a build then does with it."""
    from concurrent.futures import ThreadPoolExecutor

    from databuild.utils.machine import available_cores

    paths = sorted((Path(job["corpus"]) / "data").glob("train-*.parquet"))
    with Load() as load:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(len(paths), available_cores())) as pool:
            rows = sum(pool.map(lambda p: pq.read_table(p, columns=["id", "messages", "source"]).num_rows, paths))
        seconds = time.perf_counter() - started
    return {"conversations": rows, "tokens": 0, "seconds": seconds, **load.figures}


def run_driver(job: dict) -> dict:
    """The job's stream tokenized first (not timed), then only what the driver does per token, as a
    build does it: pack into rows, hash them, write the parquet (background writer, fsync)."""
    import tempfile
    from itertools import islice

    from databuild.build import prepare
    from databuild.config import load_config
    from databuild.executors.local import encode_stream
    from databuild.pack.policy import pack
    from databuild.pack.rows import PackStats
    from databuild.rowfile.hashes import RowsHasher, SegmentsHasher
    from databuild.rowfile.write import write_rows
    from databuild.records.problems import buildable

    config = load_config(job["config"])
    with prepare(config, offline=True) as prepared:
        started = time.perf_counter()
        conversations = list(islice(prepared.conversations(), job["conversations"]))
        read_seconds = time.perf_counter() - started  # the buckets back to Python: also the driver's
        stream = list(encode_stream(conversations, prepared.encoder, job["batch_size"], 1))
    del conversations
    tokens = sum(len(t.input_ids) for t in stream)
    with Load() as load, tempfile.TemporaryDirectory(dir=job.get("out")) as out:
        started = time.perf_counter()
        kept = buildable(iter(stream), config.on_bad_conversation, list(prepared.inputs.source_files), [])
        rows = islice(pack(kept, prepared.packing, PackStats()), config.rows)
        written = write_rows(rows, Path(out) / "rows.parquet", config.row_tokens, RowsHasher(), SegmentsHasher())
        seconds = time.perf_counter() - started
    rows_written = getattr(written, "rows", written)  # a databuild (--databuild) from before write_rows said more
    return {"conversations": len(stream), "tokens": rows_written * config.row_tokens, "stream_tokens": tokens,
            "seconds": seconds, "read_seconds": read_seconds, **load.figures}


def run_pfloor(job: dict) -> dict:
    """The parallel floor: the job's conversations, or with job["expand"] the samples the history policy
    writes of them (`samples_of`), cut into job["processes"] equal parts (consecutive, in stream order),
    each rendered (apply_chat_template, tokenize=False) and encoded (encode_batch in batches, freeing
    the encodings included) by a process of its own with one tokenizer thread (RAYON_NUM_THREADS=1),
    all at once. The processes start, load the tokenizer and their part, and render and encode one item
    beforehand (not timed); then a line on their stdin starts them all. Seconds: from the first start
    to the last end (CLOCK_MONOTONIC, one clock for every process of the machine)."""
    import tempfile

    items = conversations_in_order(job["corpus"], job["seed"], job["conversations"], with_tools=job.get("expand", False))
    turns = sum(1 for messages, _ in items for m in messages if m["role"] == "assistant") if job.get("expand") else \
        sum(1 for messages in items for m in messages if m["role"] == "assistant")
    if job.get("expand"):
        items = [sample for messages, tools in items for sample in samples_of(messages, tools)]
    else:
        items = [(messages, None) for messages in items]
    processes = job["processes"]
    bounds = [len(items) * k // processes for k in range(processes + 1)]
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(dir=job.get("out")) as folder:
        parts = []
        for k in range(processes):
            part = Path(folder) / f"part-{k}.pickle"
            part.write_bytes(pickle.dumps({**{key: job[key] for key in ("tokenizer", "template_kwargs", "batch_size")},
                                           "items": items[bounds[k]:bounds[k + 1]], "result": f"{part}.json"}))
            parts.append(part)
        del items
        children = [subprocess.Popen([sys.executable, __file__, "--part", str(part)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE) for part in parts]
        for child in children:  # loaded and warm
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"pfloor: a part process failed to start (exit {child.wait()})")
        with Load() as load:
            for child in children:
                child.stdin.write("go\n")
                child.stdin.close()
            failed = [child.wait() for child in children]
        if any(failed):
            raise SystemExit(f"pfloor: part processes exited {failed}")
        results = [json.loads(Path(f"{part}.json").read_text()) for part in parts]
    seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
    each = [r["ended"] - r["started"] for r in results]
    return {"conversations": job["conversations"], "assistant_turns": turns, "samples": sum(r["items"] for r in results),
            "tokens": sum(r["tokens"] for r in results), "seconds": seconds, "processes": processes,
            "part_seconds": [round(min(each), 3), round(max(each), 3)],
            "starts_spread": round(max(r["started"] for r in results) - min(r["started"] for r in results), 4),
            "render_cpu_seconds": round(sum(r["render_cpu"] for r in results), 2),
            "encode_cpu_seconds": round(sum(r["encode_cpu"] for r in results), 2),
            **load.figures, "cpu_seconds": round(sum(r["cpu"] for r in results), 2)}


def samples_of(messages: list[dict], tools: list | None) -> list[tuple[list[dict], list | None]]:
    """What a template that drops the reasoning of answers before the last user message (Qwen3's) has
    databuild write under `history: expand`: the conversation itself when no such answer has reasoning,
    else one sample per assistant message, the conversation up to it (the bench's agentic corpus has a
    tool result or a user message after every assistant message, so each is a turn of its own). run.py
    checks the count against the job's manifest (counts.history_expanded)."""
    users = [k for k, m in enumerate(messages) if m["role"] == "user"]
    answers = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    if not any(k < users[-1] and messages[k].get("reasoning_content") for k in answers):
        return [(messages, tools)]
    return [(messages[:k + 1], tools) for k in answers]


def run_part(part_file: str) -> None:
    """One process of the parallel floor (run_pfloor): ready, then its part rendered and encoded on one thread."""
    job = pickle.loads(Path(part_file).read_bytes())
    tokenizer, kwargs, size = load_tokenizer(job["tokenizer"]), job["template_kwargs"], job["batch_size"]
    backend, items = tokenizer.backend_tokenizer, job["items"]

    def render(item) -> str:
        messages, tools = item
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)

    backend.encode_batch([render(item) for item in items[:1]], add_special_tokens=False)  # warm: not timed
    print("ready", flush=True)
    sys.stdin.readline()
    started, cpu = time.perf_counter(), time.process_time()
    texts = [render(item) for item in items]
    rendered = time.process_time()
    tokens = 0
    for low in range(0, len(texts), size):
        encodings = backend.encode_batch(texts[low:low + size], add_special_tokens=False)
        tokens += sum(len(e) for e in encodings)
        del encodings
    ended, done = time.perf_counter(), time.process_time()
    Path(job["result"]).write_text(json.dumps({
        "started": started, "ended": ended, "items": len(items), "tokens": tokens, "cpu": done - cpu,
        "render_cpu": rendered - cpu, "encode_cpu": done - rendered}))


PATHS = {"size": run_size, "floor": run_floor, "peer": run_peer, "make": run_make, "read": run_read,
         "driver": run_driver, "pfloor": run_pfloor}


def main(job_file: str) -> None:
    job = json.loads(Path(job_file).read_text())
    result = PATHS[job["path"]](job)
    result["peak_rss_mib"] = peak_rss_mib()
    Path(job["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "--part":
        run_part(sys.argv[2])
    else:
        main(sys.argv[1])
