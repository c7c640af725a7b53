"""The worker processes' lifecycle and wire format: how they start (forked from multiprocessing's fork
server, fork_server.py, which imports what they need once: a spawned worker spent ~1 CPU s importing it), what each
does with a batch (its own tokenizer threads overlapped with its Python, in WORKER_PARTS), what
crosses back to the driver (`to_columns`), and how they stop with the build (`end_pool`).
"""

from __future__ import annotations

import os
import pickle
import signal
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
from .fork_server import imported_elsewhere
from .stream import batches, overlapped

if TYPE_CHECKING:
    from ..sources.spilled import SpilledBatch


# A worker's batch is encoded in this many parts, overlapped as in one process: the worker's tokenizer
# threads tokenize part k+1 while its Python masks part k, so they do not wait for each other.
WORKER_PARTS = 4
_worker_encoder: Encoder | None = None  # in a worker process: the one the pool was started with
_worker_problem: str | None = None  # in a worker process: why it must not encode (_imported_elsewhere)
_worker_ended = None  # in a worker process: the build's Event, set when its encoding ends (end_pool)

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
    # What its first batch needs to be read (the spill's reader, pyarrow and its compute functions: 0.1-0.25 s
    # here) imported while it waits, not as that batch arrives (at the unpickling of its SpilledBatch).
    from ..sources import spilled  # noqa: F401
    # The workers start while the tokenizer still loads (executors/loader.py) and wait here for its
    # encoder's file, `written` once it is there, or once the build ends without one.
    written.wait()
    try:
        _worker_encoder = pickle.loads(Path(encoder_file).read_bytes())
    except FileNotFoundError:  # the build ended (stopped, or its encoder failed) without writing it: nothing to do
        os._exit(0)
    # The tokenizer built (Encoder.backend) and the templates compiled now (cheap once the fork server has
    # imported transformers), not at the first batch, when every worker would do it at once with the driver
    # waiting.
    _worker_encoder.backend  # noqa: B018
    _worker_encoder.renderer.compile()


def _exit_with_the_build(lifeline: Connection) -> None:
    lifeline.poll(None)  # readable only at its end: the build's process, which holds the other end, is gone
    os._exit(0)


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
    # positionally: the scalars follow origin, input_ids and loss_mask in the record's field order (_SCALARS)
    return [TokenizedConversation(Origin(*values[:at]), ids[low:high], mask[low:high], *values[at:])
            for values, low, high in zip(scalars, [0] + ends[:-1], ends)]


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
