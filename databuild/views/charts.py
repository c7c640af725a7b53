"""The report's charts: hand-written inline SVG, no script, no library, no external reference."""

from __future__ import annotations

import html

import numpy as np

W, H, LEFT, RIGHT, TOP, BOTTOM = 520, 210, 56, 12, 12, 40  # one chart's viewBox and margins
BARS = 228  # beyond this many rows, bars show buckets of rows (about 2 px a bar)
WIDE = 1040  # the source mix spans both columns: source names are long


def _num(value) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def _nice(value: float) -> float:
    """The axis top: value rounded up to 1, 2 or 5 times a power of ten, so ticks read as round numbers."""
    if value <= 2:
        return 2.0
    power = 10 ** np.floor(np.log10(value))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= value))


def svg_bars(heights, tips: list[str], ticks: list[tuple[int, str]], xlabel: str, top: float | None = None) -> str:
    """A vertical bar chart; ticks are (bar index, label) under the x axis."""
    heights = np.asarray(heights, dtype=float)
    top = float(top or _nice(heights.max(initial=0)))
    width, height = W - LEFT - RIGHT, H - TOP - BOTTOM
    step = width / max(len(heights), 1)
    gap = step * 0.15 if step > 4 else 0.0
    out = [f'<svg class="chart" viewBox="0 0 {W} {H}" role="img">']
    for frac in (0.0, 0.5, 1.0):
        y = TOP + height * (1 - frac)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="ytick" x="{LEFT - 6}" y="{y + 4:.1f}">{_num(top * frac)}</text>')
    for i, (value, tip) in enumerate(zip(heights, tips)):
        bar = height * value / top
        out.append(f'<rect x="{LEFT + i * step + gap / 2:.2f}" y="{TOP + height - bar:.2f}" '
                   f'width="{max(step - gap, 0.6):.2f}" height="{bar:.2f}"><title>{html.escape(tip)}</title></rect>')
    for i, label in ticks:
        out.append(f'<text class="xtick" x="{LEFT + (i + 0.5) * step:.1f}" y="{TOP + height + 15}">'
                   f'{html.escape(label)}</text>')
    out.append(f'<text class="xlabel" x="{LEFT + width / 2:.0f}" y="{H - 5}">{html.escape(xlabel)}</text></svg>')
    return "".join(out)


