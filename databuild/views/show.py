"""`databuild show`: one row decoded, its targets, conversation starts, and its tool calls, tool
results and reasoning marked: from the record where its source is here (views/record_marks.py), else
from the markup in the decoded text (views/marks.py).

Only the row group holding the row is read (rowfile.read.read_rows locates it from the parquet footer), so row 6,000 of a
6,400 x 8,192 file costs one row group, not the file. The tokenizer comes from `pinned_tokenizer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..rowfile.read import StoredRow
from ..rowfile.schema import check_token_ids
from .marks import Region, regions
from .record_marks import TokenRegion

# Control characters would move the cursor or recolour the terminal (data can hold ANSI escapes);
# print C0/DEL as their Unicode "control pictures" and C1 as \x.. instead. Newline and tab stay.
_PRINTABLE = {c: 0x2400 + c for c in range(32) if chr(c) not in "\n\t"}
_PRINTABLE.update({0x7F: 0x2421, **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)}})


@dataclass(frozen=True)
class Span:
    """Tokens [start, end) with one mask value, inside one conversation segment."""
    start: int
    end: int
    supervised: bool
    segment: int


def spans(row: StoredRow, marked: dict[int, list[TokenRegion]] | None = None) -> list[Span]:
    """Runs of equal mask, also cut where a conversation starts and where a region of `marked` (by
    segment) opens or closes, up to the padding (shown apart by compose); vectorised, no loop over tokens."""
    size = row.padding_start
    flips = np.flatnonzero(np.diff(row.loss_mask.astype(np.int8))) + 1
    bounds = [b for found in (marked or {}).values() for r in found for b in (r.start, r.end)]
    cuts = np.union1d(np.union1d(np.union1d(flips, row.seq_start_id), [0, size]), np.array(bounds, dtype=np.int64))
    starts, ends = cuts[:-1], cuts[1:]
    segments = np.searchsorted(row.seq_start_id, starts, side="right") - 1
    return [Span(int(s), int(e), bool(row.loss_mask[s]), int(g))
            for s, e, g in zip(starts, ends, segments) if s < size]


def check_decodable(tokenizer, row: StoredRow, path: Path) -> None:
    """Refuses, in one line, a row holding an id the tokenizer has not: decoding it is an OverflowError."""
    check_token_ids(row.input_ids, row.index, len(row.input_ids), path, len(tokenizer),
                    f"the {len(tokenizer):,} ids of the tokenizer it is decoded with")


def decode_spans(tokenizer, row: StoredRow, parts: list[Span]) -> list[str]:
    """Each span's text as it reads within the row. A span decoded alone can lose its leading space
    (Metaspace decoders strip the first token's) or split a multi-byte character, so the row's
    prefixes up to each span's end are decoded and differenced; a span whose prefix does not extend
    the one before (a character cut at the boundary) is decoded alone."""
    options = dict(skip_special_tokens=False, clean_up_tokenization_spaces=False)
    prefixes = tokenizer.batch_decode([row.input_ids[:p.end].tolist() for p in parts], **options)
    texts, before = [], ""
    for part, prefix in zip(parts, prefixes):
        texts.append(prefix[len(before):] if prefix.startswith(before) else
                     tokenizer.decode(row.input_ids[part.start:part.end].tolist(), **options))
        before = prefix
    return texts


def id_texts(row: StoredRow, parts: list[Span]) -> list[str]:
    """The no-tokenizer fallback: token ids, space separated."""
    return [" ".join(map(str, row.input_ids[p.start:p.end].tolist())) + " " for p in parts]


def printable(text: str) -> str:
    return text.translate(_PRINTABLE)


def _record_regions(parts: list[Span], texts: list[str], found: list[TokenRegion]) -> list[Region]:
    """A segment's token regions (each bound a span's start or end: spans cut there) as character
    offsets in the segment's text."""
    at, offset = {}, 0
    for part, text in zip(parts, texts):
        at.setdefault(part.start, offset)
        offset += len(text)
        at[part.end] = offset
    return [Region(at[r.start], at[r.end], r.kind) for r in found if r.start in at and r.end in at and r.start < r.end]


