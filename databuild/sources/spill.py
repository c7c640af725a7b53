"""Spill stage: the mixed source in permutation order, never held whole, through bucket files.

A pass over the source writes each row whose stream position lies in the pass's range to the bucket
file of that position (bucket k holds positions [k*window, (k+1)*window)), Arrow IPC in a temporary
directory; the stream reads the buckets back in order, one in memory at a time, sorted within.

The first pass also checks every row of the mixed source, so a malformed row anywhere is known before
anything is rendered. A pass reads the files in parts (runs of row groups) on threads, one per core:
parquet decoding, the checks, the takes and the IPC writes run in Arrow's C++ without the GIL, a
part gathers what it takes (up to SPILL_ROWS rows) and writes it one batch a bucket, and each bucket
file has a lock of its own, so parts writing different buckets never wait for each other. It spills
only the prefix of the stream the build is expected to read (`expected_prefix`, generous), because a
recipe may read a few percent of its source; a stream that goes past it gets another pass, which
spills as far again (the spilled prefix doubles). The stream is the same whatever the prefix, the
window, the number of passes or the order files finish in.

Given where to send them (`check_and_spill(ahead=...)`: the encode processes), the first pass also
writes the rows of the stream's first positions, as a part takes them, to files of their own and sends
them in batches of at most AHEAD_BATCH rows to be encoded ahead of the stream (executors/ahead.py puts
them back in stream order), so that the encoding starts while the source is read rather than once the
whole pass has ended: the first positions hold rows of every part of the source. It sends only as many
positions as the stream is likely to read (`sent_ahead`), at most AHEAD_BUCKETS buckets' worth.
Reading the buckets back (what a worker process needs of the spill) is spilled.py's.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count as numbered, repeat
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.ipc  # noqa: F401  (pa.ipc)
from tqdm import tqdm

from ..records.problems import BadConversation
from ..sources.dedup import batch_keys
from ..sources.mixture import Placement
from ..utils.machine import available_cores
from ..sources.spill_folder import tmpdir_full
from .record import COLUMNS
from .reader import SourceFile, iter_batches
from .row_checks import RECORD_COUNTS, check_batch, with_valid_utf8
from ..records.conversation import Conversation
from .spilled import SpilledBatch, open_bucket, read_bucket, spilled_batch

PARTS_PER_THREAD = 4  # parts of the source per thread in a pass: small enough to even out the threads' loads
# Rows a part takes for the spill before it writes them, one write a bucket: few writes (each a turn at the
# interpreter and at the bucket's lock), and a bounded amount of the source held
SPILL_ROWS = 8192
# Message bytes per token the first pass provides for: about twice what BPE tokenizers average
# on English, code and mixed text (~3-4). Falling short costs a pass, never a different row.
BYTES_PER_TOKEN_BOUND = 8
# The share of the expected prefix that the first pass sends ahead where the stream's length is a guess: the
# prefix provides for 8 bytes a token and text averages 3-4, so a quarter is read unless the text averages
# under 2 bytes a token; more would be encoded for nothing (the agentic bench job reads 3,138 of a bucket's
# 8,192 conversations).
AHEAD_SHARE = 4
# Rows a batch sent ahead holds at most: a part of a small source takes hundreds of the first positions in
# one write, which as one batch would keep one process busy while the others wait (the stream's own first
# batches are as small: executors.stream.batch_sizes).
AHEAD_BATCH = 32
# Buckets' worth of positions sent ahead at most: the stream holds their results until it reaches them (~45 MB
# a bucket of the recipe's conversations). One, measured: the cores are busy during the pass (its threads, the
# tokenizer's load, the workers' start), so the encode processes have little to take then, and four buckets'
# worth (~25,000 of the recipe's 46,620 conversations) made the 16-core job slower, 11.3-13.4 s against 9.6-10.8 s
# with one (bench/README, "Eighth round").
AHEAD_BUCKETS = 1


def sent_ahead(prefix: int, exact: bool, window: int) -> int:
    """Stream positions the first pass sends ahead for a spilled `prefix`: all of it where the stream reads
    it all (`exact`: rows: all), else AHEAD_SHARE's share of the guess; at most AHEAD_BUCKETS buckets of
    `window` positions."""
    return min(prefix if exact else -(-prefix // AHEAD_SHARE), AHEAD_BUCKETS * window)


def expected_prefix(files: Iterable[SourceFile], placement: Placement, tokens: int) -> int:
    """Stream positions the first pass spills for a build that needs `tokens` tokens (message bytes
    of each file counted in the share of its rows that the stream holds, repeats included)."""
    size, message_bytes = placement.size, 0
    for file in files:
        taken = len(placement.within(file.first_index, file.rows)[0])
        message_bytes += file.message_bytes * taken // max(file.rows, 1)
    if message_bytes <= 0:
        return size
    return min(size, -(-size * tokens * BYTES_PER_TOKEN_BOUND // message_bytes))


class Spill:
    """Bucket files of the stream under `directory`; positions [0, spilled) have been written.

    `placement` gives the rows of the files (numbered across them) the stream holds, each with its
    stream position, a row repeated by an upsampling take once per position (sources.mixture.placement)."""

    def __init__(self, files: Iterable[SourceFile], placement: Placement, window: int, directory: Path,
                 threads: int | None = None, keys: bool = False):
        self.files, self.window, self.directory = list(files), window, Path(directory)
        self.threads = max(1, threads or available_cores())
        self.placement = placement
        self.size = placement.size
        self.spilled = 0
        self.passes = 0
        # the first pass's RECORD_COUNTS of each file's rows that the stream holds, malformed ones left out
        self.record_counts: dict[int, np.ndarray] = {}  # by the file's first_index
        # with `keys` (dedup, a validation split): the first pass's content key (sources/dedup.py) and id of
        # each row the stream holds, malformed ones left out
        self.with_keys = keys
        self.keys: dict[int, tuple[bytes, str]] = {}
        self.ahead: list[Future] | None = None  # the batches of the first positions sent ahead, when they were
        self.ahead_positions = 0  # how many: positions [0, ahead_positions) of the stream

    def counts_of(self, files: Iterable[SourceFile]) -> dict[str, int]:
        """RECORD_COUNTS over `files` (a source's), by name."""
        total = sum((self.record_counts.get(f.first_index, 0) for f in files), np.zeros(len(RECORD_COUNTS), np.int64))
        return dict(zip(RECORD_COUNTS, total.tolist()))

    def check_and_spill(self, prefix: int, ahead: Callable[[SpilledBatch], Future] | None = None,
                        exact: bool = False) -> list[BadConversation]:
        """The first pass: every malformed row the stream holds (in source order); positions up to
        `prefix`, rounded up to whole buckets, spilled. With `ahead`, the rows of the stream's first
        positions (`sent_ahead`; `exact`: the stream reads the whole prefix) are also sent to it in batches
        as the pass takes them (in no set order), their futures kept in `ahead`."""
        if ahead is not None:
            self.ahead = []
            self.ahead_positions = min(sent_ahead(prefix, exact, self.window), self.size)
        return self._pass(prefix, check=True, ahead=ahead)

    def conversations(self) -> Iterator[Conversation]:
        """The whole stream in permutation order, spilling further ranges as it gets there; it can
        be read again."""
        for path in self._buckets():
            yield from read_bucket(path)

    def batches(self, size: int | Iterable[int], malformed: dict[int, BadConversation],
                start: int = 0, stop: int | None = None) -> Iterator[SpilledBatch]:
        """The stream of conversations() cut into batches of `size`, or of the sizes it gives in turn (the
        last shorter), as references into the bucket files; spills further ranges as it gets there.
        `start`, `stop`: those stream positions only (default: the whole stream)."""
        known_bad = np.fromiter(malformed, dtype=np.int64, count=len(malformed))
        sizes = repeat(size) if isinstance(size, int) else iter(size)
        pieces, count, size = [], 0, next(sizes)
        stop = self.size if stop is None else min(stop, self.size)
        first = start // self.window
        for bucket, path in enumerate(self._buckets(range(first, -(-stop // self.window))), first):
            table = open_bucket(path).select(["position", "index"])
            # a bucket holds each of its positions once: sorted, the k-th row is position bucket*window + k
            order = np.argsort(table.column("position").to_numpy(), kind="stable")
            order = order[max(0, start - bucket * self.window):stop - bucket * self.window]
            indices = table.column("index").to_numpy()[order]
            low = 0
            while low < len(order):
                high = min(len(order), low + size - count)
                pieces.append((path, order[low:high], indices[low:high]))
                count, low = count + high - low, high
                if count == size:
                    yield spilled_batch(pieces, malformed, known_bad)
                    pieces, count, size = [], 0, next(sizes)
        if pieces:
            yield spilled_batch(pieces, malformed, known_bad)

    @property
    def buckets(self) -> int:
        return -(-self.size // self.window)

    def _buckets(self, buckets: range | None = None) -> Iterator[Path]:
        """The bucket files in stream order (of `buckets`: all by default), each spilled (by another pass)
        before it is given."""
        for bucket in range(self.buckets) if buckets is None else buckets:
            if bucket * self.window >= self.spilled:
                self._pass(max(2 * self.spilled, self.window), check=False)
            yield self._path(bucket)

    def _path(self, bucket: int) -> Path:
        return self.directory / f"bucket-{bucket:06d}.arrow"

    def _pass(self, stop: int, check: bool, ahead: Callable[[SpilledBatch], Future] | None = None) -> list[BadConversation]:
        # Whole buckets per pass, so that no bucket file is written by two passes.
        start, stop = self.spilled, min(self.size, -(-stop // self.window) * self.window)
        writers: dict[int, pa.ipc.RecordBatchFileWriter] = {}
        locks: defaultdict[int, threading.Lock] = defaultdict(threading.Lock)  # one per bucket file
        lock = threading.Lock()  # for `writers`, `locks`, the counts, the bar and `ahead`
        stopping = threading.Event()
        ahead_files = numbered()

        def send_ahead(rows: pa.RecordBatch, bad: dict[int, BadConversation]) -> None:
            """The rows of a write among the first positions, to a file of their own, sent to be encoded in
            batches of at most AHEAD_BATCH rows (`bad`: the part's malformed rows so far, which include these
            rows' own)."""
            with lock:
                path = self.directory / f"ahead-{next(ahead_files):06d}.arrow"
            with pa.ipc.new_file(path, rows.schema) as writer:
                writer.write_batch(rows)
            indices = rows.column("index").to_numpy().tolist() if bad else []
            for low in range(0, rows.num_rows, AHEAD_BATCH):
                high = min(low + AHEAD_BATCH, rows.num_rows)
                malformed = {i: bad[i] for i in indices[low:high] if i in bad}
                future = ahead(SpilledBatch(((path, np.arange(low, high)),), malformed))
                with lock:
                    self.ahead.append(future)

        def write(pending: list[tuple[pa.RecordBatch, np.ndarray, np.ndarray]],
                  bad: dict[int, BadConversation]) -> None:
            """Taken rows (with their positions and source rows) to their bucket files: one write a bucket;
            with `ahead`, those of the first positions also sent ahead."""
            if not pending or stopping.is_set():  # the pass failed or was stopped: its folder is about to go
                return
            positions = np.concatenate([p for _, p, _ in pending])
            buckets = positions // self.window
            order = np.argsort(buckets, kind="stable")
            taken = with_valid_utf8(pa.concat_batches([t for t, _, _ in pending]))  # malformed rows must read back
            rows = np.concatenate([r for *_, r in pending])
            grouped = pa.RecordBatch.from_arrays(
                [taken.column(c) for c in COLUMNS] + [pa.array(positions), pa.array(rows)],
                names=COLUMNS + ["position", "index"]).take(pa.array(order))
            buckets = buckets[order]
            cuts = np.flatnonzero(np.diff(buckets)) + 1
            if ahead is not None:
                early = np.flatnonzero(positions[order] < self.ahead_positions)
                if len(early):
                    send_ahead(grouped.take(pa.array(early)), bad)
            for low, high in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(buckets)]]).tolist()):
                bucket = int(buckets[low])
                with lock:
                    bucket_lock = locks[bucket]
                with bucket_lock:
                    if bucket not in writers:
                        writers[bucket] = pa.ipc.new_file(self._path(bucket), grouped.schema)
                    writers[bucket].write_batch(grouped.slice(low, high - low))

        def one_part(part: tuple[SourceFile, range]) -> list[BadConversation]:
            file, groups = part
            found: list[BadConversation] = []
            bad_rows: dict[int, BadConversation] = {}  # found, by row: the ones a batch sent ahead marks
            counts = np.zeros(len(RECORD_COUNTS), np.int64)
            keys: dict[int, tuple[bytes, str]] = {}
            pending: list[tuple[pa.RecordBatch, np.ndarray, np.ndarray]] = []  # taken, not yet written
            waiting = 0
            for offset, batch, refused, dropped in iter_batches(file, groups):
                if stopping.is_set():  # the pass failed or was stopped: its folder is about to go
                    break
                held, positions = self.placement.within(offset, batch.num_rows)
                if check:
                    bad, per_row = check_batch(file, offset, batch, refused, dropped)
                    copies = np.bincount(held, minlength=batch.num_rows)  # of each row in the stream
                    found += [b for b in bad if copies[b.index - offset]]
                    if ahead is not None:
                        bad_rows.update((b.index, b) for b in bad)
                    copies[[b.index - offset for b in bad]] = 0
                    counts += (per_row * copies[:, None]).sum(axis=0)
                    if self.with_keys:
                        distinct = np.flatnonzero(copies)
                        ids = batch.column("id").take(pa.array(distinct)).to_pylist()
                        keys.update(zip((distinct + offset).tolist(), zip(batch_keys(batch, distinct), ids)))
                wanted = (positions >= start) & (positions < stop)
                with lock:
                    bar.update(batch.num_rows)
                if not wanted.any():
                    continue
                rows = held[wanted]
                pending.append((batch.take(pa.array(rows)), positions[wanted], rows + offset))
                waiting += len(rows)
                if waiting >= SPILL_ROWS:
                    write(pending, bad_rows)
                    pending, waiting = [], 0
            write(pending, bad_rows)
            if check:
                with lock:  # a file's parts add up to its counts
                    self.record_counts[file.first_index] = self.record_counts.get(file.first_index, 0) + counts
                    self.keys.update(keys)
            return found

        # disable=None: a bar on a terminal, nothing in logs and CI
        bar = tqdm(total=self.size, unit="conv", desc="checking and spilling the source" if check else
                   "spilling more of the source", disable=None, leave=False)
        try:
            try:
                with bar, ThreadPoolExecutor(max_workers=self.threads) as pool:
                    try:
                        parts = _parts(self.files, PARTS_PER_THREAD * self.threads)
                        found = [m for part in pool.map(one_part, parts) for m in part]  # part order: source order
                    except BaseException:  # SIGTERM included: the threads stop at their next batch
                        stopping.set()
                        raise
            finally:
                for writer in writers.values():
                    writer.close()
        except OSError as exc:  # a full $TMPDIR, most often (while writing, or closing, a bucket): say where
            raise tmpdir_full(self.directory, "spilling the source", exc) from None
        self.spilled, self.passes = stop, self.passes + 1
        return found


def _parts(files: list[SourceFile], count: int) -> list[tuple[SourceFile, range]]:
    """The files cut into about `count` parts of whole groups (parquet row groups; a JSON file is
    one), in source order: a part is as many consecutive groups as make up a count-th of the rows
    (at least one group), so a source of a few large files is read by as many threads as one of many
    small files."""
    rows_per_part = max(1, sum(f.rows for f in files) // max(1, count))
    parts = []
    for file in files:
        first, rows = 0, 0
        for group, size in enumerate(file.groups):
            rows += size
            if rows >= rows_per_part:
                parts.append((file, range(first, group + 1)))
                first, rows = group + 1, 0
        if first < len(file.groups):
            parts.append((file, range(first, len(file.groups))))
    return parts
