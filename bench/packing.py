#!/usr/bin/env python
"""What packing costs alone, per conversation: each policy over one synthetic tokenized stream, and the
row file's share of the rows' identity (the conversation ids of each row, as the writer and the
segments' hash take them). No tokenizer, no source: the stream is made here, seeded.

    .venv/bin/python bench/packing.py [--conversations 200000] [--row-tokens 8192] [--repeat 5]

Prints, for each policy, the best of `--repeat` runs in CPU ns per conversation; a patched copy is
measured by putting it first on PYTHONPATH (run from outside the repo root).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def stream(n: int, seed: int) -> list:
    from databuild.records.conversation import TokenizedConversation
    from databuild.records.origin import Origin

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(6.0, 1.0, n).astype(np.int64), 2, 6000)  # median ~400 tokens
    ids = rng.integers(10, 32000, int(lengths.sum()), dtype=np.int32)
    mask = (rng.random(len(ids)) < 0.6).astype(np.int8)
    ends = np.cumsum(lengths).tolist()
    return [TokenizedConversation(Origin(k, k, f"c-{k}", f"s{k % 3}"), ids[low:high], mask[low:high])
            for k, (low, high) in enumerate(zip([0] + ends[:-1], ends))]


def best_cpu(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        cpu = time.process_time()
        run()
        times.append(time.process_time() - cpu)
    return min(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=200_000)
    parser.add_argument("--row-tokens", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args(argv)

    from databuild.pack.policy import POLICIES
    from databuild.pack.rows import Packing, PackStats
    from databuild.rowfile.hashes import SegmentsHasher

    conversations = stream(args.conversations, args.seed)
    n = len(conversations)
    print(f"{n} conversations, {sum(len(c.input_ids) for c in conversations)} tokens, "
          f"rows of {args.row_tokens}; best of {args.repeat}, CPU ns per conversation")
    for policy in sorted(POLICIES):
        packing = Packing(policy, args.row_tokens, "<sep>", 2) if policy == "concat" else \
            Packing(policy, args.row_tokens, "<sep>", 2, "<pad>", 0, "config", 1000, "truncate")
        rows: list = []

        def pack():
            rows[:] = POLICIES[policy](iter(conversations), packing, PackStats())

        def identity():
            hasher = SegmentsHasher()
            for row in rows:
                hasher.update(row.seq_start_id, row.conversation_ids)
            [list(row.conversation_ids) for row in rows]

        packed = best_cpu(pack, args.repeat)
        read = best_cpu(identity, args.repeat)
        print(f"  {policy:<7} pack {packed / n * 1e9:8.0f}   the rows' ids (write, segments' hash) "
              f"{read / n * 1e9:6.0f}   ({len(rows)} rows)")


if __name__ == "__main__":
    main()
