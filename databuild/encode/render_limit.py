"""Render stage: the wall-clock limit of one render (a SIGALRM that raises RenderTimedOut in the render's
own Python code), so that a template that never ends costs a conversation, not the build."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# A render of a normal template takes milliseconds; one that does not end in a minute will not end (nested loops
# of range(100000): Jinja's sandbox bounds each range, not their product).
DEFAULT_RENDER_TIMEOUT = 60.0


class RenderTimedOut(BaseException):
    """A render ran past the time limit. A BaseException, as KeyboardInterrupt is: no `except Exception` of
    the template's helpers or of the mask's code may take it for the conversation's own error."""


_armed = False  # whether a SIGALRM now is a render's time running out (and not one that ended just before)


def _time_is_up(signum, frame) -> None:
    global _armed
    if _armed:
        _armed = False
        raise RenderTimedOut()


@contextmanager
def time_limit(seconds: float | None):
    """Raises RenderTimedOut in the code it wraps once `seconds` of wall-clock time have passed: a SIGALRM
    whose handler raises between two bytecodes of the render, which is Python (Jinja compiles a template to
    Python), and which holds no lock nor shared state that the exception could leave half-changed. Signals
    reach only a process's main thread, where every executor renders (the build's process, each worker
    process, each Ray actor); on another thread, and with `seconds` None, there is no limit. The handler stays
    set once set, and does nothing outside a render."""
    global _armed
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGALRM) is not _time_is_up:  # set once: setting it each render cost 17 us
        signal.signal(signal.SIGALRM, _time_is_up)
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        _armed = False  # first: a SIGALRM handled after this point raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
