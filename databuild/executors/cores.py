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
# From this many cores on, a build runs one encode process per core, each with one tokenizer thread (no
# thread pool to idle while its process's Python renders and masks), up to MOST_PROCESSES; below it, its own
# process, the tokenizer's threads on every core, its Python overlapped with them. Measured (bench/README.md,
# "Cores"): on 2 and 4 cores a second process was slower than one (12% and 25%); on 8 and 16 cores one
# process per core was the fastest, at the recipe's size and at 8 times it, once workers were forked from a
# server that imports transformers once (local.worker_context) rather than spawned, each importing it.
PROCESS_PER_CORE_FROM = 8
# With 16 single-threaded processes the driver (pack, hash, write) is nearly the limit (it waited for its
# writer 7 s of 54 in the 8x job): more would only add memory (~170 MB each, measured). Above 16 cores,
# the cores are shared out as threads of these 16 (threads_per_worker).
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


def default_workers(cores: int | None = None) -> int:
    """The encode processes a build runs when --workers is not given, and the most it runs when it is:
    one per core from PROCESS_PER_CORE_FROM cores on, MOST_PROCESSES at most; below, 1 (the build's own)."""
    cores = available_cores() if cores is None else cores
    return min(cores, MOST_PROCESSES) if cores >= PROCESS_PER_CORE_FROM else 1


def encode_processes(asked: int | None, cores: int | None = None) -> int:
    """The encode processes for --workers `asked` (None: the default): never more than the default,
    since more were slower, never faster; the build says so when it runs fewer (`most_processes_rule`)."""
    most = default_workers(cores)
    return most if asked is None else max(1, min(asked, most))


def most_processes_rule(cores: int) -> str:
    """Why no more encode processes run than `default_workers`, in words for the user."""
    if cores >= PROCESS_PER_CORE_FROM:
        return f"one process per core, {MOST_PROCESSES} at most ({cores} cores here)"
    return f"one process below {PROCESS_PER_CORE_FROM} cores ({cores} here)"


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