def pieces(parts: list[Span], texts: list[str],
           marked: dict[int, list[TokenRegion]] | None = None) -> list[tuple[Span, list[str], str]]:
    """(span, region labels before it, a piece of its text): the texts cut where the regions (tool
    calls, tool results, reasoning) open and close within each segment: `marked`'s (by segment) where
    it has the segment, else those views/marks.py reads in the segment's text."""
    out: list[tuple[Span, list[str], str]] = []
    first = 0
    while first < len(parts):
        last = first
        while last < len(parts) and parts[last].segment == parts[first].segment:
            last += 1
        bounds: dict[int, list[str]] = {}
        segment = parts[first].segment
        found = _record_regions(parts[first:last], texts[first:last], marked[segment]) \
            if marked is not None and segment in marked else regions("".join(texts[first:last]))
        for region in found:
            bounds.setdefault(region.start, []).append(f"⟨{region.kind}⟩")
            bounds.setdefault(region.end, []).insert(0, f"⟨/{region.kind}⟩")
        offset = 0
        for part, text in zip(parts[first:last], texts[first:last]):
            cuts = sorted(b for b in bounds if offset <= b < offset + len(text)) or [offset]
            if cuts[0] != offset:
                cuts.insert(0, offset)
            for low, high in zip(cuts, cuts[1:] + [offset + len(text)]):
                out.append((part, bounds.pop(low, []), text[low - offset:high - offset]))
            offset += len(text)
        if bounds:  # regions closing at the segment's end
            out.append((parts[last - 1], [label for b in sorted(bounds) for label in bounds[b]], ""))
        first = last
    return out


def compose(row: StoredRow, parts: list[Span], texts: list[str], *, target: Callable[[str], str],
            marker: Callable[[str], str], escape: Callable[[str], str] = printable,
            region: Callable[[str], str] | None = None, marked: dict[int, list[TokenRegion]] | None = None) -> str:
    """The row as text: a marker line where each conversation segment starts, targets wrapped, and
    with `region`, labels where tool calls, tool results and reasoning open and close (⟨tool call⟩
    ... ⟨/tool call⟩): `marked`'s regions (by segment, from the record), else views/marks.py's."""
    out, at_line_start, previous = [], True, None
    starts = set(row.seq_start_id.tolist())
    ends = np.append(row.seq_start_id[1:], len(row.input_ids))
    cut = pieces(parts, texts, marked) if region is not None else [(p, [], t) for p, t in zip(parts, texts)]
    for part, labels, text in cut:
        if part.start in starts and part is not previous:
            k = part.segment
            note = " (continued from an earlier row)" if k == 0 and row.continued else ""
            label = f"⟦{row.conversation_ids[k]}⟧ tokens {part.start}..{int(ends[k]) - 1}{note}"
            out.append(("" if at_line_start else "\n") + marker(escape(label)) + "\n")
        previous = part
        out += [region(label) for label in labels]
        if text:
            out.append(target(escape(text)) if part.supervised else escape(text))
        at_line_start = text.endswith("\n") if text else (at_line_start and not labels)
    size, pad = len(row.input_ids), row.padding_start
    if pad < size:  # thousands of one pad token say nothing decoded: one line says it all
        label = f"⟦padding⟧ tokens {pad}..{size - 1}: {size - pad} × token id {int(row.input_ids[pad])}, never targets"
        out.append(("" if at_line_start else "\n") + marker(escape(label)) + "\n")
        at_line_start = True
    return "".join(out) + ("" if at_line_start else "\n")


def row_header(row: StoredRow, total_rows: int) -> str:
    supervised, size, pad = int(np.count_nonzero(row.loss_mask)), len(row.input_ids), row.padding_start
    segments = len(row.seq_start_id) - (pad < size)
    return (f"row {row.index} of {total_rows}: supervised {supervised} / {size} tokens "
            f"({supervised / max(size, 1):.2%}), {_plural(segments, 'conversation segment')}"
            + (f", {size - pad} padding tokens" if pad < size else ""))


def controls_line(manifest: dict | None) -> str:
    """The training controls that shaped the file, where they are not the defaults (from its manifest's
    build section); '' when none is."""
    build = (manifest or {}).get("build") or {}
    said = []
    if build.get("train_turns", "all") != "all":
        said.append(f"train_turns: {build['train_turns']} (targets of the other turns off)")
    if (build.get("dedup") or {}).get("policy", "none") != "none":
        said.append(f"dedup: {build['dedup']['policy']}")
    split = build.get("validation")
    if split:
        amount = f"count {split['count']}" if split.get("count") is not None else f"share {split['share']}"
        said.append(f"the {split['split']} split of a validation split ({amount} of each source, seed {split['seed']})")
    if build.get("rows") == "all":
        said.append("rows: all")
    return "controls: " + "; ".join(said) if said else ""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
