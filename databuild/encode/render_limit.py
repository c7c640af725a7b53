"""Render stage: the wall-clock limit of one render, RenderTimedOut raised in the render's own Python code
(a SIGALRM on a process's main thread; on any other thread, a watchdog timer that sets it as the thread's
asynchronous exception), so that a template that never ends stops the build in one line, never hangs it;
and the limits of the machine a render may hit (MACHINE_LIMITS), which stop the build too.

Where renders run: every executor renders on a main thread (the build's process, with the tokenizer's
work alone on a helper thread: executors/stream.py; each worker process; each Ray actor, whose methods a
non-async actor of one concurrency runs on its worker's main thread, as test_ray checks); a caller of
the Python API may make a build on a thread of its own, where the watchdog bounds it.
"""

from __future__ import annotations

import ctypes
import _signal
import signal
import threading
from contextlib import contextmanager

from ..errors import BuildError
from ..records.origin import Origin
from ..records.problems import shown_id

# A render of a normal template takes milliseconds; one that does not end in a minute will not end (nested loops
# of range(100000): Jinja's sandbox bounds each range, not their product).
DEFAULT_RENDER_TIMEOUT = 60.0


class RenderTimedOut(BaseException):
    """A render ran past the time limit. A BaseException, as KeyboardInterrupt is: no `except Exception` of
    the template's helpers or of the mask's code may take it for the conversation's own error."""


# Where these strike depends on the thread's stack depth and the machine's memory, not on the
# conversation alone: counting the conversation as bad would let the workers change the output.
MACHINE_LIMITS = (RecursionError, MemoryError)


class RenderTooLong(BuildError):
    """A render ran past the config's render_timeout: a limit of the machine's time, like MACHINE_LIMITS; the
    build stops (a conversation skipped for it would make the rows depend on the machine's speed)."""


def timed_out(origin: Origin, timeout: float) -> RenderTooLong:
    return RenderTooLong(f"conversation {shown_id(origin.id)} (source row {origin.index}): a render of "
                         f"it took longer than {timeout:g} s (render_timeout), which a render that "
                         f"ends does not; if this template is only slow, raise render_timeout in the config or "
                         f"--render-timeout; nothing was written")


def machine_limit(origin: Origin, exc: BaseException) -> BuildError:
    return BuildError(f"conversation {shown_id(origin.id)} (source row {origin.index}): rendering it hit a "
                      f"{type(exc).__name__}, a limit of this machine, not of the conversation; nothing was written")


_armed = False  # whether a SIGALRM now is a render's time running out (and not one that ended just before)


def _time_is_up(signum, frame) -> None:
    global _armed
    if _armed:
        _armed = False
        raise RenderTimedOut()


@contextmanager
def time_limit(seconds: float | None):
    """Raises RenderTimedOut in the code it wraps once `seconds` of wall-clock time have passed (none with
    `seconds` None), between two bytecodes of the render, which is Python (Jinja compiles a template to
    Python), and which holds no lock nor shared state that the exception could leave half-changed. On the
    main thread, a SIGALRM: the handler stays set once set, and does nothing outside a render. Signals reach
    only the main thread, so on any other one, `_watched`."""
    global _armed
    if seconds is None:
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        with _watched(seconds):
            yield
        return
    # set once: setting it each render cost 17 us; _signal's getsignal, as signal's without the conversion
    # to an enum that signal.getsignal tries on every call (~10 us)
    if _signal.getsignal(signal.SIGALRM) is not _time_is_up:
        signal.signal(signal.SIGALRM, _time_is_up)
    _armed = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        _armed = False  # first: a SIGALRM handled after this point raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


@contextmanager
def _watched(seconds: float):
    """time_limit on a thread that is not the main one: a timer thread sets RenderTimedOut as this thread's
    asynchronous exception (CPython raises it at the thread's next bytecode, as it does a signal's).
    Under a lock, the timer fires only while the render runs, and on the way out one it fired that has
    not been raised yet is taken back, so that nothing is raised after the render."""
    thread, lock, state = threading.get_ident(), threading.Lock(), {"armed": True, "fired": False}

    def time_is_up() -> None:
        with lock:
            if state["armed"]:
                state["armed"], state["fired"] = False, True
                _set_async_exc(thread, RenderTimedOut)

    timer = threading.Timer(seconds, time_is_up)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["armed"] = False
            if state["fired"]:
                _set_async_exc(thread, ctypes.py_object())  # NULL: clears one still pending
        timer.cancel()
