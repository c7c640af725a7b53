"""The one exception type the CLI turns into a single clear line (no traceback), and the decorator
that does it for every command."""

import functools
import io
import os
import reprlib
import signal
import sys

EXIT_FAILED = 1
QUOTED_CHARACTERS = 200  # the most of a value that a message quotes: the value may be any size


class BuildError(Exception):
    """A problem with the inputs or the environment, stated in one line for the user: any line break
    in the message (a library's exception text quoted in it) becomes a space, here, once."""

    def __init__(self, message: str):
        super().__init__(str(message).replace("\n", " "))


# reprlib shortens what it shows at every level (items of a list, characters of a string, depth), so
# quoting a value costs little whatever its size: a YAML alias may stand for 10^10 nodes.
_QUOTE = reprlib.Repr()
_QUOTE.maxstring = _QUOTE.maxother = QUOTED_CHARACTERS
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxdict = _QUOTE.maxset = 10
_QUOTE.maxlevel = 4


def quoted(value, limit: int = QUOTED_CHARACTERS) -> str:
    """A value as a message quotes it: its repr when short; a longer string, its first `limit` characters
    and its length; anything else, its repr cut to `limit` characters."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value):,} characters)"
    text = _QUOTE.repr(value)
    return text if len(text) <= limit else f"{text[:limit]}..."


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (a library's message may carry a body or a remote
    traceback after it), or its type's name when it has no text."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def os_error_line(exc: OSError) -> str:
    """A full disk, a permission: which file, not where in the code."""
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")


def one_line_errors(command=None, *, status: int = EXIT_FAILED):
    """A CLI command whose failures are one line on stderr and exit `status`, never a traceback; stopped
    by SIGINT, SIGTERM or SIGHUP (stopping.py), one line saying what was stopped, and the signal's status.
    `@one_line_errors` or, for another status, `@one_line_errors(status=2)`."""
    import click

    from .stopping import Stopped, exit_status, received, signal_name, stop_signals

    if command is None:
        return functools.partial(one_line_errors, status=status)

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        if not isinstance(sys.stdout, ClosedPipeTolerant) and sys.stdout is not None:
            sys.stdout = ClosedPipeTolerant(sys.stdout)
        try:
            with stop_signals():
                return command(*args, **kwargs)
        except BaseException as exc:
            signum = exc.signum if isinstance(exc, Stopped) else received()
            if signum is None and isinstance(exc, KeyboardInterrupt):
                signum = int(signal.SIGINT)  # before the handlers were set
            if signum is not None:
                click.echo(f"error: {_what()} interrupted by {signal_name(signum)}; nothing was written under the "
                           "final names, and its temporary files were removed", err=True)
                sys.exit(exit_status(signum))
            if isinstance(exc, BuildError):
                click.echo(f"error: {exc}", err=True)
                sys.exit(status)
            if isinstance(exc, OSError):
                click.echo(f"error: {os_error_line(exc)}", err=True)
                sys.exit(status)
            raise
    return wrapper


def _what() -> str:
    """The command being run, as typed: `databuild make NAME`."""
    import click

    context = click.get_current_context(silent=True)
    if context is None:
        return "databuild"
    arguments = [str(context.params[p.name]) for p in context.command.params
                 if isinstance(p, click.Argument) and context.params.get(p.name) is not None]
    return " ".join(["databuild", context.info_name or "", *arguments]).strip()


class ClosedPipeTolerant(io.TextIOBase):
    """stdout for a command whose reader may stop reading (`databuild make NAME | head -n 1`): a closed
    pipe is not an error, so the command finishes its work (a recipe's update after make's summary) and
    what it still prints goes nowhere, where Python would raise BrokenPipeError at the first line the
    reader did not take. Its encoding and errors are the stream's, so click writes to it as it is."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream

    @property
    def encoding(self):
        return self._stream.encoding

    @property
    def errors(self):
        return self._stream.errors

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed_pipe()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed_pipe()

    def _closed_pipe(self) -> None:
        """From now on stdout is /dev/null, at its descriptor too: what the stream still holds in its
        buffer is flushed there at exit, not into the closed pipe."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
