"""A command stopped from outside: SIGTERM (what SLURM and Kubernetes send before SIGKILL), SIGHUP (a
closed terminal or ssh session) and SIGINT (Ctrl-C) all stop it the same way.

Each raises `Stopped`, a KeyboardInterrupt, in the main thread, so the clean-up every stage already
does for Ctrl-C runs for all three: a partial file is removed, the spill folder too, the lock
released. A second signal while that runs is ignored (the clean-up takes milliseconds; a scheduler's
SIGKILL still ends it). The exit status is the shell's for a process killed by that signal, 128 + its
number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, so a scheduler's log reads the same whether
the process cleaned up or not.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []  # the signal that stopped this process, once one has


def received() -> int | None:
    """The signal that stopped this process, if one has: whatever exception the stop then caused
    (a worker pool broken by the same signal, a spill folder removed under a thread) is this stop."""
    return _received[0] if _received else None


def _stop(signum, frame) -> None:
    if _received:
        return  # the clean-up of the first stop is running: let it finish
    _received.append(signum)
    raise Stopped(signum)


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP raise Stopped (where the interpreter lets this thread set
    handlers: the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {signum: signal.signal(signum, _stop) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_status(signum: int) -> int:
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name
