"""The one exception type the CLI turns into a single clear line (no traceback)."""


class BuildError(Exception):
    """A problem with the inputs or the environment, stated in one line for the user."""
