"""How many cores a build may use, and how they are shared between encode processes and the
tokenizer's own threads.

The cores are those this process may run on (its CPU affinity, which `taskset`, cpusets and most
schedulers set), capped by a cgroup v2 CPU quota (`cpu.max`, what a container's CPU limit sets).
Every parallel stage sizes itself from this one figure: the source pass's threads, the hashing
threads, the encode processes and their Rust threads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
# Cores per encode process in the default --workers. Measured on 16-core nodes (bench/README.md,
# "Cores"): one process with the tokenizer's threads on every core keeps ~7 of them busy, its Python
# (render, masks, the driver's work) being serial; 4 processes of 4 threads were the fastest in
# every run (1.35x one process on the recipe's job), ahead of 2, 8 and 16.
CORES_PER_WORKER = 4


def available_cores() -> int:
    """Cores this process may use: its affinity, capped by a cgroup v2 CPU quota; at least 1."""
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
    """The --workers a build uses when none is given: 1 up to 2 * CORES_PER_WORKER - 1 cores (one
    process, the tokenizer's threads on all of them, its Python overlapped with them), else one
    process per CORES_PER_WORKER cores."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // CORES_PER_WORKER) if cores >= 2 * CORES_PER_WORKER else 1


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """The tokenizer's threads (RAYON_NUM_THREADS) in each of `workers` encode processes: the cores
    shared out, so that processes times threads is the machine, not the machine per process (a
    thread pool per process as wide as the machine) nor one thread each (cores left idle when
    there are fewer processes than cores)."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, workers))
