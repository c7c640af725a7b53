"""How a build's cores (utils.machine.available_cores) are shared between encode processes and the
tokenizer's own threads."""

from __future__ import annotations

from ..utils.machine import available_cores, count_in_environment

# From this many cores on, a build runs one encode process per core, each with one tokenizer thread (no
# thread pool to idle while its process's Python renders and masks), up to MOST_PROCESSES; below it, its own
# process, the tokenizer's threads on every core, its Python overlapped with them. Measured (bench/README.md,
# "Cores" and "Fifth round"): on 8 and 16 cores one process per core was the fastest, at the recipe's size
# and at 8 times it; on 4 cores, once the tokenizer loaded outside the build's process (loader.py), four
# processes were 1.37-1.46x the parallel floor against one's 1.38-1.61x (three pairs, 1.7-1.9x the
# memory); on 2 cores two were no faster (1.32-1.53x against 1.37-1.40x on the device, 1.30-1.34x against
# 1.23-1.31x here).
PROCESS_PER_CORE_FROM = 4
# With 16 single-threaded processes the driver (pack, hash, write) is nearly the limit (it waited for its
# writer 7 s of 54 in the 8x job): more would only add memory (~170 MB each, measured). Above 16 cores,
# the cores are shared out as threads of these 16 (threads_per_worker).
MOST_PROCESSES = 16


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
    asked = count_in_environment(environ, "RAYON_NUM_THREADS", "threads")
    if asked is not None:
        return asked
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, workers))
