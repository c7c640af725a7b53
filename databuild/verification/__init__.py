"""`databuild verify`: check a row file against every expectation given, and fail closed.

Expectations come from a manifest (by default the one beside the file), a recipe's
`workload.dataset` block, or hashes on the command line. Every check that fails is reported with
what was expected and what was found; with a manifest's row digests, the first differing row is
named too. Exit codes: 0 verified, 1 a difference, 2 a usage error (an option that does not apply
is refused, never ignored), 3 the file is unreadable (missing included).
"""

from .checks import (EXIT_DIFFERENT, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE, Report, UsageError, diff_hint,
                     differences, row_differences, validation_failures, verify)
from .expectations import (FILE_FIELDS, ROW_FIELDS, SEGMENT_FIELD, Expectation, Expected, from_manifest, from_recipe,
                           gather)

__all__ = ["EXIT_DIFFERENT", "EXIT_OK", "EXIT_UNREADABLE", "EXIT_USAGE", "FILE_FIELDS", "ROW_FIELDS", "SEGMENT_FIELD",
           "Expectation", "Expected", "Report", "UsageError", "diff_hint", "differences", "from_manifest",
           "from_recipe", "gather", "row_differences", "validation_failures", "verify"]
