"""Shared fixtures and helpers: the repository's tiny config and fixture files, one tiny build per session,
`databuild verify` through click's runner, any command in this process as a process would run it
(databuild_here) or several in one process started with an environment (databuild_in_a_process), a
mask's supervised runs decoded. Helper modules (references
re-implemented without databuild, a stand-in hub, trainers' readers and configuration checks) live in
tests/support/, importable by name."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

REPO = Path(__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support"
sys.path.insert(0, str(SUPPORT))  # the helper modules, imported by name
FIXTURES = REPO / "tests" / "fixtures"
TOKENIZER_DIR = FIXTURES / "muse-tiny-tokenizer"
SOURCE_DIR = FIXTURES / "tulu-tiny"
TINY = "muse-spark-tiny-fixed512-v1"
TINY_CONFIG = REPO / "configs" / f"{TINY}.yaml"
TEMPLATES = FIXTURES / "templates"
# The real Phi-3-mini tokenizer, beside the repository (or a worktree of it) when present: tests on it
# skip cleanly on a fresh clone without it.
PHI3 = next((d / "shared" / "reference-tokenizers" / "phi-3-mini" for d in REPO.parents
             if (d / "shared" / "reference-tokenizers" / "phi-3-mini" / "tokenizer.json").is_file()), None)
needs_phi3 = pytest.mark.skipif(PHI3 is None, reason="the Phi-3 reference tokenizer is not here")
TINY_LOCK = f".{TINY}.lock"  # the output's lock file: it stays, empty, beside the build (publish/lock.py)


@pytest.fixture(scope="session")
def tiny_config():
    from databuild.config import load_config

    return load_config(TINY_CONFIG)


@pytest.fixture(scope="session")
def tiny_build(tiny_config, tmp_path_factory):
    """The tiny config built once with default settings: (BuildResult)."""
    from databuild.build import make

    return make(tiny_config, tmp_path_factory.mktemp("tiny"), progress=False)


@pytest.fixture
def private_tmp(monkeypatch):
    """A $TMPDIR of the test's own (where a build spills), for this process (tempfile caches it) and the
    processes it starts: what a build leaves there is the test's to see, and nothing leaks into /tmp.
    A short path of its own, not under tmp_path: multiprocessing's fork server puts a Unix socket in
    $TMPDIR, whose path may not pass 107 bytes (AF_UNIX), and pytest-xdist's tmp_path is deeper."""
    import shutil
    import tempfile

    _fork_server_outside_private_tmp()
    directory = Path(tempfile.mkdtemp(prefix="databuild-test-"))
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _fork_server_outside_private_tmp() -> None:
    """multiprocessing's fork server serves this test process from its first build to its exit, through a
    socket in the $TMPDIR of its start: started under one test's private_tmp, it would lose its socket when
    that folder goes, and every later build with workers in this process would fail ('the encode processes
    did not start: FileNotFoundError'). Which test starts it first depends on which files this process runs
    (a file alone, a -k selection, pytest-xdist's share), so it is started here first, in the real $TMPDIR."""
    from multiprocessing import forkserver

    from databuild.executors.fork_server import start_resource_tracker, worker_context

    if worker_context().get_start_method() == "forkserver":
        start_resource_tracker()
        forkserver.ensure_running()


@pytest.fixture(scope="session")
def tokenizer():
    from databuild.encode.render import load_tokenizer

    return load_tokenizer(TOKENIZER_DIR)


