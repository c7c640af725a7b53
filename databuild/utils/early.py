"""Imports a build starts early, on a thread of its own, so that they run while its own thread waits on
work that does not hold the GIL (hashing the source) rather than in its path."""

from __future__ import annotations

import threading


def import_pandas_early() -> None:
    """pyarrow imports pandas (~0.3 s of Python, pyarrow.pandas_compat with it) at its first array built
    from Python objects, to tell whether they are pandas' (its pandas shim), and every build makes such
    arrays; started as a build starts, the import overlaps its pins' hashing (hashlib releases the GIL)."""
    threading.Thread(target=_first_array, name="databuild-import-pandas", daemon=True).start()


def _first_array() -> None:
    import pyarrow as pa

    try:
        pa.array([], pa.int8())
    except Exception:  # noqa: S110  the build's own first array meets the same error, where it is reported
        pass
