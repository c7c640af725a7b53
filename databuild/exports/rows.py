"""What the export formats share of a row file's rows: a row's kept tokens as an Arrow list column
(rows are read back through rowfile.read.RowBlock)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def list_array(values: np.ndarray, keep: np.ndarray, kind: pa.DataType) -> pa.ListArray:
    """Rows of a (rows, row_tokens) array cut to the tokens `keep` marks (a prefix of each row)."""
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[keep], type=kind))
