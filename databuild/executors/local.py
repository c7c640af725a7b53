"""The local executor: the encode step in this process, overlapped with its tokenizer's Rust threads
(stream.overlapped), or in a pool of worker processes (workers.py); results in batch order either way.

The cores are shared on purpose (executors/cores.py): one process uses the tokenizer's threads on
every core; W processes get cores // W threads each (RAYON_NUM_THREADS, set in their environment
before the tokenizer's thread pool starts), so that W processes never leave cores idle (one thread
each) nor run W pools as wide as the machine.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..encode.encoder import Encoder
from ..errors import BuildError
from ..records.conversation import Conversation, TokenizedConversation
from ..sources.spill_folder import spill_folder, tmpdir_full
from .cores import threads_per_worker
from .stream import batches, in_order, overlapped
from .ahead import EncodedAhead
from .fork_server import expected_origins, start_resource_tracker, worker_context
from .workers import encode_in_worker, end_pool, from_columns, ready, start_worker

if TYPE_CHECKING:
    from ..sources.spilled import SpilledBatch


class LocalEncoding:
    """The encode step on this machine for one build, as a context: with `workers` > 1, a pool of
    worker processes (forked from the fork server: worker_context) started on entry, from a thread of
    its own, so that they start and receive the encoder while the driver reads the source; stopped and
    shut down on exit (workers.end_pool). With 1, this process.

    The encoder goes to the workers as a file of pickled bytes, read by each worker's initializer: a
    started child reads what its parent writes only once it has unpickled it, so an encoder passed
    as itself (whose unpickling imports transformers) would make the parent wait for each child's
    imports in turn, and one passed as bytes could leave it blocked (__enter__ says why)."""

    def __init__(self, encoder: Encoder | Callable[[], Encoder], workers: int = 1):
        # a callable: the encoder once the tokenizer has loaded (prepare.pin(wait=False)), asked for by the
        # thread that starts the workers, so that the build reads its source meanwhile
        self._encoder = encoder if callable(encoder) else lambda: encoder
        self.workers, self.pool = max(1, workers), None
        self.starting: threading.Thread | None = None
        self.start_failed: BaseException | None = None
        self.folder: tempfile.TemporaryDirectory | None = None
        # the workers' stop (workers.end_pool), and what ends them if this process dies
        self.ended = self.lifeline = None
        self.written = None  # set once the encoder's file is written (or will not be): the workers wait for it
        self.in_flight: set[Future] = set()  # the stream's batches sent to the workers and not done
        self.begun = False  # whether a stream's batches (or its first positions, sent ahead) are being sent
        self.sender: ThreadPoolExecutor | None = None  # sends the batches of the first positions to the pool

    def __enter__(self) -> LocalEncoding:
        if self.workers == 1:
            return self
        try:
            # The encoder (tokenizer included) goes to each worker once, not with every batch, as a file:
            # what a spawned child is started with goes through a pipe that its parent writes in full
            # before it carries on, and a child stopped before reading megabytes of it (a SIGTERM to the
            # process group while workers start) would leave the parent blocked on that write forever.
            start_resource_tracker()
            self.folder = spill_folder()  # owned: removed on exit, or by the next make if this one is killed
            encoder_file = Path(self.folder.name) / "encoder.pickle"
            context = worker_context()
            self.ended, self.written = context.Event(), context.Event()
            lifeline, self.lifeline = context.Pipe(duplex=False)  # this process keeps the writing end, and never writes
            self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=start_worker,
                                            initargs=(str(encoder_file), self.written, threads_per_worker(self.workers),
                                                      expected_origins(), self.ended, lifeline))
            # One call each starts them all now, not at the first batches, and not on this thread.
            self.starting = threading.Thread(target=self._start_workers, args=(encoder_file,),
                                             name="databuild-start-workers", daemon=True)
            self.starting.start()
            self.sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="databuild-send-ahead")
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def encoder(self) -> Encoder:
        return self._encoder()

    def _start_workers(self, encoder_file: Path) -> None:
        try:
            # The workers start first, while the encoder may still be loading (prepare.pin), and wait for its file.
            for _ in range(self.workers):
                self.pool.submit(ready)
            # under another name until whole: a worker reads the file once `written` is set, whatever happened
            partial = encoder_file.with_name(f"{encoder_file.name}.partial")
            try:
                partial.write_bytes(pickle.dumps(self.encoder))
                partial.rename(encoder_file)
            except OSError as exc:  # said as the spill's is: one process or many, the same line
                partial.unlink(missing_ok=True)
                raise tmpdir_full(encoder_file, "writing the encoder for the encode processes", exc) from None
        except BaseException as exc:  # said by stream(), if the build gets there (a stopped one does not)
            self.start_failed = exc
        finally:
            self.written.set()  # without the file, a waiting worker finds none and exits

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
        if self.workers == 1:
            return overlapped(batches_, self.encoder)
        self.starting.join()
        if isinstance(self.start_failed, BuildError):  # the encoder's file not written: its own line
            raise self.start_failed
        if self.start_failed is not None:
            raise BuildError(f"the encode processes did not start: {type(self.start_failed).__name__}: "
                             f"{self.start_failed}") from self.start_failed
        return self._pooled(batches_)

    def ahead(self) -> Callable[[SpilledBatch], Future]:
        """Where the source pass sends the first positions of the stream about to start, ahead of it
        (executors/ahead.py): the workers, as for the stream's own batches."""
        self._begin()
        return self._sent_ahead

    def _sent_ahead(self, batch: SpilledBatch) -> Future:
        """A batch of the first positions sent to the workers, for a thread of the source pass, which this
        must never stop nor hold up. The pool's own submit can wait for seconds: while the pool starts its
        processes (at its first calls, from the thread that starts the workers), each start waits for the
        fork server's imports, and every submit waits for the pool's lock meanwhile. A pass thread that
        submitted itself stood still until then, and with it every part it would have read (the device's
        busy cores fell to 1-5 of 16 for ~1 s: bench/README, "Eleventh round"). So the batch goes to the pool
        from a thread of its own, in the order sent: the future this returns is of the pool's future for it,
        which `_taken` takes through. A pool that cannot take it (its workers gone, as when their encoder
        could not be written) gives a failed future, and the stream says why when it starts (`stream`)."""
        try:
            return self.sender.submit(self._submit, batch)
        except Exception as exc:  # the sender is shut down: the encoding has ended
            failed = Future()
            failed.set_exception(exc)
            return failed

    def _begin(self) -> None:
        """A stream's start (or its first positions', sent ahead): a later stream (the training build's, after
        its validation file's) waits for the batches of the one before to have stopped."""
        if not self.begun:
            wait(self.in_flight)
            self.ended.clear()
            self.in_flight, self.begun = set(), True

    def _pooled(self, batches_: Iterable[list[Conversation] | SpilledBatch | EncodedAhead]) -> Iterator[TokenizedConversation]:
        """in_order over the pool. Once the build has its rows and closes this (or fails), the batches still in
        flight are of no use: the workers stop them at their next part (`ended`, as end_pool) and take the
        queued ones without encoding them, leaving their cores to the build's end."""
        self._begin()
        try:
            yield from in_order(batches_, self._submit, self._taken, 2 * self.workers)
        finally:
            self.ended.set()
            self.begun = False
            for future in list(self.in_flight):
                future.cancel()

    def _taken(self, item: Future | EncodedAhead) -> Iterable[TokenizedConversation]:
        if isinstance(item, EncodedAhead):  # sent already, as the source pass took it
            return item.results(self._submit, self._taken, 2 * self.workers)
        result = item.result()
        if isinstance(result, Future):  # a batch sent ahead: the sender's future of the pool's (_sent_ahead)
            result = result.result()
        return from_columns(result)

    def _submit(self, batch) -> Future | EncodedAhead:
        if isinstance(batch, EncodedAhead):
            return batch
        future = self.pool.submit(encode_in_worker, batch)
        self.in_flight.add(future)
        future.add_done_callback(self.in_flight.discard)
        return future

    def __exit__(self, *exc) -> None:
        if self.sender is not None:  # what it still holds is not sent: the encoding has ended
            self.sender.shutdown(wait=True, cancel_futures=True)
            self.sender = None
        if self.starting is not None:
            self.starting.join()
            self.starting = None
        if self.pool is not None:
            end_pool(self.pool, self.ended)
            self.pool = None
        if self.lifeline is not None:
            self.lifeline.close()
            self.lifeline = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def encode_stream(conversations: Iterable[Conversation], encoder: Encoder, batch_size: int,
                  workers: int = 1) -> Iterator[TokenizedConversation]:
    """Tokenized conversations in input order. At most 2*workers batches are in flight (bounded memory)."""
    with LocalEncoding(encoder, workers) as local:
        yield from local.stream(batches(conversations, batch_size))
