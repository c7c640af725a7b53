"""How a build shares the cores: the cores counted, the default --workers, the tokenizer's threads per worker."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import pytest

from databuild.utils import machine as cores_here
from databuild.errors import BuildError
from databuild.executors.cores import default_workers, encode_processes, most_processes_rule, threads_per_worker
from databuild.utils.machine import available_cores


@pytest.mark.parametrize("machine, workers", [(1, 1), (2, 1), (3, 1), (4, 4), (7, 7), (8, 8), (12, 12), (16, 16),
                                              (17, 16), (64, 16), (200, 16)])
def test_default_workers(machine, workers):
    """Below 4 cores the build's own process (a second was no faster on 2 cores); from 4 on, one
    process per core, 16 at most (bench/README.md, "Cores")."""
    assert default_workers(machine) == workers
    assert threads_per_worker(workers, machine, environ={}) == machine // workers


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
           "from databuild.utils.machine import available_cores; print(available_cores())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1"
    assert available_cores() == len(os.sched_getaffinity(0)) or cores_here.CGROUP_CPU_MAX.exists()


def test_databuild_cores_says_how_many(monkeypatch):
    assert available_cores({"DATABUILD_CORES": "3"}) == 3
    for value in ("0", "all", ""):
        with pytest.raises(BuildError, match=f"DATABUILD_CORES={value!r}"):
            available_cores({"DATABUILD_CORES": value})


@pytest.mark.parametrize("asked, machine, processes", [(None, 2, 1), (2, 2, 1), (16, 2, 1), (2, 3, 1), (2, 4, 2),
                                                       (None, 4, 4), (2, 8, 2), (16, 8, 8), (None, 16, 16), (1, 16, 1),
                                                       (3, 16, 3), (32, 16, 16), (None, 64, 16), (64, 64, 16)])
def test_processes_are_the_default_at_most(asked, machine, processes):
    """--workers asks for at most that many processes; more than the default never run (slower)."""
    assert encode_processes(asked, machine) == processes


@pytest.mark.parametrize("machine, rule", [(2, "one process below 4 cores (2 here)"),
                                           (16, "one process per core, 16 at most (16 cores here)")])
def test_why_no_more_processes_run(machine, rule):
    assert most_processes_rule(machine) == rule


@pytest.mark.parametrize("text, expected", [("max 100000", 8), ("150000 100000", 2), ("50000 100000", 1),
                                            ("800000 100000", 8), ("garbage", 8)])
def test_a_cgroup_quota_caps_the_cores(tmp_path, monkeypatch, text, expected):
    monkeypatch.delenv("DATABUILD_CORES", raising=False)
    (tmp_path / "cpu.max").write_text(text + "\n")
    monkeypatch.setattr(cores_here, "CGROUP_CPU_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert available_cores() == expected


def test_results_cross_from_workers_whole(tiny_config):
    """What a worker sends back (one buffer of ids and one of masks a batch) is every field of every
    result, bad conversations (no tokens) included, in order."""
    from dataclasses import replace
    from itertools import islice

    import numpy as np

    from databuild.prepare import prepare
    from databuild.executors.workers import from_columns, to_columns
    from databuild.records.origin import Origin
    from databuild.records.problems import Problem

    with prepare(tiny_config) as prepared:
        results = prepared.encoder.encode_batch(list(islice(prepared.conversations(), 9)))
    bad = results[3].__class__(Origin(7, 8, "bad-id", "src"), np.zeros(0, np.int32), np.zeros(0, np.int8),
                               Problem("malformed", "why"))
    # every other field its own value, so that one read back into another's place is seen
    varied = replace(results[0], problem=None, empty_assistant_turns=2, unclosed_turns=3, prompt_tokens_differ=4,
                     part=1, parts=5, turns_not_trained=6, samples_not_written=7)
    results = results[:3] + [bad, varied] + results[3:]
    again = from_columns(to_columns(results))
    assert len(again) == len(results) == 11
    for a, b in zip(again, results):
        assert (a.input_ids.dtype, a.loss_mask.dtype) == (np.int32, np.int8)
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.loss_mask.tolist() == b.loss_mask.tolist()
        assert replace(a, input_ids=None, loss_mask=None) == replace(b, input_ids=None, loss_mask=None)
    assert from_columns(to_columns([])) == []


@pytest.mark.parametrize("cores_, workers, said", [
    ("2", "3", "encoded by: 1 process (the build's own), the tokenizer's threads on every core; --workers 3 asked, "
               "1 runs: one process below 4 cores (2 here), as more were slower"),
    ("16", "2", "encoded by: 2 processes x 8 tokenizer threads\n"),
    ("16", "20", "encoded by: 16 processes x 1 tokenizer thread; --workers 20 asked, 16 run: one process per core, "
                 "16 at most (16 cores here), as more were slower")])
def test_make_says_how_it_encoded(tmp_path, monkeypatch, cores_, workers, said):
    """What runs is said where the user sees it, a --workers that does not run as asked included."""
    from conftest import TINY, databuild_here

    monkeypatch.setenv("DATABUILD_CORES", cores_)
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    done = databuild_here("make", TINY, "--out", tmp_path, "--workers", workers)
    assert done.returncode == 0, done.stderr
    assert said in done.stdout


def test_workers_get_their_threads_and_the_build_keeps_its_environment(tiny_config, monkeypatch):
    """The tokenizer's threads of a worker are set in the worker; the build's own process is left as it was."""
    from databuild.prepare import pin
    from databuild.executors.local import LocalEncoding

    monkeypatch.setenv("DATABUILD_CORES", "8")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    with LocalEncoding(pin(tiny_config, offline=True).encoder, 2) as local:
        local.starting.join()
        assert [local.pool.submit(os.getenv, name).result() for name in ("RAYON_NUM_THREADS",
                                                                         "TOKENIZERS_PARALLELISM")] == ["4", "true"]
        assert "RAYON_NUM_THREADS" not in os.environ and "TOKENIZERS_PARALLELISM" not in os.environ


class SetAfter:
    """An Event as a worker sees it, set once it has been asked `calls` times."""

    def __init__(self, calls: int):
        self.calls, self.asked = calls, 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.calls


@pytest.mark.parametrize("checks, conversations", [(0, 0), (1, 0), (2, 2), (3, 4), (10**6, 8)])
def test_a_worker_stops_its_batch_between_parts_once_the_build_has_ended(tiny_config, monkeypatch, checks,
                                                                          conversations):
    """A batch of 8 in 4 parts of 2, the build's end looked at once for the batch, then before each
    part: seen at the batch's start, nothing is encoded; seen after k parts, only those k parts; never,
    all of it. What the build's end waits for is at most the part each worker is encoding (end_pool)."""
    from databuild.prepare import prepare
    from databuild.executors import workers as local

    with prepare(tiny_config) as prepared:
        batch = list(islice(prepared.conversations(), 8))
        monkeypatch.setattr(local, "_worker_encoder", prepared.encoder)
        monkeypatch.setattr(local, "_worker_ended", SetAfter(checks))
        lengths, ids, mask, scalars = local.encode_in_worker(batch)
    assert len(lengths) == len(scalars) == conversations
    expected = list(prepared.encoder.encode_batch(batch[:conversations])) if conversations else []
    assert ids.tolist() == [t for r in expected for t in r.input_ids.tolist()]


