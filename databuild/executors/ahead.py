"""The stream's first positions encoded ahead: while the source pass reads, it sends the rows of the stream's
first positions (as many as the stream is likely to read, within a bound: sources/spill.py, `sent_ahead`)
to the encode processes as it takes them (`check_and_spill(ahead=...)`), in whatever order its threads take
them; once the pass has ended, `EncodedAhead` stands in the stream for those positions and gives their
conversations back in stream order. Without it the encoding would start only once the whole pass had ended:
a random permutation puts rows of every part of the source in the first positions.

What the stream gives is the same with or without it. A conversation that the pass drops once it has seen
the whole source (a duplicate, the validation split's: prepare.Prepared.dropped_up_front) was encoded
ahead for nothing, and is marked as the stream would mark it. Where anything was not as the stream would
have it (a batch that raised, which the stream might never have reached; one stopped by the end of an
earlier stream), those positions are encoded again from their bucket file, batch by batch in stream order.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..encode.encoder import unbuildable
from ..records.conversation import Conversation, TokenizedConversation
from ..records.problems import BadConversation
from .stream import in_order

if TYPE_CHECKING:
    from ..sources.spilled import SpilledBatch


@dataclass(frozen=True)
class EncodedAhead:
    """The first positions of a stream ([0, `positions`)), sent ahead as `futures` (each of a worker's
    columns: workers.to_columns); `again` gives their batches from the bucket files, as the stream
    would cut them, for when the futures cannot stand for it; `dropped`: the conversations dropped up
    front, by source row."""
    futures: tuple[Future, ...]
    positions: int
    dropped: dict[int, BadConversation]
    again: Callable[[], Iterable[SpilledBatch]]

    def results(self, submit: Callable[[SpilledBatch], Future], taken: Callable[[Future], list[TokenizedConversation]],
                in_flight: int) -> Iterator[TokenizedConversation]:
        """The positions' tokenized conversations in stream order (`taken`: a future's, as the stream takes a
        batch's); or, where the futures fall short, the positions encoded again through `submit`, as the stream
        encodes (stream.in_order, at most `in_flight` batches sent and not taken)."""
        by_position = self._by_position(taken)
        if by_position is None:
            yield from in_order(self.again(), submit, taken, in_flight)
            return
        for position in range(self.positions):
            samples = by_position[position]
            bad = self.dropped.get(samples[0].origin.index)
            # dropped: marked as the stream marks it (records.problems.marked), and so never rendered
            yield from samples if bad is None else (unbuildable(Conversation(samples[0].origin, ()), bad.problem),)

    def _by_position(self, taken) -> dict[int, list[TokenizedConversation]] | None:
        """Every sample sent ahead, by its position in the stream; None where a batch raised or one of the
        positions is missing (a batch stopped by an earlier stream's end)."""
        by_position: dict[int, list[TokenizedConversation]] = {}
        for future in self.futures:
            try:
                samples = taken(future)
            except Exception:  # said, if the stream gets there, by the positions' own encoding
                return None
            for sample in samples:
                by_position.setdefault(sample.origin.position, []).append(sample)
        return by_position if len(by_position) == self.positions else None
