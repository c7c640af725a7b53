"""The versions of the libraries a build's bytes depend on, as the manifest records them."""

from __future__ import annotations

import functools
import platform
import threading
from importlib import metadata

LIBRARIES = ("databuild", "numpy", "pyarrow", "tokenizers", "transformers", "jinja2", "huggingface_hub",
             "datasets", "click", "ruamel.yaml")


def library_versions() -> dict[str, str]:
    """The versions, read once a process (a fresh dict each call)."""
    return dict(_versions())


def read_versions_early() -> None:
    """Reads them on a thread now, so that the manifest does not wait for it at a build's end: importlib's
    metadata reads each library's METADATA file, found among every installed one (~0.5 s where many are)."""
    threading.Thread(target=_versions, name="databuild-versions", daemon=True).start()


@functools.cache
def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
