#!/usr/bin/env python
"""The cost of reading a source written as JSON Lines, per token, against tokenization (issue 29).

    .venv/bin/python bench/json_source.py [--conversations N] [--tokenizer DIR]

Writes the bench corpus (bench/corpus.py) as parquet, then the same rows as JSON Lines and as
zstd JSON Lines, and runs bench/stages.py on a config of each: every stage alone, its CPU per
token. The figures that differ between the three are the source's: resolving the inputs (hashing
the files, and for JSON counting its lines) and the spill's pass (parsing, the format's adapter,
the checks, the bucket files). The tokenizer's encode_batch is the same work in each: the floor
they are set against.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import corpus_dir, write_corpus, write_jsonl_copy  # noqa: E402
from run import CACHE, choose_tokenizer, write_config  # noqa: E402

STAGES = {"resolve inputs": "resolve", "spill, whole source": "spill", "encode_batch": "encode_batch"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=12_000)
    parser.add_argument("--corpus-seed", type=int, default=20261001)
    parser.add_argument("--tokenizer", type=Path, default=None)
    args = parser.parse_args(argv)
    tokenizer = choose_tokenizer(args.tokenizer)
    parquet = corpus_dir(CACHE, args.conversations, args.corpus_seed)
    write_corpus(parquet, args.conversations, args.corpus_seed)
    sources = {"parquet": parquet,
               "jsonl": write_jsonl_copy(parquet, parquet / "as-jsonl"),
               "jsonl.zst": write_jsonl_copy(parquet, parquet / "as-jsonl-zst", "zstd")}
    print(f"{args.conversations:,} conversations; tokenizer {tokenizer.name}")
    print("CPU ns per token of each stage (bench/stages.py)")
    print(f"{'source':<12}" + "".join(f"{short:>14}" for short in STAGES.values()) + f"{'bytes':>14}")
    with tempfile.TemporaryDirectory() as work:
        for name, root in sources.items():
            config = write_config(Path(work) / f"{name}.yaml", f"json-{name.replace('.', '-')}", root, tokenizer,
                                  "assistant", {}, 42, 8192, 1)
            out = subprocess.run([sys.executable, str(HERE / "stages.py"), str(config)], capture_output=True,
                                 text=True, check=True).stdout
            costs = [float(re.search(rf"^{re.escape(stage)}.*?([\d.]+)$", out, re.M).group(1)) for stage in STAGES]
            if name == "parquet":
                print(re.search(r"^[\d,]+ conversations read, [\d,]+ tokens", out, re.M).group(0))
            size = sum(p.stat().st_size for p in (root / "data").iterdir())
            print(f"{name:<12}" + "".join(f"{c:>14.1f}" for c in costs) + f"{size:>14,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