def test_a_builds_end_leaves_its_workers_to_exit_on_their_own(tiny_config, monkeypatch):
    """Batches still in flight when the encoding ends are not waited for, and the workers are not
    killed for it (one killed mid-write would leave the pool waiting on its pipe): they exit with 0."""
    from databuild.prepare import prepare
    from databuild.executors.local import LocalEncoding

    monkeypatch.setenv("DATABUILD_CORES", "8")
    with prepare(tiny_config) as prepared:
        batches = prepared.batches(1, by_reference=True)
        with LocalEncoding(prepared.encoder, 2) as local:
            assert len(list(islice(local.stream(batches), 1))) == 1
            processes = list(local.pool._processes.values())
    assert processes and [p.exitcode for p in processes] == [0] * len(processes)


def test_a_closed_stream_stops_its_batches_in_flight_and_the_next_stream_encodes_them_all(tiny_config, monkeypatch):
    """Closing a stream (the build has its rows) stops the batches still in flight (the workers leave their
    cores to the build's end), and a second stream on the same workers (the training build after its
    validation file's) encodes every batch, as one process does."""
    from databuild.prepare import prepare
    from databuild.executors.local import LocalEncoding
    from databuild.executors.stream import overlapped

    monkeypatch.setenv("DATABUILD_CORES", "8")
    with prepare(tiny_config) as prepared:
        expected = [(t.origin.id, t.input_ids.tolist()) for t in overlapped(prepared.batches(2, False), prepared.encoder)]
        with LocalEncoding(prepared.encoder, 2) as local:
            futures = []
            submit = local.pool.submit

            def recorded(*args):
                futures.append(submit(*args))
                return futures[-1]

            monkeypatch.setattr(local.pool, "submit", recorded)
            first = local.stream(prepared.batches(2, by_reference=True))
            assert len(list(islice(first, 1))) == 1
            first.close()
            assert local.ended.is_set() and len(futures) > 1
            again = [(t.origin.id, t.input_ids.tolist()) for t in local.stream(prepared.batches(2, by_reference=True))]
    assert again == expected


