"""How many cores a build may use, and how they are shared between encode processes and the
tokenizer's own threads.

The cores are those this process may run on (its CPU affinity, which `taskset`, cpusets and most
schedulers set), capped by a cgroup v2 CPU quota (`cpu.max`, what a container's CPU limit sets), or
DATABUILD_CORES where the user says how many.
Every parallel stage sizes itself from this one figure: the source pass's threads, the hashing
threads, the encode processes and their Rust threads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import BuildError

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
# Cores per encode process, at least, for most jobs: each process runs its Python (render, masks) beside
# its share of the tokenizer's threads, and the driver packs and writes beside them all. Measured
# (bench/README.md, "Cores"): on 2 and 4 cores a second process was slower than one (12% and 25%): it
# only adds the hand-offs; on 16 cores, for the recipe's job, 4 processes of 4 threads were the fastest.
CORES_PER_WORKER = 4
# A large job runs one process per core instead (one tokenizer thread each), from 16 cores on. Measured
# on 16 cores in one run: the recipe's job (52 M tokens) took 10.3 s with 4 processes x 4 threads, 11.2 s
# with 8 x 2 and 11.7 s with 16 x 1; a job 8 times as large took 68.7, 58.4 and 53.6 s (its limit
# 48.7 s). More processes cost a fixed ~3.7 s (their start-up competes with the source pass; a batch on
# one thread takes longer, at the start and at the end) and gain ~30% a token (no thread pool's idle
# tails): the two lines cross near 84 M tokens. Below 16 cores this was not measured.
LARGE_JOB_TOKENS = 100_000_000
LARGE_JOB_CORES = 16
# With 16 single-threaded processes the driver (pack, hash, write) is nearly the limit (it waited for its
# writer 7 s of 54): more would only add memory (~170 MB each, measured).
MOST_PROCESSES = 16


def available_cores(environ=None) -> int:
    """Cores this process may use: DATABUILD_CORES when set (a share of a node that its scheduler does
    not enforce), else its affinity, capped by a cgroup v2 CPU quota; at least 1."""
    asked = _count_in(environ, "DATABUILD_CORES", "cores")
    if asked is not None:
        return asked
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def default_workers(cores: int | None = None, tokens: int | None = None) -> int:
    """The encode processes a build of `tokens` tokens (rows x row_tokens; None: not known) runs when
    --workers is not given, and the most it runs when it is: one per CORES_PER_WORKER cores, at least 1
    (below 8 cores: the build's own process, the tokenizer's threads on every core, its Python
    overlapped with them); for a large job on LARGE_JOB_CORES cores or more, one per core, up to
    MOST_PROCESSES (and never fewer than for a small one)."""
    cores = available_cores() if cores is None else cores
    most = max(1, cores // CORES_PER_WORKER)
    return max(most, min(cores, MOST_PROCESSES)) if _large(cores, tokens) else most


def encode_processes(asked: int | None, cores: int | None = None, tokens: int | None = None) -> int:
    """The encode processes for --workers `asked` (None: the default): never more than the default,
    since more were slower, never faster; the build says so when it runs fewer (`most_processes_rule`)."""
    most = default_workers(cores, tokens)
    return most if asked is None else max(1, min(asked, most))


def most_processes_rule(cores: int, tokens: int | None = None) -> str:
    """Why no more encode processes run than `default_workers`, in words for the user."""
    if _large(cores, tokens):
        return (f"one process per core, {MOST_PROCESSES} at most, for a job of {LARGE_JOB_TOKENS // 10**6} M "
                f"tokens or more ({cores} cores here)")
    return f"one process per {CORES_PER_WORKER} cores at most ({cores} cores here)"


def _large(cores: int, tokens: int | None) -> bool:
    return tokens is not None and tokens >= LARGE_JOB_TOKENS and cores >= LARGE_JOB_CORES


def threads_per_worker(workers: int, cores: int | None = None, environ=None) -> int:
    """The tokenizer's threads (RAYON_NUM_THREADS) in each of `workers` encode processes: the cores
    shared out, so that processes times threads is the machine, not the machine per process (a
    thread pool per process as wide as the machine) nor one thread each (cores left idle when
    there are fewer processes than cores). A RAYON_NUM_THREADS the user set is theirs: each process
    gets that many."""
    asked = _count_in(environ, "RAYON_NUM_THREADS", "threads")
    if asked is not None:
        return asked
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, workers))


def _count_in(environ, name: str, what: str) -> int | None:
    """The environment variable `name` (of os.environ, or `environ`) as a count of 1 or more; None when unset."""
    value = (os.environ if environ is None else environ).get(name)
    if value is not None and (not value.strip().isdigit() or int(value) < 1):
        raise BuildError(f"{name}={value!r} in the environment: not a whole number of {what}, 1 or more")
    return None if value is None else int(value)
