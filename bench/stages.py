#!/usr/bin/env python
"""Where `databuild make` spends its CPU: each stage run alone, in order, on one build's inputs.

    .venv/bin/python bench/stages.py CONFIG.yaml [--batch-size 256] [--window N]

CONFIG is a build config (run.py --keep leaves its bench-1x.yaml in the kept directory). Stages run
one after another on the main thread, except the tokenizer's encode_batch, which uses its own Rust
threads as it does in a build; each line gives the stage's wall and CPU seconds and its CPU cost per
token, so every stage's share can be set against the tokenizer's. The stages call databuild's own
functions (Spill.check_and_spill / Spill.conversations / Encoder.render_texts, choose, tokenize, finish); a patched
copy is measured by putting it first on PYTHONPATH (run from outside the repo root, or the repo's
own package wins through sys.path[0]). Every stage but the last covers the whole source (run.py's
configs consume ~92% of it), and the tokenized stream stays in memory: ~0.5 GiB for the default corpus.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

TOTALS: dict[str, list[float]] = {}  # stage -> [wall, cpu], in first-seen order


@contextmanager
def stage(name: str):
    """Adds the block's wall and CPU seconds (CPU of every thread of the process) to the stage."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    totals = TOTALS.setdefault(name, [0.0, 0.0])
    totals[0] += time.perf_counter() - wall
    totals[1] += time.process_time() - cpu


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--window", type=int, default=None, help="spill bucket size (default: databuild's)")
    args = parser.parse_args(argv)

    with stage("import databuild + transformers"):
        import transformers.utils.chat_template_utils  # noqa: F401
        from dataclasses import replace

        from databuild.executors.loader import encoder_of
        from databuild.prepare import DEFAULT_WINDOW
        from databuild.config import load_config, packing_keys
        from databuild.rowfile.hashes import RowsHasher
        from databuild.inputs.resolve import resolve_inputs
        from databuild.pack.policy import POLICIES, pack, packing_for
        from databuild.pack.rows import PackStats
        from databuild.sources.mixture import placement
        from databuild.sources.spill import Spill
        from databuild.rowfile.write import write_rows
    config = load_config(args.config)
    with stage("resolve inputs (hash source + tokenizer files)"):
        inputs = resolve_inputs(config, offline=True)
    with stage("load tokenizer"):
        tokenizer, encoder = encoder_of(config, inputs.tokenizer_dir, config.train_turns)  # as make builds it
        packing = packing_for(tokenizer, config)
    files = list(inputs.source_files)
    positions = placement(*inputs.selections, config.seed)
    spill_dir = tempfile.TemporaryDirectory(prefix="databuild-stages-")
    spill = Spill(files, positions, args.window or DEFAULT_WINDOW, Path(spill_dir.name))
    with stage("spill, whole source (format adapter, check, bucket, write IPC)"):
        spill.check_and_spill(spill.size)
    with stage("read buckets back (rows to Python)"):
        conversations = list(spill.conversations())
    spill_dir.cleanup()
    # Batch by batch, as the build does: holding every Encoding at once would make the stages pay
    # for gigabytes of fresh pages that a build never touches.
    tokenized, tokens = [], 0
    for low in range(0, len(conversations), args.batch_size):
        batch = conversations[low:low + args.batch_size]
        with stage("render (chat template)"):
            texts = encoder.render_texts(batch)
        with stage("targets (Encoder.choose: the strategy's proofs)"):
            rendered = encoder.choose(batch, texts)
        with stage("encode_batch (Rust threads)"):
            encodings = encoder.tokenize(rendered)
        # an expanded conversation's samples: a list of encodings in its place
        tokens += sum(len(e) for item in encodings for e in (item if isinstance(item, list) else [item]))
        with stage("ids + masks (Encoder.finish)"):
            tokenized.extend(encoder.finish(batch, rendered, encodings))
        with stage("free the encodings"):
            del encodings
    stats = PackStats()
    with stage(f"pack (rows of row_tokens, {config.packing})"):
        rows = list(islice(pack(iter(tokenized), packing, stats), config.rows))
    # every other policy on the same stream, for comparison (left out of the total below)
    for other in sorted(set(POLICIES) - {config.packing}):
        with stage(f"(pack with {other} instead, not in the total)"):
            instead = replace(config, **packing_keys({"packing": other}, "stages"))
            list(islice(pack(iter(tokenized), packing_for(tokenizer, instead), PackStats()), config.rows))
    with stage("hash (rows_sha256 + per-row digests)"):
        hasher = RowsHasher()
        for row in rows:
            hasher.update_rows(row.input_ids[None, :], row.loss_mask[None, :])
    with stage("write parquet (tables, zstd, fsync)"):
        with tempfile.TemporaryDirectory() as out:
            write_rows(iter(rows), Path(out) / "rows.parquet", config.row_tokens, _NoHash())
    print(f"{len(conversations):,} conversations read, {tokens:,} tokens; the build keeps "
          f"{stats.tokens_kept:,} ({stats.conversations_read:,} conversations)\n")
    print(f"{'stage':<52}{'wall s':>8}{'CPU s':>8}{'CPU ns/token':>14}")
    for name, (wall, cpu) in TOTALS.items():
        print(f"{name:<52}{wall:>8.2f}{cpu:>8.2f}{cpu / tokens * 1e9:>14.1f}")
    total = sum(cpu for name, (_, cpu) in TOTALS.items() if not name.startswith(("encode_batch", " ", "(")))
    print(f"{'all stages but encode_batch':<52}{'':>8}{total:>8.2f}{total / tokens * 1e9:>14.1f}")


class _NoHash:
    """write_rows hashes as it writes; the hash has its own stage above."""

    def update_rows(self, input_ids, loss_mask) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
