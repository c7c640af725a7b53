"""Who runs the pure encode step (`Encoder.encode_batch`): this machine's processes (local.py) or Ray
actors (ray.py). Each yields the tokenized conversations in stream order with a bounded number of
batches in flight, so the choice changes the speed, never the rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    from ..encode.encoder import Encoder, TokenizedConversation
    from ..sources.reader import Conversation


def encode_stream_on(executor: str, conversations: Iterable[Conversation], encoder: Encoder, batch_size: int,
                     workers: int | None, ray_address: str | None = None) -> Iterator[TokenizedConversation]:
    """The stream encoded by `executor` ("local" or "ray"; `ray_address` for ray only). `workers`
    None: local, the machine's default (cores.default_workers); ray, one actor."""
    if executor == "ray":
        from .ray import ray_encode_stream

        return ray_encode_stream(conversations, encoder, batch_size, workers or 1, ray_address)
    from .cores import default_workers
    from .local import encode_stream

    return encode_stream(conversations, encoder, batch_size, default_workers() if workers is None else workers)
