"""Who runs the pure encode step (`Encoder.encode_batch`): this machine's processes (`local`, its
worker processes' lifecycle in `workers`, their fork server in `fork_server`, the stream's first positions
encoded while the source is read in `ahead`) or Ray actors (`ray`), with the stream helpers they share
(`stream`) and the share of the cores between processes and tokenizer threads (`cores`). Each yields
the tokenized conversations in stream order with a bounded number of batches in flight, so the choice
changes the speed, never the rows."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ..encode.encoder import Encoder
    from ..records.conversation import TokenizedConversation
    from ..records.conversation import Conversation
    from ..sources.spilled import SpilledBatch

@dataclass(frozen=True)
class Encoding:
    """The encode step of one build: called with the stream's batches (lists of conversations, or
    references into the spill: sources.spill.SpilledBatch), it yields the stream tokenized."""
    stream: Callable[["Iterable[list[Conversation] | SpilledBatch]"], "Iterator[TokenizedConversation]"]
    summary: str  # how it runs, in words for the user: processes and threads, or Ray actors
    # whether it is given references into the spill (worker processes of this machine read their own
    # batches) rather than the conversations (build.Prepared.batches)
    by_reference: bool = False
    processes: int = 1  # encoding at once: the stream's first batches are smaller for them (stream.batch_sizes)
    # where the source pass sends the stream's first positions, to be encoded while it reads (executors/ahead.py):
    # called once a stream, before its pass; None: the encoding starts with the stream (one process, Ray)
    ahead: Callable[[], Callable[["SpilledBatch"], "Future"]] | None = None

    def __call__(self, batches):
        return self.stream(batches)


def start_early(executor: str, workers: int | None) -> bool:
    """What the encoding can start before the build knows its encoder: the fork server its local worker
    processes are forked from (fork_server.start_fork_server), where there will be workers. Whether it
    started one (the tokenizer can then load in a child of its own: executors/loader.py)."""
    from .cores import encode_processes

    if executor == "local" and encode_processes(workers) > 1:
        from .fork_server import start_fork_server

        return start_fork_server()
    return False


@contextmanager
def encoding_on(executor: str, encoder: Encoder | Callable[[], Encoder], workers: int | None,
                ray_address: str | None = None) -> Iterator[Encoding]:
    """The encode step on `executor` ("local" or "ray"; `ray_address` for ray only). Local worker
    processes start on entry, so that they start while the source is read, and read their batches from
    the spill themselves; Ray actors, which may be on other machines, are sent the batches'
    conversations. `workers` None: local, the default for this machine (cores.encode_processes, which
    also caps what is asked); ray, one actor. `encoder` may be a callable that gives it once the tokenizer
    has loaded: local workers start at once and wait for it, while the source is read."""
    if executor == "ray":
        encoder = encoder() if callable(encoder) else encoder
        from .ray import ray_encode_batches

        actors = max(1, workers or 1)
        yield Encoding(lambda batches: ray_encode_batches(batches, encoder, actors, ray_address),
                       f"{actors} Ray actor{'s' if actors > 1 else ''}", processes=actors)
        return
    from concurrent.futures.process import BrokenProcessPool

    from ..utils.machine import available_cores
    from .cores import encode_processes, most_processes_rule
    from .fork_server import ended_early
    from .local import LocalEncoding

    processes = encode_processes(workers)
    with LocalEncoding(encoder, processes) as local:
        summary = local.summary()
        if workers is not None and processes < workers:
            summary += (f"; --workers {workers} asked, {processes} run{'s' if processes == 1 else ''}: "
                        f"{most_processes_rule(available_cores())}, as more were slower "
                        f"(bench/README.md, \"Cores\")")
        try:
            yield Encoding(local.stream, summary, by_reference=processes > 1, processes=processes,
                           ahead=local.ahead if processes > 1 else None)
        except BrokenProcessPool as exc:  # a worker gone (the stream's, or a batch sent ahead): one line
            raise ended_early("an encode process", exc) from exc
