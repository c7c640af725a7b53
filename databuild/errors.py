"""The one exception type the CLI turns into a single clear line (no traceback)."""


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
