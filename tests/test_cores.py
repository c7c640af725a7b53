"""How a build shares the cores: the cores counted, the default --workers, the tokenizer's threads per worker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from databuild.executors import cores
from databuild.errors import BuildError
from databuild.executors.cores import (available_cores, default_workers, encode_processes, most_processes_rule,
                                       threads_per_worker)


@pytest.mark.parametrize("machine, workers", [(1, 1), (2, 1), (4, 1), (7, 1), (8, 2), (16, 4), (17, 4), (64, 16),
                                              (200, 50)])
def test_default_workers(machine, workers):
    assert default_workers(machine) == workers
    assert default_workers(machine, tokens=6400 * 8192) == workers  # the recipe's job is not a large one


RECIPE, EIGHT_TIMES = 6400 * 8192, 8 * 6400 * 8192


@pytest.mark.parametrize("machine, tokens, workers", [
    (16, RECIPE, 4), (16, EIGHT_TIMES, 16), (16, cores.LARGE_JOB_TOKENS - 1, 4), (16, cores.LARGE_JOB_TOKENS, 16),
    (8, EIGHT_TIMES, 2), (15, EIGHT_TIMES, 3), (2, EIGHT_TIMES, 1),  # below 16 cores: not measured, the usual rule
    (32, EIGHT_TIMES, 16), (200, EIGHT_TIMES, 50)])  # 16 at most, never fewer than by the usual rule
def test_a_large_job_runs_a_process_per_core(machine, tokens, workers):
    """On 16 cores a job 8 times the recipe's ran 22% faster as 16 single-threaded processes than as 4 of 4
    threads, and the recipe's job 14% slower (bench/README.md, "Cores"): the default follows the job's size."""
    assert default_workers(machine, tokens) == workers
    assert threads_per_worker(workers, machine, environ={}) == max(1, machine // workers)


@pytest.mark.parametrize("workers, machine, threads", [(1, 16, 16), (2, 16, 8), (4, 16, 4), (5, 16, 3),
                                                       (16, 16, 1), (32, 16, 1), (2, 2, 1), (1, 2, 2)])
def test_threads_per_worker_share_the_cores_out(workers, machine, threads):
    assert threads_per_worker(workers, machine, environ={}) == threads


@pytest.mark.parametrize("workers", [1, 4, 16])
def test_a_users_rayon_num_threads_is_kept(workers):
    assert threads_per_worker(workers, 16, environ={"RAYON_NUM_THREADS": "3"}) == 3


@pytest.mark.parametrize("value", ["0", "many", "-2", ""])
def test_a_bad_rayon_num_threads_is_refused_naming_it(value):
    with pytest.raises(BuildError, match=f"RAYON_NUM_THREADS={value!r}"):
        threads_per_worker(4, 16, environ={"RAYON_NUM_THREADS": value})


def test_cores_are_the_affinity(monkeypatch):
    """A process pinned to one core (taskset, a cpuset) counts one core, whatever the machine has."""
    monkeypatch.delenv("DATABUILD_CORES", raising=False)
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from databuild.executors.cores import available_cores; print(available_cores())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"
    assert available_cores() == len(os.sched_getaffinity(0)) or cores.CGROUP_CPU_MAX.exists()


def test_databuild_cores_says_how_many(monkeypatch):
    assert available_cores({"DATABUILD_CORES": "3"}) == 3
    for value in ("0", "all", ""):
        with pytest.raises(BuildError, match=f"DATABUILD_CORES={value!r}"):
            available_cores({"DATABUILD_CORES": value})


@pytest.mark.parametrize("asked, machine, processes", [(None, 2, 1), (2, 2, 1), (16, 2, 1), (2, 4, 1), (2, 8, 2),
                                                       (16, 8, 2), (None, 16, 4), (1, 16, 1), (3, 16, 3),
                                                       (16, 16, 4), (None, 64, 16)])
def test_processes_are_the_default_at_most(asked, machine, processes):
    """--workers asks for at most that many processes; more than one per 4 cores never run (slower)."""
    assert encode_processes(asked, machine) == processes


@pytest.mark.parametrize("asked, tokens, processes, rule", [
    (16, RECIPE, 4, "one process per 4 cores at most (16 cores here)"),
    (32, EIGHT_TIMES, 16, "one process per core, 16 at most, for a job of 100 M tokens or more (16 cores here)"),
    (8, EIGHT_TIMES, 8, None), (None, EIGHT_TIMES, 16, None)])
def test_what_a_large_job_runs_and_why_not_more(asked, tokens, processes, rule):
    assert encode_processes(asked, 16, tokens) == processes
    if rule is not None:
        assert most_processes_rule(16, tokens) == rule


@pytest.mark.parametrize("text, expected", [("max 100000", 8), ("150000 100000", 2), ("50000 100000", 1),
                                            ("800000 100000", 8), ("garbage", 8)])
def test_a_cgroup_quota_caps_the_cores(tmp_path, monkeypatch, text, expected):
    monkeypatch.delenv("DATABUILD_CORES", raising=False)
    (tmp_path / "cpu.max").write_text(text + "\n")
    monkeypatch.setattr(cores, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert available_cores() == expected


def test_results_cross_from_workers_whole(tiny_config):
    """What a worker sends back (one buffer of ids and one of masks a batch) is every field of every
    result, bad conversations (no tokens) included, in order."""
    from itertools import islice

    import numpy as np

    from databuild.build import prepare
    from databuild.executors.local import from_columns, to_columns
    from databuild.sources.bad import Problem

    with prepare(tiny_config) as prepared:
        results = prepared.encoder.encode_batch(list(islice(prepared.conversations(), 9)))
    bad = results[3].__class__(7, 8, "bad-id", "src", np.zeros(0, np.int32), np.zeros(0, np.int8),
                               Problem("malformed", "why"))
    results = results[:3] + [bad] + results[3:]
    again = from_columns(to_columns(results))
    assert len(again) == len(results) == 10
    for a, b in zip(again, results):
        assert (a.input_ids.dtype, a.loss_mask.dtype) == (np.int32, np.int8)
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.loss_mask.tolist() == b.loss_mask.tolist()
        assert (a.position, a.index, a.id, a.source, a.problem, a.empty_assistant_turns) == \
               (b.position, b.index, b.id, b.source, b.problem, b.empty_assistant_turns)
    assert from_columns(to_columns([])) == []


@pytest.mark.parametrize("cores_, workers, said", [
    ("2", "3", "encoded by: 1 process (the build's own), the tokenizer's threads on every core; --workers 3 asked, "
               "1 runs: one process per 4 cores at most (2 cores here), as more were slower"),
    ("16", "2", "encoded by: 2 processes x 8 tokenizer threads\n")])
def test_make_says_how_it_encoded(tmp_path, cores_, workers, said):
    """What runs is said where the user sees it, a --workers that does not run as asked included."""
    from conftest import REPO, TINY

    env = {**os.environ, "DATABUILD_CORES": cores_}
    env.pop("RAYON_NUM_THREADS", None)
    done = subprocess.run([sys.executable, "-m", "databuild", "make", TINY, "--out", str(tmp_path), "--workers",
                           workers], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert said in done.stdout


def test_workers_get_their_threads_and_the_build_keeps_its_environment(tiny_config, monkeypatch):
    """The tokenizer's threads of a worker are set in the worker; the build's own process is left as it was."""
    from databuild.build import pin
    from databuild.executors.local import LocalEncoding

    monkeypatch.setenv("DATABUILD_CORES", "8")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    with LocalEncoding(pin(tiny_config, offline=True).encoder, 2) as local:
        local.starting.join()
        assert [local.pool.submit(os.getenv, name).result() for name in ("RAYON_NUM_THREADS",
                                                                         "TOKENIZERS_PARALLELISM")] == ["4", "true"]
        assert "RAYON_NUM_THREADS" not in os.environ and "TOKENIZERS_PARALLELISM" not in os.environ


def test_a_builds_end_ends_its_workers_rather_than_waiting_for_their_batches(tiny_config, monkeypatch):
    """Batches still in flight when the encoding ends are of no use: the workers are terminated, not
    left to finish every batch queued to them (shutdown alone lets them, and they exit with 0)."""
    import signal
    from itertools import islice

    from databuild.build import prepare
    from databuild.executors.local import LocalEncoding

    monkeypatch.setenv("DATABUILD_CORES", "8")
    with prepare(tiny_config) as prepared:
        batches = prepared.batches(1, by_reference=True)
        with LocalEncoding(prepared.encoder, 2) as local:
            assert len(list(islice(local.stream(batches), 1))) == 1
            processes = list(local.pool._processes.values())
    assert processes and [p.exitcode for p in processes] == [-signal.SIGTERM] * len(processes)
