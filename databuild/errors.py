"""The one exception type the CLI turns into a single clear line (no traceback), and the decorator
that does it for every command."""

import functools
import signal
import sys

EXIT_FAILED = 1


class BuildError(Exception):
    """A problem with the inputs or the environment, stated in one line for the user: any line break
    in the message (a library's exception text quoted in it) becomes a space, here, once."""

    def __init__(self, message: str):
        super().__init__(str(message).replace("\n", " "))


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
