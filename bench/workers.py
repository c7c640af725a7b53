"""The measured paths, each run by run.py in a process of its own: `python bench/workers.py JOB.json`.

A process per path keeps peak RSS (VmHWM) per path and stops one path's warm caches or
thread pools from helping the next. Each worker reads its job (a JSON file), writes its result
JSON to job["result"], and times only what its path is about:

- size:  tokens per conversation on a sample, to choose how many rows the build asks for;
- floor: the tokenizer's batch encode of already-rendered text, nothing else;
- peer:  transformers' apply_chat_template(tokenize=True, return_assistant_tokens_mask=True), one
         conversation at a time, as TRL-style trainers prepare SFT data;
- make:  databuild.build.make end to end (read, permute, render, tokenize, mask, pack, hash, write).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

# Phi-3's template has no {% generation %} block, so return_assistant_tokens_mask would return all
# zeros. The peer path uses a copy with the block around what databuild's `assistant` strategy
# supervises (the content and the <|end|> after it), so both paths really compute masks.
PHI3_ASSISTANT = "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
PHI3_ASSISTANT_GENERATION = ("{{'<|assistant|>\n'}}{% generation %}{{message['content'] + '<|end|>'}}"
                             "{% endgeneration %}{{'\n'}}")


def peak_rss_mib() -> dict[str, float]:
    """This process's peak RSS, and the largest of its finished children's (spawned build workers)."""
    hwm = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    if hwm is None:  # ru_maxrss is KiB on Linux
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"self": round(hwm, 1), "children": round(children, 1)}


def load_tokenizer(directory: str):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


def conversations_in_order(corpus: str, seed: int, count: int) -> list[list[dict[str, str]]]:
    """The first `count` conversations of the build's stream: its permutation, its file order."""
    paths = sorted((Path(corpus) / "data").glob("train-*.parquet"))
    table = pa.concat_tables([pq.read_table(p, columns=["messages"]) for p in paths])
    order = np.random.default_rng(seed).permutation(table.num_rows)[:count]
    return table.take(pa.array(order)).column("messages").to_pylist()


def peer_template(tokenizer) -> str:
    template = tokenizer.chat_template
    if "{% generation %}" in template or "{%- generation -%}" in template:
        return template
    if PHI3_ASSISTANT in template:
        return template.replace(PHI3_ASSISTANT, PHI3_ASSISTANT_GENERATION)
    raise SystemExit("peer path: the chat template has no {% generation %} block and is not Phi-3's; "
                     "transformers cannot compute assistant masks with it")


class StreamHasher:
    """databuild's rows_sha256 recomputed from per-conversation (ids, mask): the pack rules of
    databuild/pack.py (one separator between conversations unless the render already ends with it,
    fixed rows, rows without a target skipped) and the row bytes of databuild/hashing.py."""

    def __init__(self, row_tokens: int, separator_id: int, rows: int):
        self.row_tokens, self.separator_id, self.rows_wanted = row_tokens, separator_id, rows
        self.sha = hashlib.sha256()
        self.ids: list[np.ndarray] = []
        self.mask: list[np.ndarray] = []
        self.pending = self.rows = 0
        self.last: int | None = None

    def add(self, ids: list[int], mask: list[int]) -> None:
        if self.rows >= self.rows_wanted:
            return
        if self.last is not None and self.last != self.separator_id:
            self._push(np.array([self.separator_id], dtype=np.int32), np.zeros(1, dtype=np.int8))
        self._push(np.asarray(ids, dtype=np.int32), np.asarray(mask, dtype=np.int8))
        self.last = ids[-1] if ids else self.last

    def _push(self, ids: np.ndarray, mask: np.ndarray) -> None:
        self.ids.append(ids)
        self.mask.append(mask)
        self.pending += len(ids)
        if self.pending < self.row_tokens:
            return
        ids, mask = np.concatenate(self.ids), np.concatenate(self.mask)
        full = self.pending // self.row_tokens * self.row_tokens
        for low in range(0, full, self.row_tokens):
            row_mask = mask[low:low + self.row_tokens]
            if row_mask.any() and self.rows < self.rows_wanted:
                self.sha.update(ids[low:low + self.row_tokens].astype("<i4").tobytes())
                self.sha.update(row_mask.astype(np.uint8).tobytes())
                self.rows += 1
        self.ids, self.mask, self.pending = [ids[full:]], [mask[full:]], self.pending - full

    def hexdigest(self) -> str | None:
        return self.sha.hexdigest() if self.rows == self.rows_wanted else None


