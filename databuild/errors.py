"""The one exception type the CLI turns into a single clear line (no traceback), and the decorator
that does it for every command."""

import functools
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
    """A CLI command whose failures are one line on stderr and exit `status`, never a traceback.
    `@one_line_errors` or, for another status, `@one_line_errors(status=2)`."""
    import click

    if command is None:
        return functools.partial(one_line_errors, status=status)

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except BuildError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(status)
        except OSError as exc:
            click.echo(f"error: {os_error_line(exc)}", err=True)
            sys.exit(status)
        except KeyboardInterrupt:
            click.echo("error: interrupted; nothing was written under the final names", err=True)
            sys.exit(130)
    return wrapper