# A build's process, its encoding started: it prints its workers' pids, and waits to be killed.
HOLDING_WORKERS = """
import sys, time
from databuild.prepare import pin
from databuild.config import load_config
from databuild.executors.local import LocalEncoding
with LocalEncoding(pin(load_config(sys.argv[1]), offline=True).encoder, 2) as local:
    local.starting.join()
    print(*local.pool._processes, flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:  # a zombie has exited (in a container nobody may reap it)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes' states from /proc")
def test_workers_exit_when_the_build_is_killed(private_tmp):
    """Workers ignore the signals that stop a build (their build stops them), so a build killed outright
    (SIGKILL, the OOM killer) must not leave them behind: its end of their lifeline closes, and they exit."""
    from conftest import REPO, TINY_CONFIG

    child = subprocess.Popen([sys.executable, "-c", HOLDING_WORKERS, str(TINY_CONFIG)], cwd=REPO, text=True,
                             env={**os.environ, "DATABUILD_CORES": "8"}, stdout=subprocess.PIPE)
    workers = [int(pid) for pid in child.stdout.readline().split()]
    assert len(workers) == 2 and all(_running(pid) for pid in workers)
    child.kill()
    child.wait()
    deadline = time.monotonic() + 120  # a poll: on a loaded machine the workers may take a while to be run
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers)


def test_workers_start_from_the_fork_server_with_the_shared_imports_loaded(tiny_config, monkeypatch):
    """Workers are forked from multiprocessing's fork server, which imported what every worker needs
    (transformers above all) once: a worker's parent is that server, not the build's process, and
    the shared modules were there before the worker's own start ran."""
    import multiprocessing.forkserver

    from databuild.prepare import pin
    from databuild.executors.local import LocalEncoding

    monkeypatch.setenv("DATABUILD_CORES", "8")
    with LocalEncoding(pin(tiny_config, offline=True).encoder, 2) as local:
        local.starting.join()
        parent = local.pool.submit(os.getppid).result()
        assert parent != os.getpid() and parent == multiprocessing.forkserver._forkserver._forkserver_pid
    server_maps = f"/proc/{parent}/maps"
    if os.path.exists(server_maps):  # the server's mapped libraries: the tokenizer's, not arrow's
        maps = open(server_maps).read()
        assert "tokenizers" in maps and "libarrow" not in maps


