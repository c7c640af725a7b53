"""databuild: deterministic builder of packed SFT datasets.

    import databuild

    result = databuild.make("muse-spark-tiny-fixed512-v1", out_dir="build")
    databuild.verify(result.parquet)                      # raises BuildError on any difference
    databuild.diff(result.parquet, "theirs/NAME.parquet")  # why two builds differ: databuild.compare.Diff
    databuild.export(result.parquet, to="hf", out="hf/tiny.parquet")
    dataset = databuild.load(result.parquet)              # a datasets.Dataset: input_ids, labels, seq_lengths

Every failure is a BuildError whose message is the CLI's one line.
"""

# `verify` and `export` are also the names of a module and a package of databuild. Importing a
# submodule for the first time binds its name on the package, so both are imported here, before the
# functions take their names; later imports find them loaded and leave the functions in place.
from . import export as _export_package, verify as _verify_module  # noqa: F401
from .api import diff, export, load, make, verify
from .errors import BuildError

__all__ = ["BuildError", "diff", "export", "load", "make", "verify"]
