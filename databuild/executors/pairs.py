"""The encode step of a preference build on this machine: `encode/preference.py`'s PairEncoder over the
stream's batches of records, in this process (its tokenizer on the Rust threads, overlapped with the
caller's work) or in worker processes started as the SFT build starts its own (workers.start_worker:
from the fork server, the encoder sent once as a file, stopped with the build). Results come back in
batch order with at most 2 x workers batches in flight, so the worker count changes the speed only."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Iterable, Iterator

from ..sources.spill_folder import spill_folder
from . import workers as worker
from .fork_server import ended_early, expected_origins, start_resource_tracker, worker_context
from .cores import threads_per_worker
from .stream import in_order, overlapped


def encode_pairs_in_worker(batch: list) -> list:
    worker.ready()
    return worker._worker_encoder.encode_batch(batch)


def encode_pairs(batches: Iterable[list], encoder, processes: int) -> Iterator:
    """The tokenized pairs of `batches` in order (`encoder` a PairEncoder); `processes` > 1 runs them in
    that many worker processes."""
    if processes <= 1:
        yield from overlapped(batches, encoder)
        return
    start_resource_tracker()
    folder = spill_folder()
    pool = lifeline = None
    try:
        encoder_file = Path(folder.name) / "pair-encoder.pickle"
        encoder_file.write_bytes(pickle.dumps(encoder))
        context = worker_context()
        ended, written = context.Event(), context.Event()
        written.set()  # the encoder's file is there before the workers start
        lifeline, child_end = context.Pipe(duplex=False)
        pool = ProcessPoolExecutor(max_workers=processes, mp_context=context, initializer=worker.start_worker,
                                   initargs=(str(encoder_file), written, threads_per_worker(processes),
                                             expected_origins(), ended, child_end))
        yield from in_order(batches, lambda batch: pool.submit(encode_pairs_in_worker, batch),
                            lambda future: future.result(), 2 * processes)
    except BrokenProcessPool as exc:  # a worker gone: one line, as the SFT build's (executors.encoding_on)
        raise ended_early("an encode process", exc) from exc
    finally:
        if pool is not None:
            worker.end_pool(pool, ended)
        if lifeline is not None:
            lifeline.close()
        folder.cleanup()