@pytest.fixture(scope="session")
def source_conversations():
    """Every fixture conversation as (id, messages) in source order, each message a dict in the file's
    key order (content, role), as `datasets` hands it to apply_chat_template."""
    import pyarrow.parquet as pq

    out = []
    for path in sorted((SOURCE_DIR / "data").glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            out.append((row["id"], tuple(row["messages"])))
    return out


def write_config(path: Path, **changes) -> Path:
    """A copy of the tiny config with top-level keys replaced (nested dicts merged), dirs made absolute."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    raw = yaml.load(TINY_CONFIG.read_text())
    raw["source"]["dir"] = str(SOURCE_DIR)
    raw["tokenizer"]["dir"] = str(TOKENIZER_DIR)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
            raw[key] = {k: v for k, v in raw[key].items() if v is not None}
        elif value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    with open(path, "w") as handle:
        yaml.dump(raw, handle)
    return path


def messages(*pairs: tuple[str, str]) -> tuple[dict, ...]:
    """Messages from (role, content) pairs, in the Tulu schema's key order."""
    return tuple({"content": content, "role": role} for role, content in pairs)


# Cases the fuzz and property tests ran, by group and outcome (built, refused, examples): printed at the end
# of the run, and written as JSON to $DATABUILD_CASES_REPORT when it is set.
CASE_COUNTS: defaultdict[str, Counter] = defaultdict(Counter)


def record_count(group: str, outcome: str) -> None:
    CASE_COUNTS[group][outcome] += 1


def pytest_sessionfinish(session):
    """Under pytest-xdist each test process counts its own cases: it hands them to the controller."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["case_counts"] = json.dumps(CASE_COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller adds up the cases of each test process as it finishes (pytest-xdist's hook)."""
    for group, counts in json.loads(getattr(node, "workeroutput", {}).get("case_counts", "{}")).items():
        CASE_COUNTS[group].update(counts)


def pytest_terminal_summary(terminalreporter):
    if not CASE_COUNTS:
        return
    terminalreporter.section("generated cases")
    for group, counts in sorted(CASE_COUNTS.items()):
        terminalreporter.write_line(f"{group}: {sum(counts.values())} tried ("
                                    + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) + ")")
    if os.environ.get("DATABUILD_CASES_REPORT"):
        Path(os.environ["DATABUILD_CASES_REPORT"]).write_text(json.dumps(CASE_COUNTS, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def sixteen_cores(monkeypatch):
    """A build runs one encode process below 4 cores, one per core from 4 on (executors/cores.py): tests
    that ask for --workers 2 to 16 say the machine has 16 cores, so that those run as that many processes
    on any machine, CI's 2 cores included (its subprocesses inherit it), and a build without --workers
    runs 16, as on a 16-core node. Without it the default is what the machine gives (1 process on 2
    cores), which tests that patch the encoder in this process rely on."""
    monkeypatch.setenv("DATABUILD_CORES", "16")


def verify_cli(*args):
    """`databuild verify ARGS` as the command runs it: its result, never a traceback."""
    from databuild.cli import main

    result = CliRunner().invoke(main, ["verify", *map(str, args)])
    assert "Traceback" not in result.output, result.output
    return result


def run(*args):
    """`databuild ARGS` through click's CliRunner, in this process: its result (exit code, output)."""
    from databuild.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def databuild_here(*args, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`databuild ARGS` run from `cwd` as `python -m databuild` runs it, but in this process, through click's
    CliRunner: its exit status, stdout and stderr. A process of its own pays ~2 CPU s to start and import,
    most of what a command on the fixtures costs. An exception the command lets through (a traceback in a
    process of its own) is raised here. For tests of what a command does; those of the process itself (its
    signals, its environment, its start, a hang to bound) run `python -m databuild`."""
    from contextlib import chdir

    from databuild.cli import main

    with chdir(cwd):
        result = CliRunner().invoke(main, [str(a) for a in args], prog_name="databuild")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["databuild", *map(str, args)], result.exit_code, result.stdout, result.stderr)


# databuild_in_a_process's script: each command run as databuild_here runs it, its result (or the traceback of
# an exception it let through, as a process of its own would print it) written as JSON.
_COMMANDS = """
import contextlib, json, sys, traceback
from click.testing import CliRunner
from databuild.cli import main
out = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(main, args, prog_name="databuild")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    out.append([result.exit_code, result.stdout, stderr])
print(json.dumps(out))
"""


def databuild_in_a_process(*commands, env: dict, cwd: Path) -> list[subprocess.CompletedProcess]:
    """Each command (a sequence of `databuild` arguments) run in turn from `cwd` in one process of its own,
    started with the environment `env` (read at its start, as huggingface_hub reads HF_HUB_CACHE and
    HF_HUB_OFFLINE), through click's CliRunner as databuild_here runs one: their exit statuses, stdouts and
    stderrs (with the traceback of an exception a command let through), one start and import for all."""
    args = [[str(a) for a in command] for command in commands]
    done = subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return [subprocess.CompletedProcess(["databuild", *command], *result)
            for command, result in zip(args, json.loads(done.stdout.splitlines()[-1]))]


BFD_WINDOW = 64  # 300 fixture conversations: several windows, the last one partly used


@pytest.fixture(scope="module")
def bfd_config(tmp_path_factory):
    """The tiny config with `packing: bfd` (window BFD_WINDOW)."""
    from databuild.config import load_config

    return load_config(write_config(tmp_path_factory.mktemp("bfd") / "bfd.yaml", packing="bfd",
                                    packing_window=BFD_WINDOW))


@pytest.fixture(scope="module")
def bfd_build(bfd_config, tmp_path_factory):
    """bfd_config built, once per test module."""
    from databuild.build import make

    return make(bfd_config, tmp_path_factory.mktemp("bfd-out"), progress=False)


def supervised_runs(tokenizer, ids, mask) -> list[str]:
    """The decoded text of each maximal run of supervised tokens."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    return [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)
            for a, b in zip(edges[::2], edges[1::2])]


@pytest.fixture(scope="session")
def tools_tokenizer(tmp_path_factory) -> Path:
    """The fixture tokenizer with the Qwen-style template that renders tools, tool calls, tool results
    and <think> reasoning, with generation tags (tests/fixtures/templates/qwen_tools_think.jinja)."""
    directory = tmp_path_factory.mktemp("tok") / "qwen-tools"
    shutil.copytree(TOKENIZER_DIR, directory)
    shutil.copy(TEMPLATES / "qwen_tools_think.jinja", directory / "chat_template.jinja")
    return directory
