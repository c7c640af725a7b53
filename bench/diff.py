"""`databuild diff` on real sizes: two 6,400 x 8,192 row files one mask bit apart, against the baseline
of hashing both files as `verify` does (rowfile.hashes.hash_parquet), in the same run.

    .venv/bin/python bench/diff.py              # ~1 min on 2 cores, of which ~40 s writing the pair
    .venv/bin/python bench/diff.py --rows 640   # a quick run

The pair is written in the native schema with databuild's writer settings: uniform random token ids
(the worst case for compression, so the largest files), a 60% mask, conversations of 200 to 4,000
tokens packed back to back as `concat` packs them (a conversation continues into the next row).
Row R/2 of B has token 4,000's mask bit flipped. Prints the seconds and the ratio diff / baseline.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from databuild.compare import diff
from databuild.rowfile.hashes import hash_parquet
from databuild.rowfile.write import SCHEMA, WRITER_OPTIONS, rows_per_group
from databuild.views.diff import pinned_tokenizers, render


def write_pair(directory: Path, rows: int, row_tokens: int, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    group = rows_per_group(row_tokens)
    paths = directory / "a.parquet", directory / "b.parquet"
    writers = [pq.ParquetWriter(p, SCHEMA, **WRITER_OPTIONS) for p in paths]
    conversation, left = 0, int(rng.integers(200, 4000))
    for first in range(0, rows, group):
        count = min(group, rows - first)
        ids = rng.integers(0, 32000, (count, row_tokens), dtype=np.int32)
        mask = (rng.random((count, row_tokens)) < 0.6).astype(np.int8)
        starts, names = [], []
        for _ in range(count):
            row_starts, row_names, at = [], [], 0
            while at < row_tokens:
                row_starts.append(at)
                row_names.append(f"conversation-{conversation:07d}")
                taken = min(left, row_tokens - at)
                at, left = at + taken, left - taken
                if not left:
                    conversation, left = conversation + 1, int(rng.integers(200, 4000))
            starts.append(row_starts)
            names.append(row_names)
        for number, writer in enumerate(writers):
            if number and first <= rows // 2 < first + count:
                mask = mask.copy()
                mask[rows // 2 - first, 4000 % row_tokens] ^= 1
            table = pa.table({
                "input_ids": pa.ListArray.from_arrays(np.arange(0, ids.size + 1, row_tokens, dtype=np.int32), ids.ravel()),
                "loss_mask": pa.ListArray.from_arrays(np.arange(0, mask.size + 1, row_tokens, dtype=np.int32),
                                                      mask.ravel()),
                "seq_start_id": pa.array(starts, pa.list_(pa.int32())),
                "conversation_ids": pa.array(names, pa.list_(pa.string()))}, schema=SCHEMA)
            writer.write_table(table, row_group_size=group)
    for writer in writers:
        writer.close()
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=6400)
    parser.add_argument("--row-tokens", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, the fastest kept")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="databuild-bench-diff-") as directory:
        a, b = write_pair(Path(directory), args.rows, args.row_tokens)
        baseline, compared, text = [], [], ""
        for _ in range(args.repeat):
            started = time.perf_counter()
            hash_parquet(a), hash_parquet(b)
            baseline.append(time.perf_counter() - started)
            started = time.perf_counter()
            text = render(diff(a, b), pinned_tokenizers())
            compared.append(time.perf_counter() - started)
        figures = {"rows": args.rows, "row_tokens": args.row_tokens, "file_bytes": a.stat().st_size,
                   "hash_both_s": min(baseline), "diff_s": min(compared), "ratio": min(compared) / min(baseline),
                   "first_line": text.splitlines()[0]}
    print(json.dumps(figures, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
