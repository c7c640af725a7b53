"""The local executor: the encode step in this process, overlapped with its tokenizer's Rust threads,
or in a pool of worker processes; results in batch order either way.

The cores are shared on purpose (executors/cores.py): one process uses the tokenizer's threads on
every core; W processes get cores // W threads each (RAYON_NUM_THREADS, set in their environment
before the tokenizer's thread pool starts), so that W processes never leave cores idle (one thread
each) nor run W pools as wide as the machine.

`in_order` and `batches` are what every executor shares: the stream cut into batches, and the
results taken back in submission order with a bounded number in flight.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from itertools import islice
from typing import Callable, Iterable, Iterator

from ..encode.encoder import Encoder, TokenizedConversation
from .cores import threads_per_worker
from ..sources.reader import Conversation


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


def _overlapped(conversations: Iterable[Conversation], encoder: Encoder,
                batch_size: int) -> Iterator[TokenizedConversation]:
    """One process: batch k+1 tokenizes on the Rust threads while Python masks batch k and the
    caller packs and writes it, so the cores are not left idle while either side works."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        def submit(batch):
            rendered = encoder.render(batch)
            return batch, rendered, pool.submit(encoder.tokenize, rendered)

        def result(item):
            batch, rendered, future = item
            return encoder.finish(batch, rendered, future.result())

        yield from in_order(batches(conversations, batch_size), submit, result, 2)


THREAD_VARIABLES = ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")
_worker_encoder: Encoder | None = None  # in a worker process: the one the pool was started with


def _start_worker(encoder: Encoder) -> None:
    global _worker_encoder
    _worker_encoder = encoder


def _encode_in_worker(batch: list[Conversation]) -> list[TokenizedConversation]:
    return _worker_encoder.encode_batch(batch)


def encode_stream(conversations: Iterable[Conversation], encoder: Encoder, batch_size: int,
                  workers: int = 1) -> Iterator[TokenizedConversation]:
    """Tokenized conversations in input order. At most 2*workers batches are in flight (bounded memory)."""
    if workers <= 1:
        yield from _overlapped(conversations, encoder, batch_size)
        return
    # spawn, not fork: the tokenizer's Rust thread pool does not survive a fork.
    context = multiprocessing.get_context("spawn")
    threads = threads_per_worker(workers)
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    # Children inherit these at spawn; the tokenizer reads them when its thread pool starts.
    os.environ.update(RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true" if threads > 1 else "false")
    try:
        # The encoder (tokenizer included) goes to each worker once, not with every batch.
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                                 initargs=(encoder,)) as pool:
            yield from in_order(batches(conversations, batch_size), lambda b: pool.submit(_encode_in_worker, b),
                                lambda future: future.result(), 2 * workers)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