def test_a_worker_with_another_transformers_than_the_build_is_refused_in_one_line(tmp_path, private_tmp):
    """The fork server imports the shared modules with its own sys.path (CPython's forkserver ignores the
    parent's): a build whose process took jinja2 from elsewhere (a copy first on its sys.path) must not
    encode with the server's. make fails in one line naming the module and both files."""
    import jinja2

    from conftest import REPO, TINY

    shadow = tmp_path / "shadow"
    shutil.copytree(Path(jinja2.__file__).parent, shadow / "jinja2")
    script = (f"import sys; sys.path.insert(0, {str(shadow)!r}); sys.argv = ['databuild', 'make', {TINY!r}, "
              f"'--out', {str(tmp_path / 'out')!r}, '--workers', '2']; from databuild.cli import main; main()")
    env = {**os.environ, "DATABUILD_CORES": "16"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done
    assert done.stderr.count("\n") == 1, done.stderr
    assert (f"error: an encode process imported jinja2 from {Path(jinja2.__file__)}, the build's process from "
            f"{shadow / 'jinja2' / '__init__.py'}") in done.stderr
    assert not (tmp_path / "out" / "muse-spark-tiny-fixed512-v1.parquet").exists()


def test_a_long_tmpdir_builds_with_spawned_workers(tmp_path, tiny_build):
    """The fork server's Unix socket lives under $TMPDIR and its path may not pass 107 bytes: under a
    longer $TMPDIR (a deep scratch folder) the workers are spawned instead, and the build is the same.
    In a process of its own: the test session's fork server, once started, serves every later build."""
    from conftest import REPO, TINY

    deep = tmp_path / ("scratch-" + "d" * 40) / ("job-" + "e" * 40)
    deep.mkdir(parents=True)
    assert len(os.fsencode(str(deep))) > 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")
    done = subprocess.run([sys.executable, "-m", "databuild", "make", TINY, "--out", str(tmp_path / "out"),
                           "--workers", "2"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "DATABUILD_CORES": "8", "TMPDIR": str(deep)})
    assert done.returncode == 0, done.stderr
    assert "2 processes" in done.stdout + done.stderr
    assert (tmp_path / "out" / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()


def test_first_batches_are_smaller_for_each_process():
    """A stream's first batches: one of size // 8 per process, one of size // 2 per process, then `size`
    (never below one conversation), so that every process has a first result early."""
    from databuild.executors.stream import batch_sizes

    assert list(islice(batch_sizes(256, 3), 8)) == [32] * 3 + [128] * 3 + [256] * 2
    assert list(islice(batch_sizes(5, 2), 6)) == [1, 1, 2, 2, 5, 5]
    assert list(islice(batch_sizes(1, 1), 3)) == [1, 1, 1]


START_EARLY = """
import sys, threading
from multiprocessing import forkserver
from databuild.executors import start_early
start_early(sys.argv[1], int(sys.argv[2]))
for thread in threading.enumerate():
    if thread.name == "databuild-start-fork-server":
        thread.join()
print(forkserver._forkserver._forkserver_pid is not None)
"""


@pytest.mark.parametrize("executor, workers, started", [("local", 4, True), ("local", 1, False), ("ray", 4, False)])
def test_the_fork_server_starts_before_the_pin_where_workers_will_run(executor, workers, started):
    """make starts the workers' fork server first, so that its imports overlap the pin; only where the
    build will fork local workers."""
    out = subprocess.run([sys.executable, "-c", START_EARLY, executor, str(workers)], capture_output=True, text=True,
                         env={**os.environ, "DATABUILD_CORES": "8"}, check=True)
    assert out.stdout.strip() == str(started), out.stderr


CLI_STARTS_EARLY = """
import sys
import databuild.executors.fork_server as fork_server
from databuild.cli import main
started = fork_server.start_fork_server
def noted():
    print("fork server started; config read:", "pyarrow" in sys.modules, flush=True)
    return started()
fork_server.start_fork_server = noted
main(sys.argv[1:])
"""


@pytest.mark.parametrize("there, force, started", [
    (None, False, "config read: False"),  # no build in --out: it builds, whatever the config's name
    ("same", True, "config read: False"),  # --force: it builds
    ("other", False, "config read: True"),  # another config's build: once the config names its own
    ("same", False, None),  # the config's build: it may be up to date (it is), and forks nothing then
])
def test_databuild_make_starts_the_fork_server_before_the_config_and_the_builds_imports(tmp_path, tiny_build, there,
                                                                                         force, started):
    """`databuild make` starts the workers' fork server before it reads the config (the sources' formats,
    pyarrow) and imports the build, once it knows it builds: --force, or no build of any name in
    --out; else once the config names its output and no build of that name is there. Not when the
    config's build is there: it may be up to date, and make then returns without any worker."""
    from conftest import TINY

    out = tmp_path / "out"
    if there is not None:
        out.mkdir()
        for built in (tiny_build.parquet, tiny_build.manifest):
            name = built.name if there == "same" else built.name.replace(TINY, "another-build")
            (out / name).write_bytes(built.read_bytes())
    done = subprocess.run([sys.executable, "-c", CLI_STARTS_EARLY, "make", TINY, "--offline", "--out", str(out)]
                          + ["--force"] * force, capture_output=True, text=True,
                          env={**os.environ, "DATABUILD_CORES": "8"})
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("fork server started")]
    assert lines[:1] == ([f"fork server started; {started}"] if started else []), done.stdout
    assert "built: " in done.stdout if started else "up to date" in done.stdout


def test_no_module_a_build_imports_makes_an_arrow_array_at_import():
    """pyarrow imports pandas (~0.3 s) at its first array built from Python objects. No module of the
    command's or the build's makes one at import, so that a build does that import on a thread of its own
    while its source hashes (utils/early.py), not in its process's start."""
    from conftest import REPO

    out = subprocess.run([sys.executable, "-c", "import sys, databuild.cli, databuild.build, databuild.cli_make; "
                          "print('pandas' in sys.modules)"], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"], out.stderr


def test_the_tokenizers_loader_takes_its_config_without_importing_pyarrow(tiny_config):
    """The tokenizer's loader (executors/loader.py) is on the way to every worker's first batch: it
    imports its module and unpickles the build's config, and neither imports pyarrow (~0.1 s there, with
    its compute functions more): the config names the record's values (sources/record.py), not its Arrow
    types (sources/record_arrow.py)."""
    from conftest import REPO

    pickled = pickle.dumps(tiny_config)
    out = subprocess.run([sys.executable, "-c", "import pickle, sys; import databuild.executors.loader; "
                          "config = pickle.loads(sys.stdin.buffer.read()); "
                          "print(type(config).__name__, 'pyarrow' in sys.modules)"],
                         input=pickled, cwd=REPO, capture_output=True, check=True)
    assert out.stdout.decode().split() == ["BuildConfig", "False"], out.stderr.decode()


LOADED_ELSEWHERE = """
import sys, tempfile
from pathlib import Path
from databuild.build import make
from databuild.config import load_config
result = make(load_config(sys.argv[1]), Path(tempfile.mkdtemp()), offline=True, workers=int(sys.argv[2]),
              progress=False)
print(result.data["output"]["rows_sha256"], "transformers" in sys.modules)
"""


@pytest.mark.parametrize("workers, imported", [(2, False), (1, True)])
def test_with_workers_the_tokenizer_loads_in_a_child_and_the_rows_are_the_same(tiny_build, workers, imported):
    """Where a build forks encode processes, its tokenizer loads in a child of their fork server
    (executors/loader.py), so that the build's process, which reads the source meanwhile, never imports
    transformers; with one process it loads there. The rows are the same either way."""
    from conftest import REPO, TINY

    out = subprocess.run([sys.executable, "-c", LOADED_ELSEWHERE, str(REPO / "configs" / f"{TINY}.yaml"),
                          str(workers)], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "DATABUILD_CORES": "8"}, check=True)
    assert out.stdout.split() == [tiny_build.data["output"]["rows_sha256"], str(imported)], out.stderr


def test_a_child_with_other_packages_than_the_build_loads_nothing():
    """The tokenizer's loader, like a worker, refuses to hand the build an encoder made with another
    transformers than the build's process would import (the fork server's own sys.path)."""
    from databuild.executors.loader import _loaded_pickled
    from databuild.executors.fork_server import expected_origins

    here = expected_origins()
    assert set(here) == {"numpy", "tokenizers", "jinja2", "transformers"}
    assert _loaded_pickled(here, lambda: (1, [2]))[0] == 1
    elsewhere = {**here, "jinja2": "/elsewhere/jinja2/__init__.py"}
    with pytest.raises(BuildError, match="imported jinja2 from .* the build's process from /elsewhere/jinja2"):
        _loaded_pickled(elsewhere, lambda: (1, [2]))


def test_an_encoder_passed_on_is_sent_as_it_came_and_its_tokenizer_built_only_where_it_encodes(tiny_config,
                                                                                                 monkeypatch):
    """The build's process unpickles the encoder its tokenizer's loader sends (for its pins) and pickles it
    again for its workers. Neither step builds the tokenizer (~0.2 s of the GIL, which the source pass's
    threads share, on the way to the workers): the bytes go on as they came. A worker builds it, once,
    and encodes as the encoder that was pickled."""
    import pickle

    import tokenizers

    from databuild.prepare import prepare

    built, tokenizer = [], tokenizers.Tokenizer

    class Counted:
        @staticmethod
        def from_str(text):
            built.append(len(text))
            return tokenizer.from_str(text)

    with prepare(tiny_config) as prepared:
        batch = list(islice(prepared.conversations(), 8))
        encoder = prepared.encoder
    sent = pickle.dumps(encoder)
    monkeypatch.setattr(tokenizers, "Tokenizer", Counted)
    passed_on = pickle.loads(sent)
    # the tokenizer's JSON as it came (the pickles themselves may differ: a frozenset's order is the hash's)
    again = pickle.loads(pickle.dumps(passed_on))
    assert built == [] and again.__getstate__()["backend_json"] == encoder.__getstate__()["backend_json"]
    in_worker = pickle.loads(pickle.dumps(passed_on))
    got, expected = in_worker.encode_batch(batch), encoder.encode_batch(batch)
    assert len(built) == 1
    assert [(t.input_ids.tolist(), t.loss_mask.tolist()) for t in got] == \
        [(t.input_ids.tolist(), t.loss_mask.tolist()) for t in expected]
    in_worker.encode_batch(batch)
    assert len(built) == 1


def test_an_encode_process_never_imports_pandas(tiny_config, monkeypatch):
    """pyarrow imports pandas at a process's first array to or from numpy (~0.5 s): the workers read their
    batches from the spill without one, so that each does not spend it at its first batch, all at once,
    when the build's encoding starts. Every worker is asked, after each has encoded batches."""
    assert not any(_every_worker_answers(tiny_config, monkeypatch, "pandas", encode_first=True).values())


def test_an_encode_process_imports_the_spills_reader_before_its_first_batch(tiny_config, monkeypatch):
    """A worker imports what reads its batches from the spill (pyarrow and its compute functions) while it
    waits for the encoder, not when its first batch arrives: every worker is asked before any batch."""
    assert all(_every_worker_answers(tiny_config, monkeypatch, "databuild.sources.spilled").values())


def _every_worker_answers(config, monkeypatch, module: str, encode_first: bool = False) -> dict[int, bool]:
    """Whether each of two workers has imported `module` (by pid), asked until both have answered; with
    `encode_first`, once the stream has been encoded."""
    from databuild.executors.local import LocalEncoding
    from databuild.prepare import prepare

    monkeypatch.setenv("DATABUILD_CORES", "8")
    with prepare(config) as prepared:
        with LocalEncoding(prepared.encoder, 2) as local:
            if encode_first:
                assert sum(1 for _ in local.stream(prepared.batches(2, by_reference=True))) > 0
            seen: dict[int, bool] = {}
            for _ in range(400):  # until each worker has answered
                seen.update([local.pool.submit(_imported, module).result()])
                if len(seen) == 2:
                    break
            workers = {p.pid for p in local.pool._processes.values()}
    assert set(seen) == workers, seen
    return seen


def _imported(module: str) -> tuple[int, bool]:
    time.sleep(0.01)  # so that one worker does not take every call
    return os.getpid(), module in sys.modules
