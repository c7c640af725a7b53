"""What every executor shares: the stream cut into batches, the results taken back in submission order
with a bounded number in flight, and one process's encode overlapped with its tokenizer's Rust threads."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Callable, Iterable, Iterator

from ..encode.encoder import Encoder
from ..records.conversation import Conversation, TokenizedConversation


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


def overlapped(batches_: Iterable[list[Conversation]], encoder: Encoder) -> Iterator[TokenizedConversation]:
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
