"""`databuild diff`'s text: one screen saying why A and B differ.

Its first line is the verdict and the causes (`differ: seed 42 → 7; rows: 36 of 40 differ, in ids,
masks`); then what each side is; what they were made from, side by side; how their rows differ; and
the first differing conversation decoded from both with its tokenizer, targets in [[...]], the first
differing token after ▶. Only that window of that row is decoded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..compare import CONFIG, MANIFEST, Diff, FirstDifference, Side
from ..errors import BuildError
from ..publish.manifest_diff import ABSENT, Change
from ..rowfile.row_digests import RowsDiff
from ..rowfile.read import StoredRow
from .show import check_decodable, decode_spans, id_texts, printable, spans

CAUSES_SHOWN = 4  # causes named on the first line
CHANGES_SHOWN = 12  # lines of the made-from table, unless everything is asked for
CUT_SHOWN = 3  # conversation ids named as cut elsewhere
CONTEXT = 40  # tokens decoded on each side of the first differing token
VALUE_WIDTH = 34
POINTER = "▶"


def _value(value: Any, width: int = VALUE_WIDTH) -> str:
    text = "absent" if value is ABSENT else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = printable(text)
    return text if len(text) <= width else text[:width - 1] + "…"


def _scalar(value: Any) -> bool:
    return value is ABSENT or isinstance(value, (str, int, float, bool)) or value is None


def headline_causes(result: Diff) -> list[str]:
    """The causes, each with its old and new value where it is one short value: `seed 42 → 7`."""
    named = []
    for cause in result.causes:
        one = cause.changes[0]
        shown = len(cause.changes) == 1 and _scalar(one.a) and _scalar(one.b) and \
            not cause.name.startswith(("tokenizer file", "source file"))  # hashes say nothing in a headline
        named.append(cause.name + (f" {_value(one.a, 24)} → {_value(one.b, 24)}" if shown else ""))
    return named


def _rows_phrase(rows: RowsDiff) -> str:
    if rows.same:
        return "rows identical"
    count = len(rows.differing) + abs(rows.rows_a - rows.rows_b)
    known = f", in {', '.join(rows.kinds)}" if rows.kinds else ""
    return f"rows: {count} of {max(rows.rows_a, rows.rows_b)} differ{known}"


def _unfaithful(result: Diff) -> list[str]:
    return [f"{name}'s rows do not match its own manifest {s.unfaithful} (changed after its build?)"
            for name, s in (("A", result.a), ("B", result.b)) if s.unfaithful is not None]


def headline(result: Diff) -> str:
    if result.identical:
        compared = result.a.manifest is not None and result.b.manifest is not None
        what = ", ".join(["same pins"] * compared + ["same rows"] * (result.rows is not None))
        return f"identical: {what}" + (", same file bytes" if result.same_bytes else "")
    named = headline_causes(result)
    parts = named[:CAUSES_SHOWN] + ([f"and {len(named) - CAUSES_SHOWN} more"] if len(named) > CAUSES_SHOWN else [])
    if result.rows is not None:
        phrase = _rows_phrase(result.rows)
        unknown = [name for name, s in (("A", result.a), ("B", result.b)) if s.manifest is None]
        if unknown:
            phrase += f" (no manifest for {' and '.join(unknown)}: pins not compared)"
        parts.append(phrase if named or unknown else f"the rows only (same pins): {phrase.removeprefix('rows: ')}")
    if result.rows is not None and result.rows.same and result.same_bytes is False:
        parts.append("file bytes differ")
    return "differ: " + "; ".join(parts + _unfaithful(result))


def describe(name: str, s: Side) -> str:
    manifest = s.manifest or {}
    what = f"{name}  {s.given}: {s.kind}"
    if manifest.get("name"):
        what += f" {manifest['name']}"
    if s.kind == CONFIG:
        return what + " (its pinned inputs, resolved and hashed here; nothing built, rows not compared)"
    if s.digests is not None:
        what += f", {len(s.digests.rows)} rows"
    output = manifest.get("output") or {}
    if output.get("rows_sha256") and s.unfaithful is None:  # a file that does not match it is not its figure
        what += f", rows_sha256 {output['rows_sha256'][:16]}…"
    if s.manifest is None:
        what += " (no manifest beside it: its pins are unknown)"
    elif s.kind == MANIFEST:
        what += " (rows compared by its row_digests)"
    return what


def change_table(found: tuple[Change, ...], everything: bool) -> list[str]:
    if not found:
        return []
    shown = found if everything else found[:CHANGES_SHOWN]
    width = min(max(len(c.key) for c in shown), 56)
    lines = [f"made from: {len(found)} difference{'s' if len(found) != 1 else ''}",
             f"  {'':<{width}}  {'A':<{VALUE_WIDTH}}  B"]
    lines += [f"  {c.key:<{width}}  {_value(c.a):<{VALUE_WIDTH}}  {_value(c.b)}" for c in shown]
    if len(shown) < len(found):
        lines.append(f"  … and {len(found) - len(shown)} more (--all shows them)")
    return lines


def rows_section(result: Diff) -> list[str]:
    rows = result.rows
    if rows is None:
        return []
    lines = [_rows_phrase(rows) + (f" (A {rows.rows_a} rows, B {rows.rows_b})" if rows.rows_a != rows.rows_b else "")]
    if rows.conversations is not None and rows.conversations.differing:
        c = rows.conversations
        lines.append(f"conversations: {c.differing} of {c.total} ids differ ({len(c.changed)} in both with other "
                     f"tokens or targets, {c.only_a} in A only, {c.only_b} in B only)")
        if c.cut:
            shown = ", ".join(c.cut[:CUT_SHOWN]) + (", …" if len(c.cut) > CUT_SHOWN else "")
            lines.append(f"  of those in both, {len(c.cut)} differ only where a row boundary cuts them (one file "
                         f"holds a prefix or suffix of the other's tokens, same targets): {shown}")
    if rows.moved_count:
        examples = ", ".join(f"B row {b} is A row {a}" for b, a in rows.moved)
        lines.append(f"order: {rows.moved_count} row{'s' if rows.moved_count != 1 else ''} of B stand elsewhere "
                     f"in A: {examples}" + (", …" if rows.moved_count > len(rows.moved) else ""))
    if rows.first is not None and result.first is None and rows.first_content is not None:
        lines.append(f"first differing row {rows.first_content} (decoded only between two row files)")
    elif rows.first is not None and rows.first_content is None and not rows.moved_count:
        lines.append(f"first differing row {rows.first}: {'B' if rows.rows_b > rows.rows_a else 'A'} has more rows")
    return lines


Tokenizers = Callable[[Side], tuple[Any, str]]  # a side's tokenizer (None: show ids) and a note


def first_section(first: FirstDifference, tokenizers: Tokenizers, a: Side, b: Side) -> list[str]:
    lines = []
    segments = {name: (row, first.segment(row)) for name, row in (("A", first.a), ("B", first.b))}
    ids = {name: row.conversation_ids[k] or "padding" for name, (row, k) in segments.items()}
    where = ids["A"] if ids["A"] == ids["B"] else f"{ids['A']} in A, {ids['B']} in B"
    lines.append(f"first differing row {first.row}, conversation {where}, token {first.token}:")
    for (name, (row, k)), s in zip(segments.items(), (a, b)):
        tokenizer, note = tokenizers(s)
        if tokenizer is not None:
            check_decodable(tokenizer, row, s.parquet)
        lines += _window(name, row, k, first.token, tokenizer, note)
    return lines


def _window(name: str, row: StoredRow, k: int, token: int, tokenizer, note: str) -> list[str]:
    start = int(row.seq_start_id[k])
    end = int(row.seq_start_id[k + 1]) if k + 1 < len(row.seq_start_id) else len(row.input_ids)
    here = min(token, len(row.input_ids))
    low, high = max(start, here - CONTEXT), min(end, here + CONTEXT)
    label = f"⟦{row.conversation_ids[k] or 'padding'}⟧ tokens {start}..{end - 1}" + (
        " (continued from an earlier row)" if k == 0 and row.continued else "")
    lines = [f"--- {name} row {row.index}, {label}; shown: tokens {low}..{high - 1} {note}"]
    if here < len(row.input_ids):
        target = "a target" if row.loss_mask[here] else "not a target"
        text = _decode(tokenizer, row.input_ids[here:here + 1]) if tokenizer is not None else ""
        lines.append(f"    token {here}: id {int(row.input_ids[here])}{' ' + repr(text) if text else ''}, {target}")
    else:
        lines.append(f"    token {here}: past the row's end ({len(row.input_ids)} tokens)")
    cut = [0] + ([here - low] if low < here < high else [])
    window = StoredRow(row.index, row.input_ids[low:high], row.loss_mask[low:high], np.array(cut, dtype=np.int32),
                 ("window",) * len(cut), False)
    parts = spans(window)
    texts = decode_spans(tokenizer, window, parts) if tokenizer is not None else id_texts(window, parts)
    body = "".join((POINTER if low + p.start == here else "") + (f"[[{printable(t)}]]" if p.supervised else printable(t))
                   for p, t in zip(parts, texts))
    if high == here:
        body += POINTER
    return lines + ["    " + line for line in body.split("\n")]


def _decode(tokenizer, ids: np.ndarray) -> str:
    return tokenizer.decode(ids.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def pinned_tokenizers(name_or_dir: str | None = None, loaded: dict[Path, Any] | None = None) -> Tokenizers:
    """Each side's pinned tokenizer (views/show.py's rule), loaded once per directory (`loaded`: those
    the caller has, by directory); without one found, token ids are shown and the note says why."""
    from ..encode.render import load_tokenizer
    from ..inputs.tokenizer import tokenizer_dir

    loaded = {} if loaded is None else dict(loaded)

    def find(s: Side) -> tuple[Any, str]:
        try:
            directory = tokenizer_dir(s.parquet, name_or_dir, s.manifest)
            if directory not in loaded:
                loaded[directory] = load_tokenizer(directory)
        except BuildError as exc:  # the explanation stands without the text: ids say where
            return None, f"(token ids: {exc})"
        return loaded[directory], f"(decoded with {directory}; targets in [[...]])"
    return find


def render(result: Diff, tokenizers: Tokenizers | None = None, everything: bool = False) -> str:
    lines = [headline(result), describe("A", result.a), describe("B", result.b)]
    if result.a.manifest is not None and result.b.manifest is not None and not result.changes:
        lines.append("made from: the same pins (format, name, build, inputs, versions)")
    lines += change_table(result.changes, everything) + rows_section(result)
    if result.first is not None:
        lines += first_section(result.first, tokenizers or pinned_tokenizers(), result.a, result.b)
    return "\n".join(lines) + "\n"
