"""A config's tokenizer and encoder loaded (`encoder_of`, `loaded`: what prepare.pin loads), and where: in
a process of its own, forked from the workers' fork server, where a build runs encode processes
(`load_in_child`). The load (transformers' tokenizer modules, the files, the template) is ~2 s of
Python, which in the build's process would hold the GIL that the source pass's threads need between
their Arrow calls (bench/README.md, issue 33's third and fourth rounds: the pass 2.5-4.1 s beside the
load, 1.6-2.2 s alone). The child sends back what the build's process needs, pickled; the build's
process never imports transformers. This module is what the child imports: it keeps to the encode
and pack rooms (not prepare.py, whose imports took the child 0.6-1.1 s).
"""

from __future__ import annotations

import pickle
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..encode.encoder import Encoder
from ..encode.ends import generation_stops
from ..encode.render import Renderer, load_tokenizer
from ..errors import BuildError
from ..pack.policy import packing_for
from ..pack.rows import Packing
from .fork_server import ended_early, expected_origins, imported_elsewhere, worker_context

if TYPE_CHECKING:
    from ..config import BuildConfig


def loaded(config: BuildConfig, tokenizer_dir: Path) -> tuple[Packing, Encoder]:
    """The config's packing (its separator and pad tokens found in the tokenizer) and encoder."""
    tokenizer, encoder = encoder_of(config, tokenizer_dir, config.train_turns)
    return packing_for(tokenizer, config), encoder


def encoder_of(config: BuildConfig, tokenizer_dir: Path, train_turns: str) -> tuple:
    """(the tokenizer, the encoder of the config's template, strategy and ends of turn), the template compiled."""
    tokenizer = load_tokenizer(tokenizer_dir)
    renderer = Renderer.for_tokenizer(tokenizer, config.template_kwargs_dict, config.chat_template_name,
                                      config.render_timeout)
    renderer.compile()
    return tokenizer, Encoder(tokenizer, renderer, config.loss_mask, config.end_of_turn,
                              generation_stops(tokenizer_dir, tokenizer), config.history, train_turns,
                              config.stop_tokens_in_fields)


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
            loaded.set_exception(ended_early("the process loading the tokenizer", exc))
        except BaseException as exc:
            loaded.set_exception(exc)

    def start() -> None:
        # On a thread: the child's start waits for the fork server to have imported what it preloads
        # (fork_server.start_fork_server started it), which the source pass need not wait for.
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
