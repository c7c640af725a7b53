"""The versions of the libraries a build's bytes depend on, as the manifest records them."""

from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("databuild", "numpy", "pyarrow", "tokenizers", "transformers", "jinja2", "huggingface_hub",
             "datasets", "click", "ruamel.yaml")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
