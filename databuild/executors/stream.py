"""What every executor shares: the stream cut into batches, the results taken back in submission order
with a bounded number in flight, and one process's encode overlapped with its tokenizer's Rust threads."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice, repeat
from typing import Callable, Iterable, Iterator

from ..encode.encoder import Encoder
from ..records.conversation import Conversation, TokenizedConversation


# A stream's first batches are smaller, so that each encode process has its first batch done within a
# fraction of a full batch's time (256 conversations take ~0.4-0.5 s on one tokenizer thread) and the
# driver packs and writes from then on, rather than all processes finishing their first full batch at
# once: a batch of size // 8 per process, then one of size // 2 per process, then `size` on.
RAMP = (8, 2)


def batch_sizes(size: int, processes: int = 1) -> Iterator[int]:
    """The sizes of a stream's batches for `processes` encode processes: RAMP, then `size`."""
    for divisor in RAMP:
        yield from repeat(max(1, size // divisor), processes)
    yield from repeat(size)


def batches(items: Iterable[Conversation], size: int | Iterable[int]) -> Iterator[list[Conversation]]:
    """`items` in batches of `size`, or of the sizes it gives in turn."""
    iterator, sizes = iter(items), repeat(size) if isinstance(size, int) else iter(size)
    while batch := list(islice(iterator, next(sizes))):
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
