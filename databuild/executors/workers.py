"""The worker processes' lifecycle and wire format: how they start (forked from multiprocessing's fork
server, which imports what they need once: a spawned worker spent ~1 CPU s importing it), what each
does with a batch (its own tokenizer threads overlapped with its Python, in WORKER_PARTS), what
crosses back to the driver (`to_columns`), and how they stop with the build (`end_pool`).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import fields
from itertools import takewhile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..encode.encoder import Encoder
from ..errors import BuildError
from ..records.conversation import Conversation, TokenizedConversation
from ..records.origin import Origin
from .stream import batches, overlapped

if TYPE_CHECKING:
    from ..sources.spilled import SpilledBatch


# A worker's batch is encoded in this many parts, overlapped as in one process: the worker's tokenizer
# threads tokenize part k+1 while its Python masks part k, so they do not wait for each other.
WORKER_PARTS = 4
_worker_encoder: Encoder | None = None  # in a worker process: the one the pool was started with
_worker_problem: str | None = None  # in a worker process: why it must not encode (_imported_elsewhere)
_worker_ended = None  # in a worker process: the build's Event, set when its encoding ends (end_pool)

# What every worker imports and what takes most of its start (~0.8 of ~1 CPU s measured here, transformers
# above all, numpy with it): imported once, by the fork server, whose forked children (the workers) start
# with them. Not pyarrow: importing it starts jemalloc's background thread, and forking a process that runs
# other threads is how allocator deadlocks happen; a worker imports it itself (0.03 s).
SHARED_IMPORTS = ("numpy", "tokenizers", "jinja2", "transformers.utils.chat_template_utils")


# The fork server listens on a Unix socket at $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX (multiprocessing's
# names), and a Unix socket's path holds at most 107 bytes: a longer $TMPDIR than this leaves no room.
FORK_SERVER_TMPDIR_BYTES = 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from multiprocessing's fork server, which imports SHARED_IMPORTS
    once and never runs a tokenizer (the Rust thread pool does not survive a fork, so the build's own
    process must not be forked); spawned, each importing everything, where there is no fork server or
    where $TMPDIR's path is too long for its socket (the build is the same, its workers slower to start)."""
    if "forkserver" not in multiprocessing.get_all_start_methods() or \
            len(os.fsencode(tempfile.gettempdir())) > FORK_SERVER_TMPDIR_BYTES:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(SHARED_IMPORTS))
    return context


def start_fork_server() -> bool:
    """Starts the fork server now, on a thread of its own, so that its imports (SHARED_IMPORTS, ~1 CPU s)
    run on another core while the build's process pins its inputs, rather than once the build's encoding
    starts; the pool's start then only waits for what is left of it. The resource tracker (which the fork
    server starts first) is started with SIGHUP blocked, as ever. False where workers are spawned."""
    context = worker_context()
    if context.get_start_method() != "forkserver":
        return False
    from multiprocessing import forkserver

    def start() -> None:
        try:
            start_resource_tracker()
            forkserver.ensure_running()
        except Exception:  # the pool's own start tries again, and says what fails
            pass

    threading.Thread(target=start, name="databuild-start-fork-server", daemon=True).start()
    return True


