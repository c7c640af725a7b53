"""Per-row and per-conversation digests of a row file, and where two files' digests part: what
`databuild diff` compares before it decodes anything.

One pass, one row group in memory at a time. For each row: the digest of its bytes as data/README.md
defines them for `row_digests` (input_ids as <i4, then loss_mask as one byte a token), of its ids
alone, of its mask alone, and of its boundaries (`segment_bytes`). For each conversation id: the
digests of its tokens and of its targets over every segment it has, in file order, so that a
conversation cut across two rows in one file and whole in the other compares equal. Digests are kept
as their first 8 bytes (a big-endian uint64: the manifest's 16 hex digits), compared with numpy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .hashes import row_bytes, segment_bytes
from .read import open_row_file, read_row_group, row_groups
from .schema import list_values

ORDER, IDS, MASKS, SEGMENTS, COUNT = "order", "ids", "masks", "segment boundaries", "row count"
MOVED_SHOWN = 5  # (B row, A row) pairs kept as examples


def _u64(digests: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(d[:8] for d in digests), dtype=">u8").astype(np.uint64)


def from_hex(row_digests: list[str]) -> np.ndarray:
    """A manifest's row_digests as uint64."""
    return np.array([int(h, 16) for h in row_digests], dtype=np.uint64)


@dataclass(frozen=True)
class RowDigests:
    """A row file's digests; from a manifest, its row digests alone (the other fields None)."""
    rows: np.ndarray  # uint64 per row: the manifest's row_digests
    ids: np.ndarray | None = None  # uint64 per row: sha256 of its input_ids bytes
    masks: np.ndarray | None = None  # uint64 per row: sha256 of its loss_mask bytes
    segments: np.ndarray | None = None  # uint64 per row: sha256 of its segment_bytes
    conversations: dict[str, tuple[bytes, bytes]] | None = None  # id -> (tokens digest, targets digest)
    lengths: dict[str, int] | None = None  # id -> its tokens in the file, over all its segments
    segments_sha256: str | None = None  # as the manifest's output.segments_sha256


class Occurrences:
    """The key of each segment's conversation, for comparing conversations by id: its id, unless an earlier
    conversation of the file had that id (a source holding one id twice, an upsampling take's repeats); then
    the id and which conversation under it this is, `ID (#2)`. A segment continues the conversation before it
    when it is a row's first and the row before ended with that id: a conversation cut across rows."""

    def __init__(self):
        self.seen: dict[str, int] = {}
        self.last: str | None = None  # the id of the previous row's last segment

    def keys(self, conversation_ids: list[str]) -> list[str]:
        out = []
        for k, conversation in enumerate(conversation_ids):
            if conversation and not (k == 0 and conversation == self.last):
                self.seen[conversation] = self.seen.get(conversation, 0) + 1
            n = self.seen.get(conversation, 0)
            out.append(conversation if n <= 1 else f"{conversation} (#{n})")
        self.last = conversation_ids[-1] if conversation_ids else None
        return out


def digest_rows(path: Path) -> RowDigests:
    parquet = open_row_file(path)
    rows, ids, masks, segments, first, boundaries = [], [], [], [], 0, hashlib.sha256()
    tokens: dict[str, hashlib._Hash] = {}
    lengths: dict[str, int] = {}
    targets: dict[str, hashlib._Hash] = {}
    occurrences = Occurrences()
    for _, table in row_groups(parquet, path):
        count, first = table.num_rows, first + table.num_rows
        if not count:
            continue
        id_values, _ = list_values(table.column("input_ids"))
        mask_values, _ = list_values(table.column("loss_mask"))
        data = row_bytes(id_values.reshape(count, -1), mask_values.reshape(count, -1))
        width = data.shape[1] // 5 * 4  # the ids' bytes; the mask's follow
        for row, starts, conversation_ids in zip(data, table.column("seq_start_id").to_pylist(),
                                                  table.column("conversation_ids").to_pylist()):
            row_ids, row_mask = row[:width], row[width:]
            whole = hashlib.sha256(row_ids)  # the row's digest continues its ids': they are hashed once
            ids.append(whole.digest())
            whole.update(row_mask)
            rows.append(whole.digest())
            masks.append(hashlib.sha256(row_mask).digest())
            row_segments = segment_bytes(starts, conversation_ids)
            boundaries.update(row_segments)
            segments.append(hashlib.sha256(row_segments).digest())
            for start, end, conversation in zip(starts, starts[1:] + [len(row_mask)], occurrences.keys(conversation_ids)):
                if conversation:  # "" is padding
                    tokens.setdefault(conversation, hashlib.sha256()).update(row_ids[4 * start:4 * end])
                    targets.setdefault(conversation, hashlib.sha256()).update(row_mask[start:end])
                    lengths[conversation] = lengths.get(conversation, 0) + end - start
    return RowDigests(_u64(rows), _u64(ids), _u64(masks), _u64(segments),
                      {c: (tokens[c].digest(), targets[c].digest()) for c in tokens}, lengths=lengths,
                      segments_sha256=boundaries.hexdigest())


