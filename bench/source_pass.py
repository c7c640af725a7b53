#!/usr/bin/env python
"""The source pass alone against a plain pyarrow read of the same files (issue 33, its fourth round).

    .venv/bin/python bench/source_pass.py CORPUS_ROOT [--threads 16 2 1] [--beside tokenizer|python] [--profile]

CORPUS_ROOT: a corpus folder of bench/corpus.py (its data/train-*.parquet, the messages format). The pass is
`Spill.check_and_spill` as databuild/prepare.py builds it (every row held once, the stream's seeded
permutation, the prefix of the recipe's job scaled to the corpus: 6,400 rows of 8,192 tokens for 960,000
conversations), on `--threads` threads; the plain read is `pyarrow.parquet.read_table` of each file on as
many threads (the parallel floor's read, bench/README.md). Printed for each: wall, process CPU, and the
thread-seconds in the pass's parts (run.py's stage wrappers: perf_counter inside each call of
spill.iter_batches, check_batch, with_valid_utf8 on its thread, so a thread waiting for the interpreter is
counted), and the peak RSS. `--beside` runs what make runs beside the pass on a thread, at the build's
switch interval then (0.5 ms; make set it until the tokenizer's load left its process): `tokenizer`
imports transformers and loads the fixture tokenizer (pin(wait=False)); `python` spins pure Python until
the pass ends (the worst case). `--profile`: cProfile of the pass on one thread (its parts run on the main thread). Run it under `taskset -c 0-(C-1)`
for C cores.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from workers import timed  # bench/workers.py: the stage wrappers run.py's split uses

REPO = Path(__file__).resolve().parents[1]
FIXTURE_TOKENIZER = REPO / "tests" / "fixtures" / "muse-tiny-tokenizer"
STAGES = {"iter_batches": "read", "check_batch": "check", "with_valid_utf8": "utf-8"}


def timed_parts(spill_module, spent: dict, lock: threading.Lock) -> None:
    """Wrap the pass's parts where spill.py calls them, as run.py's stage split does."""
    for name, label in STAGES.items():
        function = getattr(spill_module, name)

        def add(started, _label=label):
            with lock:
                spent[_label] += time.perf_counter() - started

        setattr(spill_module, name, timed(function, add))


def beside(what: str, done: threading.Event) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def work():
        started = time.perf_counter()
        if what == "tokenizer":
            from transformers import AutoTokenizer
            AutoTokenizer.from_pretrained(str(FIXTURE_TOKENIZER))
        else:
            while not done.is_set():
                str(list(range(50)))
        out["seconds"] = time.perf_counter() - started

    sys.setswitchinterval(0.0005)  # what make set while it loaded the tokenizer beside the pass (until ecad71d)
    thread = threading.Thread(target=work)
    thread.start()
    return thread, out


class Serial:
    """ThreadPoolExecutor's part the pass uses, on the calling thread (for cProfile)."""

    def __init__(self, max_workers=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, function, items):
        return list(map(function, items))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--beside", choices=["tokenizer", "python"])
    parser.add_argument("--no-read", action="store_true", help="skip the plain read")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)

    import databuild.sources.spill as spill_module
    from databuild.sources.formats import FORMATS
    from databuild.sources.mixture import placement
    from databuild.sources.reader import source_files

    files = source_files(args.corpus, "train", FORMATS["messages"], "bench", 0)
    total = sum(f.rows for f in files)
    placed = placement([0], [np.arange(total, dtype=np.int64)], 20261001)
    prefix = spill_module.expected_prefix(files, placed, max(1, 6400 * total // 960_000) * 8192)
    print(f"{len(files)} files, {total:,} conversations, prefix {prefix:,}; pyarrow {pa.__version__}, "
          f"databuild at {Path(spill_module.__file__).parents[2]}", flush=True)
    spent = {label: 0.0 for label in STAGES.values()}
    timed_parts(spill_module, spent, threading.Lock())

    if args.profile:
        spill_module.ThreadPoolExecutor = Serial
        with tempfile.TemporaryDirectory() as folder:
            profile = cProfile.Profile()
            profile.enable()
            spill_module.Spill(files, placed, 8192, Path(folder), threads=1).check_and_spill(prefix)
            profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0

    for threads in args.threads:
        pa.set_cpu_count(threads)
        if not args.no_read:
            started = time.perf_counter()
            for file in files:
                pq.read_table(file.path, use_threads=True)
            print(f"plain read ({threads} threads): {time.perf_counter() - started:.2f} s", flush=True)
        spent.update({label: 0.0 for label in spent})
        done = threading.Event()
        side = beside(args.beside, done) if args.beside else None
        with tempfile.TemporaryDirectory() as folder:
            cpu, started = time.process_time(), time.perf_counter()
            found = spill_module.Spill(files, placed, 8192, Path(folder), threads=threads).check_and_spill(prefix)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        done.set()
        if side:
            side[0].join()
            print(f"beside ({args.beside}): {side[1]['seconds']:.2f} s", flush=True)
        print(f"pass ({threads} threads): wall {wall:.2f} s, CPU {cpu:.2f} s; thread-s read {spent['read']:.2f}, "
              f"check {spent['check']:.2f}, utf-8 {spent['utf-8']:.2f}; {len(found)} malformed; peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
