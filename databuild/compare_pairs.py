"""`databuild diff A B` of two preference row files (rowfile/preference.py): what their manifests say they
were made from (the pinned sections, key by key, as for SFT files: publish/manifest_diff.py), then their
rows read in step: how many differ, in which columns, how many only moved (the same row at another
place), rows one file has and the other lacks, and where the first differing row parts (column and
token). One row group of each file in memory at a time, and a digest per row."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np

from .current import pinned
from .errors import BuildError
from .publish.manifest import manifest_path
from .publish.manifest_diff import Change, changes
from .publish.preference import read_preference_manifest
from .records.pair import COMPLETION_NAMES
from .rowfile.preference import row_bytes
from .rowfile.preference_read import StoredPair, read_pairs


@dataclass
class PairsDiff:
    a: Path
    b: Path
    pins: list[Change] = field(default_factory=list)  # the pinned sections' differences (no manifest: none)
    rows: tuple[int, int] = (0, 0)
    differing: int = 0  # places where the rows differ (a row only one file has included)
    columns: Counter = field(default_factory=Counter)  # column -> rows differing in it
    moved: int = 0  # differing rows of A found whole at another place in B
    first: str | None = None  # the first differing row, where they part, in words

    @property
    def identical(self) -> bool:
        return not self.pins and not self.differing


def _columns(pair: StoredPair) -> dict[str, object]:
    names = COMPLETION_NAMES[len(pair.completion_ids)]
    out = {"id": pair.id, "prompt_input_ids": pair.prompt_ids}
    for name, ids, mask in zip(names, pair.completion_ids, pair.completion_masks):
        out |= {f"{name}_input_ids": ids, f"{name}_loss_mask": mask}
    return out | ({"label": pair.label} if pair.label is not None else {})


def _digest(pair: StoredPair) -> str:
    return hashlib.sha256(row_bytes(pair.id, pair.prompt_ids, pair.completion_ids, pair.completion_masks,
                                    pair.label)).hexdigest()


def _parting(row: int, a: StoredPair, b: StoredPair) -> str:
    """Where row `row` of A and B part: the first differing column, and its first differing token."""
    ca, cb = _columns(a), _columns(b)
    for name in ca:
        x, y = ca[name], cb.get(name)
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            if np.array_equal(x, y):
                continue
            at = next((k for k, (p, q) in enumerate(zip(x.tolist(), y.tolist())) if p != q), min(len(x), len(y)))
            shown = lambda v: int(v[at]) if at < len(v) else "end"
            return (f"row {row} (id {a.id!r} in A, {b.id!r} in B): {name} parts at token {at} ({shown(x)} in A, "
                    f"{shown(y)} in B; {len(x)} and {len(y)} tokens)")
        if x != y:
            return f"row {row}: {name} is {x!r} in A, {y!r} in B"
    return f"row {row}: the same columns"


def diff_pairs(a: Path, b: Path) -> PairsDiff:
    result = PairsDiff(a, b)
    manifests = [manifest_path(p) for p in (a, b)]
    if all(m.exists() for m in manifests):
        found = [pinned(read_preference_manifest(m)) for m in manifests]
        result.pins = list(changes(*found))
    count_a = count_b = 0
    digests_a: Counter = Counter()
    digests_b: Counter = Counter()
    moved_candidates = []
    for row, (x, y) in enumerate(zip_longest(read_pairs(a), read_pairs(b))):
        count_a += x is not None
        count_b += y is not None
        dx, dy = (_digest(x) if x is not None else None), (_digest(y) if y is not None else None)
        digests_a[dx] += dx is not None
        digests_b[dy] += dy is not None
        if dx == dy:
            continue
        result.differing += 1
        if x is None or y is None:
            result.columns["row count"] += 1
            result.first = result.first or f"row {row}: only {'B' if x is None else 'A'} has it"
            continue
        moved_candidates.append(dx)
        for name, value in _columns(x).items():
            other = _columns(y).get(name)
            same = np.array_equal(value, other) if isinstance(value, np.ndarray) else value == other
            result.columns[name] += not same
        result.first = result.first or _parting(row, x, y)
    result.rows = (count_a, count_b)
    result.moved = sum(1 for d in moved_candidates if digests_b[d] > 0)
    return result


def render_pairs(result: PairsDiff, everything: bool = False) -> str:
    if result.identical:
        return f"identical: the same pins and the same {result.rows[0]} rows\n"
    lines = [f"A {result.a}", f"B {result.b}"]
    if result.pins:
        shown = result.pins if everything else result.pins[:12]
        lines.append(f"{len(result.pins)} pinned value{'s' * (len(result.pins) > 1)} differ:")
        lines += [f"  {c.key}: {c.a!r} in A, {c.b!r} in B" for c in shown]
        if len(shown) < len(result.pins):
            lines.append(f"  ... and {len(result.pins) - len(shown)} more (--all lists them)")
    if result.differing:
        columns = ", ".join(f"{name} {n}" for name, n in result.columns.items() if n)
        lines.append(f"rows: {result.rows[0]} in A, {result.rows[1]} in B; {result.differing} differ in place "
                     f"({columns}); {result.moved} of them are rows of A found whole elsewhere in B (moved)")
        lines.append(f"first: {result.first}")
    else:
        lines.append(f"rows: the same {result.rows[0]} rows")
    return "\n".join(lines) + "\n"


def refuse_mixed(a: Path, b: Path, a_is: bool, b_is: bool) -> None:
    if a_is != b_is:
        raise BuildError(f"{a if a_is else b} is a preference row file and {b if a_is else a} is not: diff compares "
                         "two files of one kind")