def conversation_tokens(path: Path, wanted: set[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(tokens, targets) of each conversation in `wanted` (keyed as Occurrences keys them), over all its
    segments in file order; only the row groups that hold one of them are read past their conversation ids."""
    parquet = open_row_file(path)
    pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in wanted}
    occurrences = Occurrences()
    for group in range(parquet.num_row_groups):
        held = [occurrences.keys(row) for row in
                read_row_group(parquet, group, path, ["conversation_ids"]).column(0).to_pylist()]
        if not any(wanted.intersection(row) for row in held):
            continue
        table = read_row_group(parquet, group, path, ["input_ids", "loss_mask", "seq_start_id"])
        id_values, lengths = list_values(table.column("input_ids"))
        mask_values, _ = list_values(table.column("loss_mask"))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for row, (starts, conversation_ids) in enumerate(zip(table.column("seq_start_id").to_pylist(), held)):
            begin, width = int(offsets[row]), int(lengths[row])
            for start, end, conversation in zip(starts, starts[1:] + [width], conversation_ids):
                if conversation in wanted:
                    pieces[conversation].append((id_values[begin + start:begin + end],
                                                 mask_values[begin + start:begin + end]))
    return {c: (np.concatenate([p[0] for p in found]), np.concatenate([p[1] for p in found]))
            for c, found in pieces.items() if found}


@dataclass(frozen=True)
class RowsDiff:
    """Where two row files (or one and a manifest's row digests) differ, row by row. A row of B that
    stands at another position in A counts as moved (order), not as a content difference."""
    rows_a: int
    rows_b: int
    differing: tuple[int, ...]  # positions present in both whose rows or boundaries differ, in order
    moved: tuple[tuple[int, int], ...] = ()  # (B row, A row), the first MOVED_SHOWN
    moved_count: int = 0
    in_ids: int | None = None  # rows whose tokens differ (None: not known from row digests alone)
    in_masks: int | None = None  # rows whose targets differ
    in_segments: int | None = None  # rows with equal tokens and targets whose boundaries differ
    first_content: int | None = None  # the first differing position that is not a moved row
    conversations: ConversationsDiff | None = None

    @property
    def first(self) -> int | None:
        """The first differing position, a missing or extra row included."""
        if self.differing:
            return self.differing[0]
        return min(self.rows_a, self.rows_b) if self.rows_a != self.rows_b else None

    @property
    def kinds(self) -> tuple[str, ...]:
        """Which of ids, masks, segment boundaries, order and row count the differences are in."""
        counted = ((IDS, self.in_ids), (MASKS, self.in_masks), (SEGMENTS, self.in_segments),
                   (ORDER, self.moved_count), (COUNT, abs(self.rows_a - self.rows_b)))
        return tuple(kind for kind, count in counted if count)

    @property
    def same(self) -> bool:
        return self.first is None


@dataclass(frozen=True)
class ConversationsDiff:
    """Conversations by id: those in both files whose tokens or targets differ, and those in one only."""
    total: int  # ids in either file
    changed: tuple[str, ...] = field(default=())  # in both, other tokens or targets, in A's order
    only_a: int = 0
    only_b: int = 0
    cut: tuple[str, ...] | None = None  # of `changed`, those cut at another point (compare.cut_elsewhere); None: not looked at

    @property
    def differing(self) -> int:
        return len(self.changed) + self.only_a + self.only_b


def compare_rows(a: RowDigests, b: RowDigests) -> RowsDiff:
    common = min(len(a.rows), len(b.rows))
    content = a.rows[:common] != b.rows[:common]
    full = a.segments is not None and b.segments is not None
    if full:
        content |= a.segments[:common] != b.segments[:common]
    differing = np.flatnonzero(content)
    where_in_a: dict[int, int] = {}
    for index, digest in enumerate(a.rows.tolist()):
        where_in_a.setdefault(digest, index)
    moved = [(int(i), where_in_a[int(b.rows[i])]) for i in differing
             if a.rows[i] != b.rows[i] and int(b.rows[i]) in where_in_a]
    moved_rows = np.array([m for m, _ in moved], dtype=np.int64)
    kept = differing[~np.isin(differing, moved_rows)]
    counts = {}
    if full:
        ids_differ = a.ids[kept] != b.ids[kept]
        masks_differ = a.masks[kept] != b.masks[kept]
        counts = dict(in_ids=int(ids_differ.sum()), in_masks=int(masks_differ.sum()),
                      in_segments=int((~ids_differ & ~masks_differ).sum()))
    conversations = None
    if a.conversations is not None and b.conversations is not None:
        changed = tuple(c for c, d in a.conversations.items() if c in b.conversations and b.conversations[c] != d)
        conversations = ConversationsDiff(len(a.conversations.keys() | b.conversations.keys()), changed,
                                          len(a.conversations.keys() - b.conversations.keys()),
                                          len(b.conversations.keys() - a.conversations.keys()))
    return RowsDiff(len(a.rows), len(b.rows), tuple(differing.tolist()), tuple(moved[:MOVED_SHOWN]), len(moved),
                    first_content=int(kept[0]) if len(kept) else None, conversations=conversations, **counts)
