"""Write stage: rows streamed to one parquet file by row group, under a temporary name.

Writer settings are fixed (zstd level 3, no dictionary, fixed row-group size, no timestamps), so
the same rows and the same pyarrow give the same bytes. The schema's key-value metadata names the
mask convention (CONVENTION), so that a reader who never saw data/README.md is told it. The file is
written under a name of this process's own (`partial_path`), so that concurrent makes never write
into one file, and appears under its final name only through `os.replace` once it is complete; on
any error the partial file is removed.
"""

from __future__ import annotations

import glob
import os
import secrets
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from .schema import EXPECTED_TYPES
from .hashes import RowsHasher, SegmentsHasher
from ..records.row import Row
from ..utils.files import GrowingFile, replace_durably

# Fixed text, so the bytes stay deterministic. Megatron-Bridge reads these very column names but stores
# its mask rolled left by one per segment: the words say which convention this file is in.
CONVENTION = {
    "databuild.format": "databuild-rows/1",
    "databuild.loss_mask": "loss_mask[i] = 1 means input_ids[i] is a training target, predicted from "
                           "positions < i of its segment (token-aligned, not shifted; NOT Megatron-Bridge's "
                           "stored convention, which rolls the mask left by one)",
    "databuild.seq_start_id": "offsets where segment k starts; segment k is [seq_start_id[k], seq_start_id[k+1]), "
                              "the last ending at the row's end; conversation_ids[k] is its source id",
    "databuild.consumers": "convert with `databuild export FILE --to megatron-bridge|miles|hf`; see data/README.md",
}
SCHEMA = pa.schema([pa.field(name, kind) for name, kind in EXPECTED_TYPES.items()], metadata=CONVENTION)
ROW_GROUP_TOKENS = 1 << 19  # 64 rows of 8,192 tokens: bounded memory, fast row-group streaming
# Row groups handed to the writer's thread and not yet written, at most: rows come from the encode processes
# in bursts (a batch's conversations at once), and with one group in flight the packer of a 16-core build
# waited 7.4 s of a 41.6 s stream for the writer (device, 51,200 rows, bench/README "Sixth round"); a queue
# lets it pack through a burst. Four groups of 8,192-token rows hold ~10 MB.
GROUPS_QUEUED = 4
WRITER_OPTIONS = dict(compression="zstd", compression_level=3, use_dictionary=False,
                      write_statistics=True, data_page_version="1.0")


def partial_path(final: Path) -> Path:
    """Where this process writes a build of `final` in progress: NAME.parquet.PID-RANDOM.partial, a name
    no other process (on this host or another sharing the directory) writes."""
    return final.with_name(f"{final.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")


def partials(final: Path) -> list[Path]:
    """Every partial file of `final` in its directory, of any process: `verify` reports them, and a make
    holding the output's lock removes them (their writers are gone)."""
    return sorted(final.parent.glob(glob.escape(final.name) + ".*partial"))


def rows_per_group(row_tokens: int) -> int:
    return max(1, ROW_GROUP_TOKENS // row_tokens)


def ragged_list_array(rows: list[np.ndarray], kind: pa.DataType) -> pa.ListArray:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = np.concatenate(rows) if rows else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=kind))


def _table(rows: list[Row]) -> pa.Table:
    return pa.Table.from_arrays([
        ragged_list_array([r.input_ids for r in rows], pa.int32()),
        ragged_list_array([r.loss_mask for r in rows], pa.int8()),
        ragged_list_array([r.seq_start_id for r in rows], pa.int32()),
        pa.array([list(r.conversation_ids) for r in rows], type=pa.list_(pa.string())),
    ], schema=SCHEMA)


class Written(NamedTuple):
    rows: int
    sha256: str  # of the file's bytes (parquet_sha256)
    bytes: int


def write_rows(rows: Iterable[Row], partial: Path, row_tokens: int, hasher: RowsHasher,
               segments: SegmentsHasher | None = None) -> Written:
    """Stream rows into the file `partial` (removed on any error), durable once this returns; the row count
    and the file's sha256 and size. Hashes rows (and, given `segments`, their boundaries) as written."""
    group_rows = rows_per_group(row_tokens)
    count, grown = 0, None
    try:
        # Encoding and compressing a row group runs in pyarrow's C++ without the GIL: groups are written in
        # the background while the next are packed, in order, one at a time, up to GROUPS_QUEUED waiting.
        with pq.ParquetWriter(partial, SCHEMA, **WRITER_OPTIONS) as writer, ThreadPoolExecutor(1) as background:
            failed = threading.Event()
            grown = GrowingFile(partial)

            def write_group(table: pa.Table) -> None:
                if failed.is_set():  # an earlier group's write failed: the file is given up, that error raised
                    return
                try:
                    writer.write_table(table, row_group_size=group_rows)
                    grown.caught_up()
                except BaseException:
                    failed.set()
                    raise

            group: list[Row] = []
            pending: deque = deque()
            for row in rows:
                hasher.update_rows(row.input_ids[None, :], row.loss_mask[None, :])
                if segments is not None:
                    segments.update(row.seq_start_id, row.conversation_ids)
                group.append(row)
                count += 1
                if len(group) == group_rows:
                    if len(pending) == GROUPS_QUEUED:
                        pending.popleft().result()
                    pending.append(background.submit(write_group, _table(group)))
                    group = []
            while pending:
                pending.popleft().result()
            if group:
                writer.write_table(_table(group), row_group_size=group_rows)
        digest, size = grown.finished()
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, most often (pyarrow's errors name no file)
            raise BuildError(f"{partial}: writing the rows failed ({exc.strerror or exc}); nothing published") from None
        raise
    finally:
        if grown is not None:
            grown.close()
    return Written(count, digest, size)


def publish(partial: Path, final: Path) -> None:
    replace_durably(partial, final)
