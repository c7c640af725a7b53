"""The local executor: the encode step in this process, overlapped with its tokenizer's Rust threads,
or in a pool of worker processes; results in batch order either way.

The cores are shared on purpose (executors/cores.py): one process uses the tokenizer's threads on
every core; W processes get cores // W threads each (RAYON_NUM_THREADS, set in their environment
before the tokenizer's thread pool starts), so that W processes never leave cores idle (one thread
each) nor run W pools as wide as the machine. Each worker overlaps its own tokenizer threads and
its Python (WORKER_PARTS), as one process does. Workers are forked from multiprocessing's fork
server, which imports what they need once (a spawned worker spent ~1 CPU s importing it).

`in_order` and `batches` are what every executor shares: the stream cut into batches, and the
results taken back in submission order with a bounded number in flight.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import fields
from itertools import islice, takewhile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from ..encode.encoder import Encoder
from ..records.conversation import TokenizedConversation, Conversation
from ..errors import BuildError
from ..sources.spill_folder import spill_folder, tmpdir_full
from .cores import threads_per_worker

if TYPE_CHECKING:
    from ..sources.spill import SpilledBatch


def batches(items: Iterable[Conversation], size: int) -> Iterator[list[Conversation]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def in_order(batches_: Iterable[list[Conversation]], submit: Callable, result: Callable,
             in_flight: int) -> Iterator[TokenizedConversation]:
    """Results of submit(batch) for each batch, in batch order, with at most `in_flight` batches
    submitted and not yet taken back: what bounds memory for every executor."""
    pending: deque = deque()
    for batch in batches_:
        pending.append(submit(batch))
        if len(pending) >= in_flight:
            yield from result(pending.popleft())
    while pending:
        yield from result(pending.popleft())


def _overlapped(batches_: Iterable[list[Conversation]], encoder: Encoder) -> Iterator[TokenizedConversation]:
    """One process: batch k+1 tokenizes on the Rust threads while Python masks batch k and the
    caller packs and writes it, so the cores are not left idle while either side works."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        def submit(batch):
            rendered = encoder.render(batch)
            return batch, rendered, pool.submit(encoder.tokenize, rendered)

        def result(item):
            batch, rendered, future = item
            return encoder.finish(batch, rendered, future.result())

        yield from in_order(batches_, submit, result, 2)


# A worker's batch is encoded in this many parts, overlapped as in one process: the worker's tokenizer
# threads tokenize part k+1 while its Python masks part k, so they do not wait for each other.
WORKER_PARTS = 4
_worker_encoder: Encoder | None = None  # in a worker process: the one the pool was started with
_worker_problem: str | None = None  # in a worker process: why it must not encode (_imported_elsewhere)
_worker_ended = None  # in a worker process: the build's Event, set when its encoding ends (_end_pool)

# What every worker imports and what takes most of its start (~0.8 of ~1 CPU s measured here, transformers
# above all, numpy with it): imported once, by the fork server, whose forked children (the workers) start
# with them. Not pyarrow: importing it starts jemalloc's background thread, and forking a process that runs
# other threads is how allocator deadlocks happen; a worker imports it itself (0.03 s).
SHARED_IMPORTS = ("numpy", "tokenizers", "jinja2", "transformers.utils.chat_template_utils")


def worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from multiprocessing's fork server, which imports SHARED_IMPORTS
    once and never runs a tokenizer (the Rust thread pool does not survive a fork, so the build's own
    process must not be forked); spawned, each importing everything, where there is no fork server."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(SHARED_IMPORTS))
    return context


def _start_worker(encoder_file: str, threads: int, imported_from: dict[str, str], ended, lifeline) -> None:
    global _worker_encoder, _worker_problem, _worker_ended
    # The build's process stops its workers itself (`ended`, then the pool's shutdown: _end_pool): a worker
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
    _worker_problem = _imported_elsewhere(imported_from)
    try:
        _worker_encoder = pickle.loads(Path(encoder_file).read_bytes())
    except FileNotFoundError:  # the build ended (stopped) before this worker started: nothing to do
        os._exit(0)
    # Compiling the templates now (cheap once the fork server has imported transformers), not at the
    # first batch, when every worker would do it at once with the driver waiting.
    _worker_encoder.renderer.compile()


