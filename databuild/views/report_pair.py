"""`report` on a preference row file (issue 34): one self-contained HTML page, as views/report.py writes for
SFT rows, of what a preference build did: its funnel (pairs read, refused and dropped by kind, kept: the
manifest's counts), its figures, the lengths of chosen against rejected (from the file, row group by row
group), the first pairs decoded (the shared prompt marked) and its pins."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from ..errors import BuildError
from ..records.pair import COMPLETION_NAMES
from ..rowfile.preference_read import read_pairs
from .charts import _figure, svg_bars, svg_hbars, WIDE
from .report import CSS, _flatten, _table
from .show_pair import compose_pair, preference_manifest, preference_kind


def lengths(path: Path) -> dict[str, np.ndarray]:
    """Per row: the prompt's tokens, each completion's tokens and targets (one row group in memory at a time)."""
    kind = preference_kind(path)
    names = COMPLETION_NAMES[2 if kind == "paired" else 1]
    found: dict[str, list[int]] = {key: [] for key in ("prompt", *names, *(f"{n}_targets" for n in names))}
    for pair in read_pairs(path):
        found["prompt"].append(len(pair.prompt_ids))
        for name, ids, mask in zip(names, pair.completion_ids, pair.completion_masks):
            found[name].append(len(ids))
            found[f"{name}_targets"].append(int(mask.sum()))
    return {key: np.asarray(values, dtype=np.int64) for key, values in found.items()}


def _histograms(series: dict[str, np.ndarray], unit: str, xlabel: str, bars: int = 32) -> dict[str, str]:
    """One histogram per series over the same bins and the same height, so that they compare by eye."""
    values = np.concatenate(list(series.values())) if series else np.zeros(0, np.int64)
    lo, hi = int(values.min(initial=0)), int(values.max(initial=0))
    edges = np.arange(lo, hi + 2) if hi - lo + 1 <= bars else \
        np.unique(np.linspace(lo, hi + 1, bars + 1).round().astype(int))
    counts = {name: np.histogram(v, bins=edges)[0] for name, v in series.items()}
    top = max((int(c.max(initial=0)) for c in counts.values()), default=0)
    names = [str(a) if b - a == 1 else f"{a}..{b - 1}" for a, b in zip(edges[:-1], edges[1:])]
    ticks = [(i, str(edges[i])) for i in sorted({0, len(names) // 2, len(names) - 1}) if names]
    return {name: svg_bars(c, [f"{n}: {int(k):,} {unit}" for n, k in zip(names, c)], ticks, xlabel, top=top or None)
            for name, c in counts.items()}


def funnel(manifest: dict | None) -> str:
    """Pairs read, each refusal and drop by kind (the manifest's counts), and kept."""
    counts = (manifest or {}).get("counts") or {}
    if not counts:
        return '<div class="warn">no manifest beside the file: the funnel is unknown</div>'
    items = [("read from the sources", counts.get("pairs_read", 0), f"{counts.get('pairs_read', 0):,}")]
    for group, what in (("pairs_refused", "refused"), ("pairs_dropped", "dropped")):
        items += [(f"{what}: {kind.replace('_', ' ')}", n, f"{n:,}") for kind, n in (counts.get(group) or {}).items()
                  if n]
    items.append(("kept (rows)", counts.get("pairs_kept", 0), f"{counts.get('pairs_kept', 0):,}"))
    return _figure("Where the pairs went", svg_hbars(items, WIDE),
                   "every pair read in one box: refused or dropped by kind (manifest counts.pairs_refused, "
                   f"counts.pairs_dropped), or kept; prompts cut: {counts.get('prompts_cut', 0):,}", wide=True)


def charts(found: dict[str, np.ndarray], paired: bool) -> str:
    names = ("chosen", "rejected") if paired else ("completion",)
    sides = _histograms({name: found[name] for name in names}, "rows", "tokens after the prompt")
    figures = [_figure(f"{name.capitalize()} lengths", sides[name],
                       f"median {np.median(found[name]) if len(found[name]) else 0:,.0f} tokens, "
                       f"{int(found[f'{name}_targets'].sum()):,} targets in all; same bins and scale as "
                       f"{'the other side' if paired else 'nothing'}") for name in names]
    figures.append(_figure("Prompt lengths", _histograms({"p": found["prompt"]}, "rows", "tokens")["p"],
                           f"median {np.median(found['prompt']) if len(found['prompt']) else 0:,.0f}"))
    if paired:
        difference = found["chosen"] - found["rejected"]
        figures.append(_figure("Chosen minus rejected", _histograms({"d": difference}, "pairs",
                                                                    "chosen tokens - rejected tokens")["d"],
                               f"chosen longer in {int((difference > 0).sum()):,} pairs, shorter in "
                               f"{int((difference < 0).sum()):,}, as long in {int((difference == 0).sum()):,} (a "
                               "length bias the preference would teach)"))
    return '<div class="grid">' + "".join(figures) + "</div>"


def viewer(path: Path, count: int, tokenizer) -> str:
    pairs, total = [], 0
    for pair in read_pairs(path):
        total = pair.row + 1
        if len(pairs) < count:
            pairs.append(pair)
    out = []
    for pair in pairs:
        body = compose_pair(pair, total, tokenizer, path, target=lambda s: f"<mark>{s}</mark>",
                            marker=lambda s: f'<span class="conv">{s}</span>', escape=html.escape)
        out.append(f'<details{" open" if pair.row == 0 else ""}><summary>{html.escape(f"row {pair.row}: {pair.id}")}'
                   f"</summary><pre>{body}</pre></details>")
    return "".join(out)


def render_pair_report(path: Path, rows: int = 8, name_or_dir: str | None = None) -> str:
    """The page, as one string."""
    from ..encode.render import load_tokenizer
    from ..inputs.tokenizer import tokenizer_dir

    manifest = preference_manifest(path)
    found = lengths(path)
    paired = preference_kind(path) == "paired"
    output = (manifest or {}).get("output") or {"rows": len(found["prompt"])}
    cards = [(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
             for key, value in output.items() if key not in ("file", "parquet_sha256", "rows_sha256")]
    cards_html = '<div class="cards">' + "".join(f'<div class="card"><div class="k">{html.escape(k)}</div>'
                                                  f'<div class="v">{html.escape(v)}</div></div>' for k, v in cards) + "</div>"
    shown = ""
    if rows:
        try:
            tokenizer = load_tokenizer(tokenizer_dir(path, name_or_dir, manifest))
            shown = f"<h2>First {min(rows, len(found['prompt']))} rows</h2>{viewer(path, rows, tokenizer)}"
        except (BuildError, OSError, ValueError) as exc:  # no tokenizer here: the page without its viewer, saying why
            shown = f'<div class="warn">rows not decoded: {html.escape(str(exc))}</div>'
    pins = _table(_flatten({"output": output, "inputs": (manifest or {}).get("inputs") or {},
                            "build": (manifest or {}).get("build") or {}}))
    name = (manifest or {}).get("name") or path.name.removesuffix(".parquet")
    data = json.dumps({key: value.tolist() for key, value in found.items()}, separators=(",", ":"))
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{html.escape(name)}: databuild report</title>'
            f'<style>{CSS}</style></head><body><main><h1>{html.escape(name)}</h1><p class="sub">'
            f'{html.escape(str(path))} ({"pairs" if paired else "unpaired completions"})</p>'
            f'<div class="grid">{funnel(manifest)}</div>{cards_html}<h2>Lengths</h2>{charts(found, paired)}'
            f'{shown}<h2>Pins</h2>{pins}<script type="application/json" id="pair-lengths">{data}</script>'
            "</main></body></html>\n")
