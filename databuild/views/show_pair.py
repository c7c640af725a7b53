"""`show` on a preference row file (issue 34; rowfile/preference.py): one row decoded, its shared prompt
once and marked as such, then each completion as it follows the prompt, its targets highlighted (both
sides of a pair; an unpaired row's one completion with its label).

A completion is decoded after its prompt (the prompt's ids then the completion's, the prompt's text then
taken off), so its first token reads as it does in the sequence the trainer sees; a span decoded alone
can lose its leading space or split a character (views/show.py says the same of SFT rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq

from ..errors import BuildError
from ..records.pair import COMPLETION_NAMES
from ..rowfile.preference import FORMAT
from ..rowfile.preference_read import StoredPair, read_pairs
from ..rowfile.schema import check_token_ids

OPTIONS = dict(skip_special_tokens=False, clean_up_tokenization_spaces=False)


def preference_kind(path: Path) -> str | None:
    """paired or unpaired where `path` is a preference row file (its schema's databuild.format), else None."""
    try:
        found = (pq.read_schema(path).metadata or {}).get(b"databuild.format", b"").decode("utf-8", "replace")
    except Exception:  # not a parquet file: the SFT reader names why, in its words
        return None
    return {v: k for k, v in FORMAT.items()}.get(found)


def stored_pair(path: Path, row: int) -> tuple[StoredPair, int]:
    """Row `row` of the file and the file's row count (the row groups before it read one at a time)."""
    total = pq.ParquetFile(path).metadata.num_rows
    if not 0 <= row < total:
        raise BuildError(f"{path}: no row {row}: the file has {total:,} rows (0..{total - 1})")
    return next(pair for pair in read_pairs(path) if pair.row == row), total


def _runs(mask: np.ndarray) -> list[tuple[int, int, bool]]:
    """(start, end, target) of each run of equal mask values."""
    cuts = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    bounds = [0, *cuts.tolist(), len(mask)]
    return [(a, b, bool(mask[a])) for a, b in zip(bounds, bounds[1:]) if b > a]


def completion_pieces(tokenizer, prompt: np.ndarray, ids: np.ndarray, mask: np.ndarray) -> list[tuple[str, bool]]:
    """(text, target) of each run of the completion, decoded within prompt + completion."""
    runs = _runs(mask)
    sequence = np.concatenate([prompt, ids]).tolist()
    prefixes = tokenizer.batch_decode([sequence[:len(prompt) + end] for _, end, _ in [(0, 0, False), *runs]],
                                      **OPTIONS)
    pieces, before = [], prefixes[0]
    for (start, end, target), prefix in zip(runs, prefixes[1:]):
        text = prefix[len(before):] if prefix.startswith(before) else tokenizer.decode(ids[start:end].tolist(),
                                                                                        **OPTIONS)
        pieces.append((text, target))
        before = prefix
    return pieces


def compose_pair(pair: StoredPair, total: int, tokenizer, path: Path, *, target: Callable[[str], str],
                 marker: Callable[[str], str], escape: Callable[[str], str] = lambda s: s) -> str:
    """The row as text: a header, ⟦prompt⟧ and its text, then ⟦chosen⟧ and ⟦rejected⟧ (or ⟦completion⟧ with
    its label) and theirs, targets wrapped by `target`, the ⟦…⟧ lines by `marker`, every text (a target's
    included, before it is wrapped) through `escape` (the report's HTML)."""
    for ids in (pair.prompt_ids, *pair.completion_ids):
        check_token_ids(ids, pair.row, max(len(ids), 1), path, len(tokenizer),
                        f"the {len(tokenizer):,} ids of the tokenizer it is decoded with")
    names = COMPLETION_NAMES[len(pair.completion_ids)]
    sides = []
    for name, ids, mask in zip(names, pair.completion_ids, pair.completion_masks):
        label = "" if pair.label is None else f", {'desirable' if pair.label else 'undesirable'} (label {pair.label})"
        text = "".join(target(escape(t)) if is_target else escape(t) for t, is_target in
                       completion_pieces(tokenizer, pair.prompt_ids, ids, mask))
        sides.append(marker(escape(f"⟦{name}⟧ {len(ids):,} tokens after the prompt, {int(mask.sum()):,} targets{label}"))
                     + f"\n{text}\n")
    prompt = escape(tokenizer.decode(pair.prompt_ids.tolist(), **OPTIONS))
    shared = "shared by both completions" if len(names) == 2 else "the completion's context"
    header = (f"row {pair.row} of {total}: {'pair' if len(names) == 2 else 'unpaired completion'} "
              f"{pair.id!r}, prompt {len(pair.prompt_ids):,} tokens")
    return (f"{escape(header)}\n" + marker(escape(f"⟦prompt⟧ {len(pair.prompt_ids):,} tokens, rendered once, {shared}"))
            + f"\n{prompt}\n" + "".join(sides) + escape(header))


def preference_manifest(path: Path) -> dict | None:
    """The preference manifest beside `path`, or None where there is none."""
    from ..publish.manifest import manifest_path
    from ..publish.preference import read_preference_manifest

    beside = manifest_path(path)
    return read_preference_manifest(beside) if beside.is_file() else None


def show_pair(path: Path, row: int, name_or_dir: str | None, *, target: Callable[[str], str],
              marker: Callable[[str], str]) -> str:
    """`databuild show` on a preference row file: the row composed (compose_pair), decoded with the tokenizer
    given or the one its manifest pins."""
    from ..encode.render import load_tokenizer
    from ..inputs.tokenizer import tokenizer_dir

    pair, total = stored_pair(path, row)  # the row first: its index is checked before any tokenizer is loaded
    tokenizer = load_tokenizer(tokenizer_dir(path, name_or_dir, preference_manifest(path)))
    return compose_pair(pair, total, tokenizer, path, target=target, marker=marker)
