"""How many cores this process may use.

The cores are those this process may run on (its CPU affinity, which `taskset`, cpusets and most
schedulers set), capped by a cgroup v2 CPU quota (`cpu.max`, what a container's CPU limit sets), or
DATABUILD_CORES where the user says how many.
Every parallel stage sizes itself from this one figure: the source pass's threads, the hashing
threads, the encode processes and their Rust threads (executors/cores.py shares them out).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import BuildError

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cores(environ=None) -> int:
    """Cores this process may use: DATABUILD_CORES when set (a share of a node that its scheduler does
    not enforce), else its affinity, capped by a cgroup v2 CPU quota; at least 1."""
    asked = count_in_environment(environ, "DATABUILD_CORES", "cores")
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


def count_in_environment(environ, name: str, what: str) -> int | None:
    """The environment variable `name` (of os.environ, or `environ`) as a count of 1 or more; None when unset."""
    value = (os.environ if environ is None else environ).get(name)
    if value is not None and (not value.strip().isdigit() or int(value) < 1):
        raise BuildError(f"{name}={value!r} in the environment: not a whole number of {what}, 1 or more")
    return None if value is None else int(value)
