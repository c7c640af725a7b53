"""Who runs the pure encode step (`Encoder.encode_batch`): this machine's processes (local.py) or Ray
actors (ray.py). Each yields the tokenized conversations in stream order with a bounded number of
batches in flight, so the choice changes the speed, never the rows."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from ..encode.encoder import Encoder, TokenizedConversation
    from ..sources.reader import Conversation

Encoding = Callable[["Iterable[Conversation]", int], "Iterator[TokenizedConversation]"]


@contextmanager
def encoding_on(executor: str, encoder: Encoder, workers: int | None,
                ray_address: str | None = None) -> Iterator[Encoding]:
    """A function (conversations, batch size) -> the stream encoded by `executor` ("local" or "ray";
    `ray_address` for ray only). Local worker processes start on entry, so that they start while the
    source is read. `workers` None: local, the machine's default (cores.default_workers); ray, one actor."""
    if executor == "ray":
        from .ray import ray_encode_stream

        yield lambda conversations, batch_size: ray_encode_stream(conversations, encoder, batch_size, workers,
                                                                  ray_address)
        return
    from .cores import default_workers
    from .local import LocalEncoding

    with LocalEncoding(encoder, default_workers() if workers is None else workers) as local:
        yield local.stream