def start_worker(encoder_file: str, written, threads: int, origins: dict[str, str], ended, lifeline) -> None:
    global _worker_encoder, _worker_problem, _worker_ended
    # The build's process stops its workers itself (`ended`, then the pool's shutdown: end_pool): a worker
    # killed by the process group's signal (Ctrl-C, a scheduler's SIGTERM) while writing a result into the
    # pool's shared pipe would leave part of a message there, which the pool's reader in the build's
    # process would wait on for good. Should the build's process die without stopping them (SIGKILL, the
    # OOM killer), its end of `lifeline` closes, and they exit.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    threading.Thread(target=_exit_with_the_build, args=(lifeline,), name="databuild-lifeline", daemon=True).start()
    _worker_ended = ended
    # Set here, in the worker, before its tokenizer's thread pool starts (at its first batch), so that
    # the build's own process keeps its environment.
    os.environ.update(RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true" if threads > 1 else "false")
    _worker_problem = imported_elsewhere(origins)
    # The workers start while the tokenizer still loads (executors/loader.py) and wait here for its
    # encoder's file, `written` once it is there, or once the build ends without one.
    written.wait()
    try:
        _worker_encoder = pickle.loads(Path(encoder_file).read_bytes())
    except FileNotFoundError:  # the build ended (stopped, or its encoder failed) without writing it: nothing to do
        os._exit(0)
    # Compiling the templates now (cheap once the fork server has imported transformers), not at the
    # first batch, when every worker would do it at once with the driver waiting.
    _worker_encoder.renderer.compile()


def _exit_with_the_build(lifeline: Connection) -> None:
    lifeline.poll(None)  # readable only at its end: the build's process, which holds the other end, is gone
    os._exit(0)


def expected_origins() -> dict[str, str]:
    """Where the build's process takes (or would take) each package of SHARED_IMPORTS from, found without
    importing it: its own process may never import transformers (executors/loader.py)."""
    found = {}
    for name in dict.fromkeys(name.partition(".")[0] for name in SHARED_IMPORTS):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            found[name] = spec.origin
    return found


def imported_elsewhere(origins: dict[str, str]) -> str | None:
    """Whether this child (a worker, the tokenizer's loader) has a package of SHARED_IMPORTS from another
    file than the build's process (`origins`: expected_origins there): the fork server imports them with
    its own sys.path (CPython's forkserver does not apply the parent's), and a child rendering or
    tokenizing with another transformers than the build's must not run."""
    for name, path in origins.items():
        here = getattr(sys.modules.get(name), "__file__", None)
        if here is not None and here != path:
            return (f"an encode process imported {name} from {here}, the build's process from {path}: "
                    f"run the build with that module first on the default path (PYTHONPATH), or --workers 1")
    return None


def ready() -> None:
    """A worker's first call: returns once the worker has started (imports done, encoder received)."""
    if _worker_problem is not None:
        raise BuildError(_worker_problem)


def encode_in_worker(batch: list[Conversation] | SpilledBatch) -> tuple:
    ready()
    if _worker_ended.is_set():  # queued before the build's encoding ended: of no use now
        return to_columns([])
    conversations = batch if isinstance(batch, list) else batch.read()  # a reference into the spill: read here
    parts = batches(conversations, max(1, -(-len(conversations) // WORKER_PARTS)))
    # The build's end stops a batch between its parts: what it waits for is at most a part per worker.
    return to_columns(list(overlapped(takewhile(lambda _: not _worker_ended.is_set(), parts), _worker_encoder)))


_ARRAYS = ("input_ids", "loss_mask")
_SCALARS = tuple(f.name for f in fields(TokenizedConversation) if f.name not in _ARRAYS + ("origin",))
_ORIGIN = tuple(f.name for f in fields(Origin))


def to_columns(results: list[TokenizedConversation]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple]]:
    """A batch's results as what crosses from a worker to the driver: the lengths, every token id and
    every mask value in one array each, and the other fields as tuples, the origin's four first, flat. The
    driver unpickles two buffers a batch rather than two arrays a conversation (its time is the ceiling of
    the build), and plain values rather than an object a conversation."""
    lengths = np.fromiter((len(r.input_ids) for r in results), dtype=np.int64, count=len(results))
    ids = np.concatenate([r.input_ids for r in results] or [np.zeros(0, dtype=np.int32)])
    mask = np.concatenate([r.loss_mask for r in results] or [np.zeros(0, dtype=np.int8)])
    return lengths, ids, mask, [tuple(getattr(r.origin, name) for name in _ORIGIN) +
                                tuple(getattr(r, name) for name in _SCALARS) for r in results]


def from_columns(columns: tuple) -> list[TokenizedConversation]:
    """The results of `to_columns` again, each conversation's arrays a view of the batch's."""
    lengths, ids, mask, scalars = columns
    ends = np.cumsum(lengths).tolist()
    at = len(_ORIGIN)
    return [TokenizedConversation(Origin(*values[:at]), ids[low:high], mask[low:high],
                                  **dict(zip(_SCALARS, values[at:])))
            for values, low, high in zip(scalars, [0] + ends[:-1], ends)]


def start_resource_tracker() -> None:
    """multiprocessing's resource tracker, started now with SIGHUP blocked: it ignores SIGINT and
    SIGTERM but not SIGHUP, so a terminal's hang-up sent to the process group would kill it, and it
    would fill stderr with its complaints while the build stops. The mask is this thread's, and
    restored at once; a SIGHUP meanwhile waits, and is handled then."""
    from multiprocessing import resource_tracker

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def end_pool(pool: ProcessPoolExecutor, ended) -> None:
    """Ends the pool without letting its workers finish the batches they hold: when the build ends (its
    rows written, or it failed or was stopped) what is in flight is of no use, and shutdown() alone would
    wait for every batch already queued to a worker, up to two each (0.4-0.6 s measured at the end of a
    2-process build here; a batch on one tokenizer thread takes ~0.4 s on a 16-core node). With `ended`
    set, a worker stops its batch at the end of the part it is encoding and returns what it has, and
    takes the batches queued after it without encoding them. The workers are not terminated: one killed
    while it writes a result into the pool's shared pipe would leave the pool's reader waiting for the
    rest of the message, and shutdown() with it, for good (seen with 16 workers on 16 cores)."""
    ended.set()
    pool.shutdown(wait=True, cancel_futures=True)
