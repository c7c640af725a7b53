"""The one source of randomness in a build: a seeded global permutation of the source rows.

`numpy.random.default_rng(seed).permutation(n)` is exactly what `datasets.Dataset.shuffle(seed=seed)`
uses to order n rows, so a build's stream is the order a `datasets` user would see. The golden-order
test pins its first indices: a numpy release that changed the stream would fail that test loudly.
"""

from __future__ import annotations

import numpy as np


def permutation(n: int, seed: int) -> np.ndarray:
    """Source row indices (int64) in stream order."""
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


def inverse_permutation(order: np.ndarray) -> np.ndarray:
    """positions[i] = place of source row i in the stream."""
    positions = np.empty_like(order)
    positions[order] = np.arange(len(order), dtype=order.dtype)
    return positions
