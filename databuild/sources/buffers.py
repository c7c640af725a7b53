"""numpy views of an Arrow array's buffers: which entries are null, and each entry's length, read without
an Arrow compute call. The source pass's threads share one interpreter: each Arrow call lets go of it and
takes it back, and a thread waits its turn for every one, so a batch's checks make as few as they can."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def validity(array: pa.Array) -> np.ndarray | None:
    """Which entries are not null (bool), or None when none is."""
    if array.null_count == 0:
        return None
    bitmap = array.buffers()[0]
    if bitmap is None:  # all null without a bitmap (a null-typed array)
        return np.zeros(len(array), bool)
    return np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")[
        array.offset:array.offset + len(array)].astype(bool)


def present(array: pa.Array) -> np.ndarray:
    """The indices of the entries that are not null."""
    valid = validity(array)
    return np.arange(len(array)) if valid is None else np.flatnonzero(valid)


def lengths(array: pa.Array) -> np.ndarray:
    """Each entry's length (int64): a string's bytes, a list's items; 0 where null."""
    n = len(array)
    buffer = array.buffers()[1] if n else None
    if buffer is None:
        return np.zeros(n, np.int64)
    kind = array.type
    wide = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind) or pa.types.is_large_list(kind)
    offsets = np.frombuffer(buffer, np.int64 if wide else np.int32)[array.offset:array.offset + n + 1]
    found = np.diff(offsets).astype(np.int64)
    valid = validity(array)
    if valid is not None:
        found[~valid] = 0
    return found


def int32_values(array: pa.Array, null: int) -> np.ndarray:
    """An int32 array's values as int64, `null` where null."""
    if not len(array):
        return np.zeros(0, np.int64)
    values = np.frombuffer(array.buffers()[1], np.int32)[array.offset:array.offset + len(array)].astype(np.int64)
    valid = validity(array)
    return values if valid is None else np.where(valid, values, null)