def _exit_with_the_build(lifeline: Connection) -> None:
    lifeline.poll(None)  # readable only at its end: the build's process, which holds the other end, is gone
    os._exit(0)


def _imported_elsewhere(imported_from: dict[str, str]) -> str | None:
    """Whether this worker has a module of SHARED_IMPORTS from another file than the build's process: the
    fork server imports them with its own sys.path (CPython's forkserver does not apply the parent's), and
    a worker rendering or tokenizing with another transformers than the build's must not run."""
    for name, path in imported_from.items():
        here = getattr(sys.modules.get(name), "__file__", None)
        if here is not None and here != path:
            return (f"an encode process imported {name} from {here}, the build's process from {path}: "
                    f"run the build with that module first on the default path (PYTHONPATH), or --workers 1")
    return None


def _ready() -> None:
    """A worker's first call: returns once the worker has started (imports done, encoder received)."""
    if _worker_problem is not None:
        raise BuildError(_worker_problem)


def _encode_in_worker(batch: list[Conversation] | SpilledBatch) -> tuple:
    _ready()
    if _worker_ended.is_set():  # queued before the build's encoding ended: of no use now
        return to_columns([])
    conversations = batch if isinstance(batch, list) else batch.read()  # a reference into the spill: read here
    parts = batches(conversations, max(1, -(-len(conversations) // WORKER_PARTS)))
    # The build's end stops a batch between its parts: what it waits for is at most a part per worker.
    return to_columns(list(_overlapped(takewhile(lambda _: not _worker_ended.is_set(), parts), _worker_encoder)))


_ARRAYS = ("input_ids", "loss_mask")
_SCALARS = tuple(f.name for f in fields(TokenizedConversation) if f.name not in _ARRAYS)


def to_columns(results: list[TokenizedConversation]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple]]:
    """A batch's results as what crosses from a worker to the driver: the lengths, every token id and
    every mask value in one array each, and the other fields as tuples. The driver unpickles two
    buffers a batch rather than two arrays a conversation (its time is the ceiling of the build)."""
    lengths = np.fromiter((len(r.input_ids) for r in results), dtype=np.int64, count=len(results))
    ids = np.concatenate([r.input_ids for r in results] or [np.zeros(0, dtype=np.int32)])
    mask = np.concatenate([r.loss_mask for r in results] or [np.zeros(0, dtype=np.int8)])
    return lengths, ids, mask, [tuple(getattr(r, name) for name in _SCALARS) for r in results]


def from_columns(columns: tuple) -> list[TokenizedConversation]:
    """The results of `to_columns` again, each conversation's arrays a view of the batch's."""
    lengths, ids, mask, scalars = columns
    ends = np.cumsum(lengths).tolist()
    return [TokenizedConversation(**dict(zip(_SCALARS, values)), input_ids=ids[low:high], loss_mask=mask[low:high])
            for values, low, high in zip(scalars, [0] + ends[:-1], ends)]


def _start_resource_tracker() -> None:
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


class LocalEncoding:
    """The encode step on this machine for one build, as a context: with `workers` > 1, a pool of
    worker processes (forked from the fork server: worker_context) started on entry, from a thread of
    its own, so that they start and receive the encoder while the driver reads the source; stopped and
    shut down on exit (_end_pool). With 1, this process.

    The encoder goes to the workers as a file of pickled bytes, read by each worker's initializer: a
    started child reads what its parent writes only once it has unpickled it, so an encoder passed
    as itself (whose unpickling imports transformers) would make the parent wait for each child's
    imports in turn, and one passed as bytes could leave it blocked (__enter__ says why)."""

    def __init__(self, encoder: Encoder, workers: int = 1):
        self.encoder, self.workers, self.pool = encoder, max(1, workers), None
        self.starting: threading.Thread | None = None
        self.start_failed: BaseException | None = None
        self.folder: tempfile.TemporaryDirectory | None = None
        self.ended = self.lifeline = None  # the workers' stop (_end_pool), and what ends them if this process dies

    def __enter__(self) -> LocalEncoding:
        if self.workers == 1:
            return self
        try:
            # The encoder (tokenizer included) goes to each worker once, not with every batch, as a file:
            # what a spawned child is started with goes through a pipe that its parent writes in full
            # before it carries on, and a child stopped before reading megabytes of it (a SIGTERM to the
            # process group while workers start) would leave the parent blocked on that write forever.
            _start_resource_tracker()
            self.folder = spill_folder()  # owned: removed on exit, or by the next make if this one is killed
            encoder_file = Path(self.folder.name) / "encoder.pickle"
            try:
                encoder_file.write_bytes(pickle.dumps(self.encoder))
            except OSError as exc:  # said as the spill's is: one process or many, the same line
                raise tmpdir_full(encoder_file, "writing the encoder for the encode processes", exc) from None
            imported_from = {name: sys.modules[name].__file__ for name in SHARED_IMPORTS if name in sys.modules}
            context = worker_context()
            self.ended = context.Event()
            lifeline, self.lifeline = context.Pipe(duplex=False)  # this process keeps the writing end, and never writes
            self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=_start_worker,
                                            initargs=(str(encoder_file), threads_per_worker(self.workers),
                                                      imported_from,
                                                      self.ended, lifeline))
            # One call each starts them all now, not at the first batches, and not on this thread.
            self.starting = threading.Thread(target=self._start_workers, name="databuild-start-workers", daemon=True)
            self.starting.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_workers(self) -> None:
        try:
            for _ in range(self.workers):
                self.pool.submit(_ready)
        except BaseException as exc:  # said by stream(), if the build gets there (a stopped one does not)
            self.start_failed = exc

    def summary(self) -> str:
        """How this encodes, in words: processes, and the tokenizer's threads in each."""
        threads = threads_per_worker(self.workers)
        if self.workers == 1:
            return (f"1 process (the build's own) with {threads} tokenizer threads" if "RAYON_NUM_THREADS" in os.environ
                    else "1 process (the build's own), the tokenizer's threads on every core")
        return f"{self.workers} processes x {threads} tokenizer thread{'s' if threads > 1 else ''}"

    def stream(self, batches_: Iterable[list[Conversation] | SpilledBatch]) -> Iterator[TokenizedConversation]:
        """Tokenized conversations in input order; at most 2*workers batches in flight (bounded memory).
        A worker is sent a batch as it is: a reference into the spill goes as that, and the worker reads it
        (this process, with no workers, is given lists)."""
        if self.pool is None:
            return _overlapped(batches_, self.encoder)
        self.starting.join()
        if self.start_failed is not None:
            raise BuildError(f"the encode processes did not start: {type(self.start_failed).__name__}: "
                             f"{self.start_failed}") from self.start_failed
        return in_order(batches_, lambda b: self.pool.submit(_encode_in_worker, b),
                        lambda future: from_columns(future.result()), 2 * self.workers)

    def __exit__(self, *exc) -> None:
        if self.starting is not None:
            self.starting.join()
            self.starting = None
        if self.pool is not None:
            _end_pool(self.pool, self.ended)
            self.pool = None
        if self.lifeline is not None:
            self.lifeline.close()
            self.lifeline = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def _end_pool(pool: ProcessPoolExecutor, ended) -> None:
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


def encode_stream(conversations: Iterable[Conversation], encoder: Encoder, batch_size: int,
                  workers: int = 1) -> Iterator[TokenizedConversation]:
    """Tokenized conversations in input order. At most 2*workers batches are in flight (bounded memory)."""
    with LocalEncoding(encoder, workers) as local:
        yield from local.stream(batches(conversations, batch_size))
