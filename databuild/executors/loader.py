"""The tokenizer loaded in a process of its own, forked from the workers' fork server, where a build
runs encode processes: its load (transformers' tokenizer modules, the files, the template) is ~2 s of
Python, which in the build's process would hold the GIL that the source pass's threads need between
their Arrow calls (bench/README.md, issue 33's third and fourth rounds: the pass 2.5-4.1 s beside the
load, 1.6-2.2 s alone). The child sends back what the build's process needs, small and pickled; the
build's process never imports transformers.
"""

from __future__ import annotations

import pickle
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from ..errors import BuildError
from .workers import expected_origins, imported_elsewhere, worker_context


def load_in_child(load: Callable[..., tuple[Any, Any]], *args) -> Future | None:
    """A Future of `load(*args)`, run in a child forked from the fork server; None where the workers are not
    forked from one (spawned: the child would import everything again, which is not faster). `load` returns
    a pair whose second item (the encoder) is sent pickled and unpickled here, on the pool's thread. The
    child's errors are the Future's, a BuildError as it was raised."""
    context = worker_context()
    if context.get_start_method() != "forkserver":
        return None
    loaded: Future = Future()

    def received(done: Future) -> None:
        try:
            first, pickled = done.result()
            loaded.set_result((first, pickle.loads(pickled)))
        except BrokenProcessPool as exc:
            loaded.set_exception(BuildError(f"the process loading the tokenizer ended: {exc}"))
        except BaseException as exc:
            loaded.set_exception(exc)

    def start() -> None:
        # On a thread: the child's start waits for the fork server to have imported what it preloads
        # (workers.start_fork_server started it), which the source pass need not wait for.
        try:
            pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_ignore_stops)
            pool.submit(_loaded_pickled, expected_origins(), load, *args).add_done_callback(received)
            pool.shutdown(wait=False)  # the pool's one process ends with its one call
        except BaseException as exc:
            loaded.set_exception(exc)

    threading.Thread(target=start, name="databuild-start-loader", daemon=True).start()
    return loaded


def _ignore_stops() -> None:
    # The build's process stops this one by shutting its pool down (as its workers: workers.start_worker);
    # the process group's Ctrl-C is the build's to handle.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def _loaded_pickled(origins: dict[str, str], load: Callable[..., tuple[Any, Any]], *args) -> tuple[Any, bytes]:
    first, second = load(*args)
    problem = imported_elsewhere(origins)  # after the load, which imported what it needs
    if problem is not None:
        raise BuildError(problem)
    return first, pickle.dumps(second)
