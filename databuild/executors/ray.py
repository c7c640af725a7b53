"""The tokenize stage on Ray: the same `Encoder.encode_batch`, run by a pool of Ray actors.

The driver keeps everything that fixes the output: it reads the source in permutation order, cuts the
stream into batches, and packs and writes the results in submission order. Ray only runs the pure
function `encode_batch` somewhere else, so the rows and the parquet bytes are those of the local
executor for any number of workers and any batch size.

One actor per worker, each holding the Encoder: the tokenizer is deserialised once per worker (from
one `ray.put`), not once per batch. Batch k goes to actor k % workers; an actor runs its calls in
the order they were submitted; the driver yields batch k before it submits batch k + 2*workers. So
at most 2*workers batches are in flight and the driver holds the window, never the dataset.

Ray Data is not used. Its inputs are files read by the workers or collections already in memory
(`from_items` takes the whole list); ours is a generator on the driver (the permutation-order window
reader, malformed conversations marked), and the source files need not be on the
workers at all. Ray Data's `map_batches` over an actor pool would add an order-preserving streaming
executor around the same pool, with nothing to stream from.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Iterable, Iterator

from ..encode.encoder import Encoder
from ..records.conversation import TokenizedConversation, Conversation
from ..errors import BuildError, first_line
from ..utils.versions import library_versions
from .stream import in_order

# One core per worker: each actor reserves one CPU and its tokenizer uses one thread (no Rust pool
# of its own: RAYON_NUM_THREADS=1); TOKENIZERS_PARALLELISM set explicitly never warns about forks.
WORKER_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


class _EncodeWorker:
    """A Ray actor: one Encoder, deserialised once, encoding the batches sent to it in order."""

    def __init__(self, encoder: Encoder):
        self.encoder = encoder

    def versions(self) -> dict[str, str]:
        return library_versions()

    def encode_batch(self, batch: list[Conversation]) -> list[TokenizedConversation]:
        return self.encoder.encode_batch(batch)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise BuildError("the ray executor needs the extra: pip install 'databuild[ray]'") from None
    return ray


def _connect(ray, address: str | None, workers: int) -> bool:
    """Connect to (or start) Ray; True when this call started it and so must shut it down."""
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    # Ray turns token authentication on for a new local instance, and for `auto` when a token is
    # present, with a warning that says so at every build: the behaviour is kept, the warning muted.
    auth = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = auth.level
    auth.setLevel(logging.ERROR)
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            # "local": a new instance even when RAY_ADDRESS or a `ray start` on this machine
            # (/tmp/ray/ray_current_cluster, stale or not) would make plain ray.init() connect.
            ray.init(address="local", num_cpus=workers, include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        if not address:
            raise BuildError(f"cannot start a local Ray instance: {exc}") from None
        hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                " (a cluster with token authentication needs RAY_AUTH_MODE=token and its token)")
        raise BuildError(f"cannot reach the Ray cluster at {address}: {exc}{hint}") from None
    finally:
        auth.setLevel(level)
    return True


def _check_cpus(ray, workers: int) -> None:
    """Each worker reserves one CPU: more workers than the cluster has CPUs would wait forever."""
    cpus = ray.cluster_resources().get("CPU", 0)
    if workers > cpus:
        raise BuildError(f"{workers} workers need {workers} CPUs of the Ray cluster (one each); it has {cpus:g}")


def _get(ray, refs, hint: str):
    """ray.get, a worker's failure reaching the user as the local executor reports it: one line, not
    a remote traceback. A BuildError (a template reading an unpinned clock, ...) as it was raised."""
    from ray.exceptions import RayActorError, RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as exc:
        if isinstance(exc.cause, BuildError):
            raise exc.cause from None
        cause = exc.cause if exc.cause is not None else exc
        raise BuildError(f"a Ray worker failed: {type(cause).__name__}: {first_line(cause)}") from None
    except RayActorError as exc:
        raise BuildError(f"a Ray worker died ({type(exc).__name__}): {hint}") from None


def _check_versions(ray, actors) -> None:
    """Tokenization and rendering happen on the workers: their libraries must be the driver's."""
    here = library_versions()
    started = _get(ray, [actor.versions.remote() for actor in actors],
                   "while starting: check that every node has the environment of requirements.lock")
    for there in started:
        differ = [f"{name} {there.get(name)} on a worker, {version} here"
                  for name, version in here.items() if there.get(name) != version]
        if differ:
            raise BuildError("the Ray workers' libraries differ from the driver's (" + "; ".join(differ)
                             + "); install requirements.lock and databuild on every node")


def ray_encode_batches(batches_: Iterable[list[Conversation]], encoder: Encoder, workers: int | None,
                       address: str | None) -> Iterator[TokenizedConversation]:
    """Tokenized conversations in input order, encoded by `workers` Ray actors; <= 2*workers batches in
    flight. The batches are lists of conversations, never references into the spill: an actor may be
    on a machine without it.

    A missing ray fails here, at the call; Ray is reached at the first result and left (shut down if
    this started it, else only our actors killed) when the generator ends or is closed.
    """
    return _stream(_import_ray(), batches_, encoder, max(1, workers or 1), address)


def _stream(ray, batches_: Iterable[list[Conversation]], encoder: Encoder, workers: int,
            address: str | None) -> Iterator[TokenizedConversation]:
    started = _connect(ray, address, workers)
    actors = []
    try:
        remote = ray.remote(num_cpus=1, runtime_env={"env_vars": WORKER_ENV})(_EncodeWorker)
        _check_cpus(ray, workers)
        encoder_ref = ray.put(encoder)
        actors = [remote.remote(encoder_ref) for _ in range(workers)]
        _check_versions(ray, actors)

        turn = itertools.cycle(actors)  # batch k to actor k % workers: each runs its batches in order
        yield from in_order(batches_, lambda b: next(turn).encode_batch.remote(b),
                            lambda ref: _get(ray, ref, "nothing was written; rerun the build"), 2 * workers)
    finally:
        if ray.is_initialized():
            for actor in actors:
                ray.kill(actor)
            if started:
                ray.shutdown()
