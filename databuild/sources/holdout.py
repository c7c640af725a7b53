"""The validation split (config `validation`): which conversations of each source are held out, by a
rule of their ids and the split's own seed alone, so that the training build's settings (its seed,
takes, rows, packing, template) never move a conversation between the splits.

A conversation's draw is the first 8 bytes, big-endian, of sha256(f"{seed}:{id}" as UTF-8): an
integer u in [0, 2^64). With `share: p`, a source's rows with u < floor(p * 2^64) are held out; with
`count: c`, its c rows of smallest u (ties by row). The ids are the record's (the `id` column as
text, integers in decimal; a source without one: `{repo}/{file}#{row}`). The held-out rows build the
validation file (every one once, `rows: all`); the training build drops, wherever its stream meets
them, the held-out rows and every conversation whose id, or whose content key (sources/dedup.py), a
held-out conversation has: the two files share no id and no conversation.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from ..records.problems import HELD_OUT, BadConversation, Problem, bad_conversation

VALIDATION_SUFFIX = ".validation"  # the split's build is its config's NAME + this: NAME.validation.parquet
SPLIT_RULE = 'int.from_bytes(sha256(f"{seed}:{id}".encode()).digest()[:8], "big")'


@dataclass(frozen=True)
class ValidationSpec:
    """`share` (a fraction in (0, 1)) or `count` (conversations) of each source, and the split's seed."""
    share: float | None = None
    count: int | None = None
    seed: int = 0

    def record(self) -> dict:
        return {"share": self.share, "count": self.count, "seed": self.seed, "draw": SPLIT_RULE}


def draws(ids: list[str], seed: int) -> np.ndarray:
    """Each id's draw u (uint64)."""
    return np.fromiter((int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode("utf-8")).digest()[:8], "big")
                        for i in ids), dtype=np.uint64, count=len(ids))


def chosen(u: np.ndarray, spec: ValidationSpec, where: str) -> np.ndarray:
    """The held-out rows (ascending) of a source whose rows draw `u`."""
    if spec.count is not None:
        if spec.count >= len(u):
            raise BuildError(f"{where}: key 'validation.count' = {spec.count}: the source has {len(u)} rows; a count "
                             "below that leaves some to train on")
        return np.sort(np.argsort(u, kind="stable")[:spec.count]).astype(np.int64)
    bound = int(Fraction(repr(spec.share)) * 2**64)  # exact on the decimal written; share < 1: bound < 2^64
    return np.flatnonzero(u < np.uint64(bound)).astype(np.int64)


def source_ids(files) -> list[str]:
    """Every row's id, in row order, as the record reads it."""
    ids: list[str] = []
    for file in files:
        if file.is_json:
            ids += _json_ids(file)
            continue
        parquet = pq.ParquetFile(file.path)
        if "id" in parquet.schema_arrow.names:
            column = parquet.read(columns=["id"]).column("id").cast(pa.string())
            ids += ["" if value is None else value for value in column.to_pylist()]
        else:
            ids += [f"{file.source}/{file.name}#{row}" for row in range(file.rows)]
    return ids


def _json_ids(file) -> list[str]:
    """A JSON file's ids, from the batches the reader builds (adapter.normalise): a batch whose rows have no
    `id` stands in `{repo}/{file}#{row}`; a row that has none beside others that do, or that is not an object,
    has "" (the reader refuses that row)."""
    from .json_rows import json_batches
    from .reader import READ_BATCH_ROWS

    ids: list[str] = []
    for batch, _, _ in json_batches(file.path, file.name, file.adapter, READ_BATCH_ROWS):
        if "id" in batch.schema.names:
            ids += ["" if value is None else value for value in batch.column("id").cast(pa.string()).to_pylist()]
        else:
            ids += [f"{file.source}/{file.name}#{row}" for row in range(len(ids), len(ids) + batch.num_rows)]
    return ids


def held_out_rows(sources, spec: ValidationSpec) -> tuple[list[np.ndarray], list[list[str]]]:
    """Per source (ResolvedSource), its held-out rows (within the source) and every row's id."""
    rows, ids = [], []
    for source in sources:
        found = source_ids(source.files)
        rows.append(chosen(draws(found, spec.seed), spec, f"{source.spec.where}: validation"))
        ids.append(found)
    return rows, ids


def held_out_conversations(keys: dict[int, tuple[bytes, str]], held_rows: set[int], held_ids: set[str],
                           held_keys: set[bytes], files: list) -> dict[int, BadConversation]:
    """The training stream's rows (`keys`: row -> (content key, id)) that the validation split takes:
    held out themselves, or sharing an id or a content key with a held-out conversation."""
    found = {}
    for index, (key, conversation_id) in keys.items():
        why = ("held out for validation" if index in held_rows else
               "its id is a validation conversation's" if conversation_id in held_ids else
               "the same messages and tools as a validation conversation" if key in held_keys else None)
        if why is not None:
            found[index] = bad_conversation(files, index, conversation_id, Problem(HELD_OUT, why))
    return found