def run_size(job: dict) -> dict:
    """Mean tokens per conversation over a sample of the stream (rendered as the floor renders)."""
    tokenizer = load_tokenizer(job["tokenizer"])
    sample = conversations_in_order(job["corpus"], job["seed"], job["sample"])
    texts = [tokenizer.apply_chat_template(c, tokenize=False, **job["template_kwargs"]) for c in sample]
    encodings = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    return {"conversations": len(sample), "tokens": sum(len(e.ids) for e in encodings)}


def run_floor(job: dict) -> dict:
    tokenizer = load_tokenizer(job["tokenizer"])
    conversations = conversations_in_order(job["corpus"], job["seed"], job["conversations"])
    started = time.perf_counter()
    texts = [tokenizer.apply_chat_template(c, tokenize=False, **job["template_kwargs"]) for c in conversations]
    render_seconds = time.perf_counter() - started
    del conversations
    backend, size = tokenizer.backend_tokenizer, job["batch_size"]
    tokens, seconds = 0, 0.0
    for low in range(0, len(texts), size):
        batch = texts[low:low + size]
        started = time.perf_counter()
        encodings = backend.encode_batch(batch, add_special_tokens=False)
        seconds += time.perf_counter() - started
        tokens += sum(len(e.ids) for e in encodings)
    return {"conversations": len(texts), "tokens": tokens, "seconds": seconds,
            "render_seconds": render_seconds}


def run_peer(job: dict) -> dict:
    tokenizer = load_tokenizer(job["tokenizer"])
    template = peer_template(tokenizer)
    conversations = conversations_in_order(job["corpus"], job["seed"], job["conversations"])
    separator = job.get("separator") or tokenizer.eos_token
    hasher = StreamHasher(job["row_tokens"], tokenizer.convert_tokens_to_ids(separator), job["rows"])
    tokens, supervised, seconds = 0, 0, 0.0
    for conversation in conversations:
        started = time.perf_counter()
        out = tokenizer.apply_chat_template(conversation, chat_template=template, tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True,
                                            **job["template_kwargs"])
        seconds += time.perf_counter() - started
        # Outside the timed region: the cross-check against the build's rows_sha256.
        tokens += len(out["input_ids"])
        supervised += sum(out["assistant_masks"])
        hasher.add(out["input_ids"], out["assistant_masks"])
    return {"conversations": len(conversations), "tokens": tokens, "seconds": seconds,
            "supervised_tokens": supervised, "rows_sha256": hasher.hexdigest()}


def run_make(job: dict) -> dict:
    from databuild.build import make
    from databuild.config import load_config

    config = load_config(job["config"])
    started = time.perf_counter()
    result = make(config, Path(job["out"]), offline=True, workers=job["workers"],
                  batch_size=job["batch_size"], progress=False)
    seconds = time.perf_counter() - started
    output, counts = result.data["output"], result.data["counts"]
    return {"conversations": counts["conversations_read"], "tokens": output["tokens"], "seconds": seconds,
            "rows": output["rows"], "supervised_tokens": output["supervised_tokens"],
            "rows_skipped": counts["rows_skipped"]["no_supervised_token"],
            "rows_sha256": output["rows_sha256"], "parquet_bytes": output["parquet_bytes"]}


PATHS = {"size": run_size, "floor": run_floor, "peer": run_peer, "make": run_make}


def main(job_file: str) -> None:
    job = json.loads(Path(job_file).read_text())
    result = PATHS[job["path"]](job)
    result["peak_rss_mib"] = peak_rss_mib()
    Path(job["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
