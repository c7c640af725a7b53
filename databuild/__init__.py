"""databuild: deterministic builder of packed SFT datasets and preference pairs (DPO, KTO).

    import databuild

    result = databuild.make("muse-spark-tiny-fixed512-v1", out_dir="build")
    databuild.verify(result.parquet)                      # raises BuildError on any difference
    databuild.diff(result.parquet, "theirs/NAME.parquet")  # why two builds differ: databuild.compare.Diff
    databuild.export(result.parquet, to="hf", out="hf/tiny.parquet")
    dataset = databuild.load(result.parquet)              # a datasets.Dataset: input_ids, labels, seq_lengths

Every failure is a BuildError whose message is the CLI's one line. The package imports only the API's
module (the standard library), each function its stage when called (verify: databuild.verification;
export: databuild.exports), so that code run inside a trainer (databuild.integrations.miles) needs none of
databuild's dependencies.
"""

from .api import diff, export, load, make, verify
from .errors import BuildError

__all__ = ["BuildError", "diff", "export", "load", "make", "verify"]

