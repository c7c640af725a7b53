"""`databuild diff A B`: why two builds differ. Each of A and B is a row file (with the manifest
beside it, if any), a manifest alone, or a config (its pinned inputs resolved and hashed, nothing
built).

First the pinned sections of the two manifests, key by key (publish/manifest_diff.py); then, where
both sides have rows, their digests (rowfile/row_digests.py): how many rows and conversations
differ, and in what; then only the first differing row of each file is read back, to point at the
conversation and token where they part. views/diff.py renders the result.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dataclasses

import numpy as np

from .errors import BuildError
from .current import pinned
from .publish.manifest_diff import Cause, Change, causes, changes
from .publish.manifest_read import manifest_beside, read_manifest
from .rowfile.row_digests import RowDigests, RowsDiff, compare_rows, conversation_tokens, digest_rows, from_hex
from .utils.files import file_sha256
from .rowfile.read import StoredRow, open_parquet, read_rows

ROWS, MANIFEST, CONFIG = "row file", "manifest", "config"
CUT_CHECKED = 10_000  # changed conversations of other lengths read back to see whether only their cut moved


@dataclass(frozen=True)
class Side:
    """One operand, as given and as read."""
    given: str  # as the user wrote it
    kind: str  # ROWS, MANIFEST or CONFIG
    manifest: dict[str, Any] | None  # a config's: its pinned sections; None: a row file with no manifest
    parquet: Path | None = None
    digests: RowDigests | None = None  # a manifest's: its row_digests only; a config's: None
    unfaithful: str | None = None  # a row file that is not what its manifest says: where ("from row 7")


@dataclass(frozen=True)
class FirstDifference:
    """The first differing row that is not a moved one, as each file holds it, and the first token
    where they part (in ids, targets or boundaries)."""
    row: int
    token: int
    a: StoredRow
    b: StoredRow

    def segment(self, side: StoredRow) -> int:
        """The segment of `side` holding the token (its last one if the row is shorter)."""
        return int(np.searchsorted(side.seq_start_id, min(self.token, len(side.input_ids) - 1), side="right") - 1)


@dataclass(frozen=True)
class Diff:
    a: Side
    b: Side
    changes: tuple[Change, ...]  # of the pinned sections (format, name, build, inputs, versions)
    causes: tuple[Cause, ...]  # the changes grouped by the cause they name (publish/manifest_diff.cause_of)
    rows: RowsDiff | None = None  # None: a side has no rows (a config)
    first: FirstDifference | None = None  # None: no row file on a side, or no content difference
    same_bytes: bool | None = None  # two row files with the same rows: whether the files are byte-identical

    @property
    def identical(self) -> bool:
        return not self.changes and (self.rows is None or self.rows.same) and self.same_bytes is not False


def read_side(given: str | Path) -> Side:
    """A row file, a manifest or a config, told apart by what the path holds or the name says."""
    path = Path(given)
    if path.is_file() and path.suffix == ".parquet":
        digests = digest_rows(path)  # checks the file first: a file that is not a row file is one line
        manifest = manifest_beside(path)
        return Side(str(given), ROWS, manifest, path, digests, _unfaithful(digests, manifest))
    if path.is_file() and path.suffix == ".json":
        manifest = read_manifest(path)
        recorded = manifest.get("row_digests")  # a manifest may predate them: then pins only, not zero rows
        return Side(str(given), MANIFEST, manifest,
                    digests=RowDigests(from_hex(recorded)) if recorded is not None else None)
    if path.suffix in (".parquet", ".json"):
        raise BuildError(f"{given}: no such file")
    return _config_side(str(given))


def _config_side(given: str) -> Side:
    from .build import manifest_of
    from .prepare import pin
    from .config import resolve_config

    config = resolve_config(given)
    # offline: diff reads the hub cache, never the network (a config not fetched is one line)
    return Side(given, CONFIG, pinned(manifest_of(pin(config, offline=True), f"{config.name}.parquet")))


def _unfaithful(digests: RowDigests, manifest: dict[str, Any] | None) -> str | None:
    """Where a row file parts from its own manifest: its row_digests, then its segments_sha256."""
    if manifest is None:
        return None
    if "row_digests" in manifest:  # a manifest may predate them
        recorded = from_hex(manifest["row_digests"])
        common = min(len(recorded), len(digests.rows))
        parted = np.flatnonzero(recorded[:common] != digests.rows[:common])
        if len(parted) or len(recorded) != len(digests.rows):
            return f"from row {int(parted[0]) if len(parted) else common}"
    pinned_segments = (manifest.get("output") or {}).get("segments_sha256")
    if pinned_segments and pinned_segments != digests.segments_sha256:
        return "in its segment boundaries (segments_sha256)"
    return None


def diff(a: str | Path, b: str | Path) -> Diff:
    """A and B compared: their pinned sections, then their rows where both have rows."""
    with ThreadPoolExecutor(2) as pool:  # hashing and parquet decoding release the GIL
        one, two = pool.map(read_side, (a, b))
    if (one.manifest is None or two.manifest is None) and (one.digests is None or two.digests is None):
        raise BuildError(f"nothing to compare: {one.given} and {two.given} have neither both a manifest nor both "
                         "rows (a config has pins only; a row file without a manifest, rows only)")
    found = tuple(changes(pinned(one.manifest or {}), pinned(two.manifest or {}))) \
        if one.manifest is not None and two.manifest is not None else ()
    sources = ((one.manifest or two.manifest or {}).get("inputs") or {}).get("sources") or []
    named = tuple(causes(list(found), sources))
    if one.digests is None or two.digests is None:
        return Diff(one, two, found, named)
    rows = compare_rows(one.digests, two.digests)
    first = same_bytes = None
    if one.parquet is not None and two.parquet is not None:
        if rows.conversations is not None and rows.conversations.changed:
            rows = dataclasses.replace(rows, conversations=dataclasses.replace(
                rows.conversations, cut=cut_elsewhere(one, two, rows.conversations.changed)))
        if rows.first_content is not None:
            first = read_first_difference(one.parquet, two.parquet, rows.first_content, one.manifest, two.manifest)
        elif rows.same:
            same_bytes = file_sha256(one.parquet) == file_sha256(two.parquet)
    return Diff(one, two, found, named, rows, first, same_bytes)


def cut_elsewhere(a: Side, b: Side, changed: tuple[str, ...]) -> tuple[str, ...]:
    """Of the conversations in both row files with other tokens or targets, those that differ only in
    where a row boundary cut them: one file holds a prefix or a suffix of the other's tokens, with the
    same targets (the build's last row ends at another token; a row with no target, dropped, held
    another part of it). Only conversations of different lengths are read back, the first CUT_CHECKED."""
    length_a, length_b = a.digests.lengths, b.digests.lengths
    candidates = [c for c in changed if length_a[c] != length_b[c]][:CUT_CHECKED]
    if not candidates:
        return ()
    with ThreadPoolExecutor(2) as pool:
        in_a, in_b = pool.map(lambda side: conversation_tokens(side.parquet, set(candidates)), (a, b))
    cut = []
    for conversation in candidates:
        (ids, mask), (longer_ids, longer_mask) = sorted((in_a[conversation], in_b[conversation]), key=lambda p: len(p[0]))
        for part in (slice(0, len(ids)), slice(len(longer_ids) - len(ids), None)):
            if np.array_equal(ids, longer_ids[part]) and np.array_equal(mask, longer_mask[part]):
                cut.append(conversation)
                break
    return tuple(cut)


def read_first_difference(a: Path, b: Path, row: int, manifest_a: dict | None,
                          manifest_b: dict | None) -> FirstDifference:
    """Row `row` of both files read back, and the first token where they part."""
    row_a = read_rows(open_parquet(a), a, row, continued_rows=(manifest_a or {}).get("continued_rows"))[0]
    row_b = read_rows(open_parquet(b), b, row, continued_rows=(manifest_b or {}).get("continued_rows"))[0]
    return FirstDifference(row, first_token(row_a, row_b), row_a, row_b)


def first_token(a: StoredRow, b: StoredRow) -> int:
    """The first token position where two rows differ in id or target, or where a segment of one starts
    with another id or at another token than the other's."""
    common = min(len(a.input_ids), len(b.input_ids))
    parted = np.flatnonzero((a.input_ids[:common] != b.input_ids[:common])
                            | (a.loss_mask[:common] != b.loss_mask[:common]))
    token = int(parted[0]) if len(parted) else common
    for start_a, id_a, start_b, id_b in zip(a.seq_start_id.tolist(), a.conversation_ids, b.seq_start_id.tolist(),
                                            b.conversation_ids):
        if (start_a, id_a) != (start_b, id_b):
            return min(token, start_a, start_b)
    if len(a.seq_start_id) != len(b.seq_start_id):
        longer = a if len(a.seq_start_id) > len(b.seq_start_id) else b
        return min(token, int(longer.seq_start_id[min(len(a.seq_start_id), len(b.seq_start_id))]))
    return token