def svg_hbars(items: list[tuple[str, float, str]], width: int = W) -> str:
    """Horizontal bars: (label, value, value text); the label column fits the longest label."""
    label_w = min(8 + 7 * max((len(label) for label, _, _ in items), default=0), width // 2)
    top = max((value for _, value, _ in items), default=0) or 1
    room, row_h = width - label_w - 150, 22
    out = [f'<svg class="chart" viewBox="0 0 {width} {row_h * len(items) + 8}" role="img">']
    for k, (label, value, text) in enumerate(items):
        y, bar = 4 + k * row_h, room * value / top
        out.append(f'<text class="hlabel" x="{label_w - 8}" y="{y + 15}">{html.escape(label)}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{bar:.1f}" height="{row_h - 6}">'
                   f'<title>{html.escape(f"{label}: {text}")}</title></rect>'
                   f'<text class="hvalue" x="{label_w + bar + 6:.1f}" y="{y + 15}">{html.escape(text)}</text>')
    return "".join(out) + "</svg>"


def _ticks(count: int, label, wanted: int = 5) -> list[tuple[int, str]]:
    picks = sorted(set(np.linspace(0, count - 1, min(wanted, count)).round().astype(int).tolist())) if count else []
    return [(i, label(i)) for i in picks]


def per_row_chart(supervised: np.ndarray, row_tokens: int) -> str:
    """Bars per row; for many rows, per bucket of rows: the mean, with min and max in the tooltip."""
    n = len(supervised)
    if n <= BARS:
        tips = [f"row {i}: {int(v):,} supervised of {row_tokens:,}" for i, v in enumerate(supervised)]
        return svg_bars(supervised, tips, _ticks(n, str), "row", top=row_tokens)
    edges = np.linspace(0, n, BARS + 1).round().astype(int)
    low = edges[:-1]
    mean = np.add.reduceat(supervised, low) / np.diff(edges)
    lo, hi = np.minimum.reduceat(supervised, low), np.maximum.reduceat(supervised, low)
    tips = [f"rows {a}..{b - 1}: mean {m:,.0f}, min {x:,}, max {y:,} supervised of {row_tokens:,}"
            for a, b, m, x, y in zip(low, edges[1:], mean, lo, hi)]
    return svg_bars(mean, tips, _ticks(BARS, lambda i: str(low[i])), f"row (mean of ~{n // BARS} rows a bar)",
                    top=row_tokens)


def histogram_chart(values: np.ndarray, lo: int, hi: int, unit: str, xlabel: str, bars: int = 40) -> str:
    """A histogram of integers in [lo, hi]: one bar per value when they fit, else ranges."""
    if hi - lo + 1 <= bars:
        edges = np.arange(lo, hi + 2)
    else:
        edges = np.unique(np.linspace(lo, hi + 1, bars + 1).round().astype(int))
    counts, _ = np.histogram(values, bins=edges)
    names = [str(a) if b - a == 1 else f"{a}..{b - 1}" for a, b in zip(edges[:-1], edges[1:])]
    tips = [f"{name}: {int(c):,} {unit}" for name, c in zip(names, counts)]
    return svg_bars(counts, tips, _ticks(len(names), lambda i: str(edges[i])), xlabel)


def _figure(title: str, svg: str, caption: str, wide: bool = False) -> str:
    return (f'<figure class="{"wide" if wide else ""}"><figcaption><b>{html.escape(title)}</b> '
            f'{html.escape(caption)}</figcaption>{svg}</figure>')


def _share(items: dict, what: str) -> list[tuple[str, float, str]]:
    total = sum(v.get(what, 0) for v in items.values()) or 1
    return [(name, v.get(what, 0), f"{v.get(what, 0):,} ({v.get(what, 0) / total:.1%})") for name, v in items.items()]


def chart_grid(stats, manifest: dict | None, row_tokens: int) -> str:
    """The report's five figures, from its RowStats and the manifest's counts."""
    counts = (manifest or {}).get("counts") or {}
    sup, segs, lengths = stats.supervised, stats.segments, stats.segment_lengths
    skipped = counts.get("rows_skipped") or {}
    by_source = counts.get("by_source") or {}
    bad = ", ".join(f"{v:,} {k}" for k, v in (counts.get("conversations_skipped") or {}).items()) or "none"
    mix = "".join(f"<h3>{what}</h3>{svg_hbars(_share(by_source, what), WIDE)}" for what in ("tokens", "conversations"))
    return '<div class="grid">' + "".join([
        _figure("Supervised tokens per row", per_row_chart(sup, row_tokens),
                f"mean {sup.mean() if len(sup) else 0:,.0f} of {row_tokens:,}; "
                f"min {sup.min() if len(sup) else 0:,}, max {sup.max(initial=0):,}"),
        _figure("Conversations per row", histogram_chart(segs, 1, int(segs.max(initial=1)), "rows",
                                                         "conversation segments in the row"),
                f"rows by len(seq_start_id); mean {segs.mean() if len(segs) else 0:.2f}"),
        _figure("Conversation segment lengths", histogram_chart(lengths, 1, max(row_tokens, 1), "segments",
                                                                "tokens in the segment", 32),
                f"{len(lengths):,} segments by length (a conversation split across rows counts once per "
                f"row); median {np.median(lengths) if len(lengths) else 0:,.0f}"),
        _figure("Skipped rows", svg_hbars([("kept rows", len(sup), f"{len(sup):,}")] + [
            (f"skipped: {k.replace('_', ' ')}", v, f"{v:,}") for k, v in skipped.items()]),
            f"{sum(skipped.values()):,} of {len(sup) + sum(skipped.values()):,} rows cut from the stream were "
            f"left out; conversations skipped: {bad}" if manifest else "no manifest: counts unknown"),
        _figure("Source mix", mix if by_source else "", "in kept rows, per source (manifest counts.by_source)"
                if by_source else "no manifest: source mix unknown", wide=True)]) + "</div>"


def funnel_chart(found: dict, title: str = "Where the source rows went") -> str:
    """counts.funnel as one figure: a bar per box, the total, each source's share in its label."""
    total, sources = found["total"], found["sources"]

    def item(label: str, value: int, shares: list[int]) -> tuple[str, float, str]:
        split = f" ({' + '.join(f'{s:,}' for s in shares)})" if len(sources) > 1 else ""
        return label, value, f"{value:,}{split}"

    items = [item(label, total[key], [s[key] for s in sources]) for label, key in (
        ("rows in the sources", "rows"), ("not taken", "not_taken"),
        *((("repeats added (take above 1)", "repeats"),) if total.get("repeats") else ()),
        ("not reached", "not_reached"), ("read by the stream", "read"))]
    items += [item(f"dropped: {kind.replace('_', ' ')}", n, [s["dropped"][kind] for s in sources])
              for kind, n in total["dropped"].items() if n]
    items += [item(label, total[key], [s[key] for s in sources]) for label, key in (
        ("packed", "packed"), ("in kept rows", "in_kept_rows"), ("only in rows without a target",
                                                                 "in_rows_without_target"),
        ("packed, not written", "not_written"))]
    names = f" ({' + '.join(s['source'] for s in sources)})" if len(sources) > 1 else ""
    caption = (f"every source row in exactly one box: not taken, not reached, dropped by kind, or packed (in kept "
               f"rows, only in rows without a target, or not written); conversations{names}")
    return _figure(title, svg_hbars(items, WIDE), caption, wide=True)
