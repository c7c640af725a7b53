"""databuild: deterministic builder of packed SFT datasets.

    import databuild

    result = databuild.make("muse-spark-tiny-fixed512-v1", out_dir="build")
    databuild.verify(result.parquet)                      # raises BuildError on any difference
    databuild.diff(result.parquet, "theirs/NAME.parquet")  # why two builds differ: databuild.compare.Diff
    databuild.export(result.parquet, to="hf", out="hf/tiny.parquet")
    dataset = databuild.load(result.parquet)              # a datasets.Dataset: input_ids, labels, seq_lengths

Every failure is a BuildError whose message is the CLI's one line.
"""

import sys
import types

from .api import diff, export, load, make, verify
from .errors import BuildError

__all__ = ["BuildError", "diff", "export", "load", "make", "verify"]


class _Package(types.ModuleType):
    """`verify` and `export` are also the names of a module and a package of databuild, and importing a
    submodule binds its name on the package (importlib). The API's functions keep those names: the
    binding is refused here. The package imports only what the API's own module imports (the standard
    library), each function its stage when called, so that code run inside a trainer
    (databuild.integrations.miles) needs none of databuild's dependencies."""

    def __setattr__(self, name: str, value) -> None:
        if name in ("verify", "export") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
