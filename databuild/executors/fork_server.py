"""How encode processes start: multiprocessing's fork server, which imports once what every one of them
needs (SHARED_IMPORTS) and forks them (the workers, the tokenizer's loader: loader.py), started as early
as a build knows it will fork (`start_fork_server`: the CLI's first step, before its own imports); the
resource tracker it needs; the checks that a child runs the build's own packages (`imported_elsewhere`) and
does not build itself while it starts (`refuse_in_starting_child`: an unguarded script run again); and what
the build says when one of its children ends without a result (`ended_early`).
Light on purpose: importing this module imports neither numpy nor pyarrow, so that the fork server's
imports run while the build's process makes its own.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import sys
import tempfile
import threading

from ..errors import BuildError, first_line

# What every worker imports and what takes most of its start (~0.8 of ~1 CPU s measured here, transformers
# above all, numpy with it): imported once, by the fork server, whose forked children (the workers) start
# with them. Not pyarrow: importing it starts jemalloc's background thread, and forking a process that runs
# other threads is how allocator deadlocks happen; a worker imports it itself (0.03 s).
SHARED_IMPORTS = ("numpy", "tokenizers", "jinja2", "transformers.utils.chat_template_utils")


# The fork server listens on a Unix socket at $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX (multiprocessing's
# names), and a Unix socket's path holds at most 107 bytes: a longer $TMPDIR than this leaves no room.
FORK_SERVER_TMPDIR_BYTES = 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start: forked from multiprocessing's fork server, which imports SHARED_IMPORTS
    once and never runs a tokenizer (the Rust thread pool does not survive a fork, so the build's own
    process must not be forked); spawned, each importing everything, where there is no fork server or
    where $TMPDIR's path is too long for its socket (the build is the same, its workers slower to start)."""
    if "forkserver" not in multiprocessing.get_all_start_methods() or \
            len(os.fsencode(tempfile.gettempdir())) > FORK_SERVER_TMPDIR_BYTES:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(SHARED_IMPORTS))
    return context


def start_fork_server() -> bool:
    """Starts the fork server now, on a thread of its own, so that its imports (SHARED_IMPORTS, ~1 CPU s)
    run on another core while the build's process pins its inputs, rather than once the build's encoding
    starts; the pool's start then only waits for what is left of it. The resource tracker (which the fork
    server starts first) is started with SIGHUP blocked, as ever. False where workers are spawned."""
    context = worker_context()
    if context.get_start_method() != "forkserver":
        return False
    from multiprocessing import forkserver

    def start() -> None:
        try:
            start_resource_tracker()
            forkserver.ensure_running()
        except Exception:  # the pool's own start tries again, and says what fails
            pass

    threading.Thread(target=start, name="databuild-start-fork-server", daemon=True).start()
    return True


def expected_origins() -> dict[str, str]:
    """Where the build's process takes (or would take) each package of SHARED_IMPORTS from, found without
    importing it: its own process may never import transformers (executors/loader.py)."""
    found = {}
    for name in dict.fromkeys(name.partition(".")[0] for name in SHARED_IMPORTS):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None:
            found[name] = spec.origin
    return found


def imported_elsewhere(origins: dict[str, str]) -> str | None:
    """Whether this child (a worker, the tokenizer's loader) has a package of SHARED_IMPORTS from another
    file than the build's process (`origins`: expected_origins there): the fork server imports them with
    its own sys.path (CPython's forkserver does not apply the parent's), and a child rendering or
    tokenizing with another transformers than the build's must not run."""
    for name, path in origins.items():
        here = getattr(sys.modules.get(name), "__file__", None)
        if here is not None and here != path:
            return (f"an encode process imported {name} from {here}, the build's process from {path}: "
                    f"run the build with that module first on the default path (PYTHONPATH), or --workers 1")
    return None


def refuse_in_starting_child(entry: str) -> None:
    """Raises where `entry` (a build's entry, as the user calls it) runs in a process that multiprocessing
    started and that is still starting: one that runs the main script again (spawn.prepare, which the fork
    server's children run too) to find what the parent pickled, and a script that builds outside
    `if __name__ == "__main__":` then builds again in it. That child would wait for the output's lock,
    held by the build that started it (publish/lock.py), which waits for it (the tokenizer's loader, the
    workers' start): both for good. Refused, the child exits, and the build that started it fails
    (`ended_early`). CPython's own check for the same case, spawn._check_not_importing_main, reads
    the same flag (set only while the child prepares, so a worker's own calls are not refused)."""
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise BuildError(f"{entry} was called in a process that multiprocessing started (a build's encode "
                         "process, its tokenizer's loader) while it ran the main script again: put the script's "
                         "build under `if __name__ == \"__main__\":` (multiprocessing runs an unguarded script "
                         "again in each process it starts)")


def ended_early(what: str, exc: BaseException) -> BuildError:
    """The build's error where `what` (a process of its own: the tokenizer's loader, an encode process) ended
    without a result (BrokenProcessPool: killed, out of memory, or refused as it started: an unguarded
    script's, refuse_in_starting_child, whose own error is printed by that process), with the likely cause
    where multiprocessing runs the main script again in the processes it starts."""
    said = f"{what} ended: {first_line(exc).rstrip('.')}"
    script = script_run_again()
    if script is None:
        return BuildError(said)
    return BuildError(f"{said}; if {script} builds outside `if __name__ == \"__main__\":`, put its build under it "
                      "(multiprocessing runs the script again in each process it starts, which then builds again "
                      "and is refused)")


def script_run_again() -> str | None:
    """The main module that multiprocessing runs again in each process it starts, to find what it was sent
    (spawn.get_preparation_data and _fixup_main_from_name/_path: a script by its path, a `python -m`
    module by its name, but never a package's __main__); None for none (`python -c`, an interactive
    session, `python -m databuild`) or for databuild's own command line, whose console script builds only
    under the guard (it is `from databuild.cli import main`, as pip, pipx and uv write it)."""
    main = sys.modules.get("__main__")
    cli = sys.modules.get("databuild.cli")
    if main is None or (cli is not None and getattr(main, "main", None) is getattr(cli, "main", None)):
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return None if name == "__main__" or name.endswith(".__main__") else name
    path = getattr(main, "__file__", None)
    return path if path is not None and os.path.isfile(path) else None  # not `python -` ('<stdin>')


def start_resource_tracker() -> None:
    """multiprocessing's resource tracker, started now with SIGHUP blocked: it ignores SIGINT and
    SIGTERM but not SIGHUP, so a terminal's hang-up sent to the process group would kill it, and it
    would fill stderr with its complaints while the build stops. The mask is this thread's, and
    restored at once; a SIGHUP meanwhile waits, and is handled then."""
    from multiprocessing import resource_tracker

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
