"""`databuild report`: one self-contained HTML page about a row file and the manifest beside it.

Self-contained: inline CSS, hand-written inline SVG, no script, font, style or image from anywhere,
so the page opens air-gapped, can be mailed, and can be archived with the build. It holds no time
stamp, so the same file gives the same page. Its per-row figures come from views/row_stats.py.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pyarrow.parquet as pq

from ..publish.funnel import data_notes
from ..views.charts import chart_grid, funnel_chart
from ..errors import BuildError
from ..rowfile.read import open_parquet, read_rows
from ..publish.manifest_read import manifest_beside
from ..inputs.tokenizer import tokenizer_dir
from .row_stats import RowStats, row_stats
from .record_marks import record_marks
from .show import check_decodable, compose, decode_spans, id_texts, printable, row_header, spans


def viewer(parquet: pq.ParquetFile, path: Path, manifest: dict | None, count: int, tokenizer, note: str,
           config: str | None = None) -> str:
    """The first `count` rows decoded (token ids without a tokenizer), their tool calls, tool results and
    reasoning marked from the record where its source is here (views/record_marks.py, `config`)."""
    total = parquet.metadata.num_rows
    rows = read_rows(parquet, path, 0, min(count, total), (manifest or {}).get("continued_rows"))
    marks = record_marks(rows, manifest, config)
    out = [f'<p class="note">{html.escape(line)}</p>' for line in (note, marks.note) if line]
    for row in rows:
        marked = marks.of_row(row)
        parts = spans(row, marked)
        if tokenizer is not None:
            check_decodable(tokenizer, row, path)
        texts = decode_spans(tokenizer, row, parts) if tokenizer is not None else id_texts(row, parts)
        body = compose(row, parts, texts, target=lambda s: f"<mark>{s}</mark>",
                       marker=lambda s: f'<span class="conv">{s}</span>', escape=lambda s: html.escape(printable(s)),
                       region=lambda s: f'<span class="region {s.strip("⟨/⟩").replace(" ", "-")}">{s}</span>',
                       marked=marked)
        out.append(f'<details{" open" if row.index == 0 else ""}><summary>{html.escape(row_header(row, total))}'
                   f'</summary><pre>{body}</pre></details>')
    return "".join(out)


def _flatten(value, prefix: str = "") -> list[tuple[str, str]]:
    """Nested manifest fields as (dotted key, text) rows: new manifest fields show up unasked."""
    if isinstance(value, dict) and value:
        return [pair for key, item in value.items() for pair in _flatten(item, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))]


def _table(rows: list[tuple], head: tuple = ()) -> str:
    cells = "".join("<tr>" + "".join(f"<{'th' if i == 0 and not head else 'td'}>{html.escape(str(c))}"
                                     f"</{'th' if i == 0 and not head else 'td'}>" for i, c in enumerate(r)) + "</tr>"
                    for r in rows)
    top = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" if head else ""
    return f'<table class="{"files" if head else "kv"}">{top}{cells}</table>'


def checks(path: Path, stats: RowStats, manifest: dict | None) -> list[str]:
    """Where the file and its manifest disagree, from figures that cost nothing extra to recompute."""
    if manifest is None:
        return [f"no manifest beside {path.name}: the figures below come from the file alone"]
    out = manifest.get("output") or {}
    found = {"rows": len(stats.tokens), "supervised_tokens": int(stats.supervised.sum()),
             "parquet_bytes": path.stat().st_size, "row_tokens": int(stats.tokens.max(initial=0))}
    return [f"the file has {key} = {value:,}, the manifest says {out[key]:,}"
            for key, value in found.items() if key in out and out[key] != value and (key != "row_tokens" or value)]


def summary(path: Path, stats: RowStats, manifest: dict | None) -> str:
    out, counts = (manifest or {}).get("output") or {}, (manifest or {}).get("counts")
    tokens, supervised = int(stats.tokens.sum()), int(stats.supervised.sum())
    cards = [("rows", f"{out.get('rows', len(stats.tokens)):,}"),
             ("row tokens", f"{out.get('row_tokens', int(stats.tokens.max(initial=0))):,}"),
             ("tokens", f"{out.get('tokens', tokens):,}"),
             ("supervised ratio", f"{out.get('supervised_token_ratio', supervised / max(tokens, 1)):.4f}"),
             ("supervised tokens", f"{out.get('supervised_tokens', supervised):,}"),
             ("padding tokens", f"{int(stats.padding.sum()):,} ({stats.padding.sum() / max(tokens, 1):.2%})"),
             ("conversations in kept rows", f"{counts['funnel']['total']['in_kept_rows']:,}"
              if counts and "funnel" in counts else "?"),
             ("rows skipped", f"{sum((counts.get('rows_skipped') or {}).values()):,}" if counts else "?"),
             ("parquet bytes", f"{out.get('parquet_bytes', path.stat().st_size):,}")]
    return '<div class="cards">' + "".join(f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">'
                                           f'{html.escape(v)}</div></div>' for k, v in cards) + "</div>"


def pins(manifest: dict | None) -> str:
    if manifest is None:
        return "<p>No manifest: nothing is pinned.</p>"
    inputs, counts = manifest.get("inputs") or {}, dict(manifest.get("counts") or {})
    # inputs.source: a manifest written before mixtures
    sources = inputs.get("sources") or ([inputs["source"]] if isinstance(inputs.get("source"), dict) else [])
    by_source, per_source = counts.pop("by_source", {}), counts.pop("sources", [])
    sections = [("Output", _table(_flatten(manifest.get("output") or {}))),
                ("Tokenizer", _table(_flatten(inputs.get("tokenizer") or {})))]
    for number, source in enumerate(sources):
        source = dict(source)
        files, title = source.pop("files", []), f"Source {number}" if len(sources) > 1 else "Source"
        shares = _flatten({"counts": per_source[number]}) if number < len(per_source) else []
        sections += [(title, _table(_flatten(source) + shares)),
                     (f"{title} files", _table([(f.get("path"), f"{f.get('bytes', 0):,}", f.get("rows", ""),
                                                 f.get("sha256")) for f in files], ("path", "bytes", "rows", "sha256")))]
    sections += [("Build", _table(_flatten(manifest.get("build") or {}))), ("Counts", _table(_flatten(counts))),
                ("Conversations and tokens by source", _table([
                    (name, f"{v.get('conversations', 0):,} conversations, {v.get('tokens', 0):,} tokens")
                    for name, v in by_source.items()])),
                ("Library versions", _table(_flatten(manifest.get("versions") or {}))),
                ("Also in the manifest", _table([(key, f"{len(manifest.get(key) or [])} entries")
                                                 for key in ("skipped_conversations", "row_digests")]))]
    return "".join(f"<h3>{html.escape(title)}</h3>{body}" for title, body in sections)


CSS = """
body{font:14px/1.45 system-ui,sans-serif;color:#1d2330;margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:20px 24px 60px}h1{font-size:22px;margin:0 0 2px}
h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #d8dce3}h3{font-size:14px;margin:16px 0 6px}
.sub,.note{color:#5b6475;word-break:break-all}.warn{background:#fdecea;border:1px solid #e3a39b;color:#7a1c12;
padding:8px 12px;margin:6px 0;border-radius:4px}.cards,.grid{display:grid;grid-template-columns:repeat(4,1fr);gap:10px}
.grid{grid-template-columns:1fr 1fr;gap:14px}.card,figure,details{background:#fff;border:1px solid #dde1e7;
border-radius:6px}.card{padding:8px 12px}.card .k{color:#5b6475;font-size:12px}.card .v{font-size:19px;font-weight:600}
figure{margin:0;padding:10px}figure.wide{grid-column:1/3}figcaption{font-size:12.5px;color:#3b4354}
svg.chart{width:100%;height:auto;display:block}svg rect{fill:#3a7bd5}svg rect:hover{fill:#e07b00}
svg .grid{stroke:#e3e6eb}svg text{font-size:11px;fill:#4a5263}svg .ytick,svg .hlabel{text-anchor:end}
svg .xtick,svg .xlabel{text-anchor:middle}table{border-collapse:collapse;background:#fff;width:100%;font-size:12.5px}
th,td{border:1px solid #e1e4ea;padding:3px 8px;text-align:left;vertical-align:top;word-break:break-all}
table.kv th{width:30%;font-weight:500;color:#4a5263;word-break:normal}details{margin:6px 0}
summary{cursor:pointer;padding:6px 10px;font-weight:500}pre{margin:0;padding:8px 10px;white-space:pre-wrap;
word-break:break-word;font:12px/1.5 ui-monospace,monospace;max-height:520px;overflow:auto;border-top:1px solid #eceef2}
mark{background:#c9f0d2;color:#0b3d17}.region{font-weight:600;border-radius:3px;padding:0 2px}
.tool-call{background:#fbe7b5;color:#6b4500}.tool-result{background:#efd7f5;color:#5a1c6b}
.reasoning{background:#d8e4fb;color:#1c3a7a}.conv{display:inline-block;width:100%;background:#eef1f6;color:#33418a;
font-weight:600;margin:4px 0 2px}
"""


def _viewer_tokenizer(path: Path, name_or_dir: str | None, manifest: dict | None):
    """(tokenizer or None, a note for the page, {its directory: it} or {}). A tokenizer named explicitly
    must load; the pinned one may miss."""
    from ..encode.render import load_tokenizer

    try:
        directory = tokenizer_dir(path, name_or_dir, manifest)
        tokenizer = load_tokenizer(directory)
        return tokenizer, (f"Decoded with the tokenizer in {directory}. Supervised tokens (loss_mask = 1) are "
                           "highlighted; a shaded ⟦conversation-id⟧ line marks where each conversation segment "
                           "starts."), {directory: tokenizer}
    except BuildError as exc:
        if name_or_dir is not None:
            raise
        return None, f"Token ids shown, not text: {exc}. Supervised tokens are highlighted.", {}


def difference(path: Path, against: str, name_or_dir: str | None, loaded: dict | None = None) -> str:
    """`databuild diff PATH AGAINST`'s text, as a section of the page (`loaded`: tokenizers the page has
    loaded already, by directory)."""
    from ..compare import diff
    from .diff import pinned_tokenizers, render

    text = render(diff(path, against), pinned_tokenizers(name_or_dir, loaded))
    return f"<h2>Difference from {html.escape(str(against))}</h2><pre>{html.escape(text)}</pre>"


def funnel(manifest: dict | None, path: Path | None = None) -> str:
    """The funnel of the file; of a training file with a validation split, the validation file's too
    (from its manifest beside it), so that both splits' funnels are on the page."""
    found = ((manifest or {}).get("counts") or {}).get("funnel")
    charts = funnel_chart(found) if found else ""
    split = (manifest or {}).get("validation")
    if split and path is not None:
        held = manifest_beside(path.with_name(split["file"]))
        held_funnel = ((held or {}).get("counts") or {}).get("funnel")
        charts += funnel_chart(held_funnel, f"Validation split ({split['file']}): where the source rows went") if \
            held_funnel else f'<div class="warn">{html.escape(split["file"])}: no manifest beside it</div>'
    return f'<div class="grid">{charts}</div>' if charts else ""


def render_report(path: Path, rows: int = 8, name_or_dir: str | None = None, against: str | None = None,
                  config: str | None = None) -> str:
    """The whole page, as one string; with `against`, a section saying why the two differ; `config`: whose
    source the row viewer re-renders (views/record_marks.py)."""
    parquet, manifest = open_parquet(path), manifest_beside(path)
    stats = row_stats(parquet, path)
    shown = min(rows, len(stats.tokens))
    rows_html, loaded = "", {}
    if shown:
        tokenizer, note, loaded = _viewer_tokenizer(path, name_or_dir, manifest)
        rows_html = viewer(parquet, path, manifest, shown, tokenizer, note, config)
    name = (manifest or {}).get("name") or path.name.removesuffix(".parquet")
    row_tokens = int(stats.tokens.max(initial=0))  # the file's, for the charts: checks() flags a manifest that differs
    warnings = "".join(f'<div class="warn">{html.escape(w)}</div>' for w in checks(path, stats, manifest)
                       + data_notes(manifest))
    compared = difference(path, against, name_or_dir, loaded) if against is not None else ""
    # the per-row figures, machine-readable (numbers only, so nothing in them needs escaping)
    data = json.dumps({"supervised": stats.supervised.tolist(), "conversation_segments": stats.segments.tolist()},
                      separators=(",", ":"))
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{html.escape(name)}: databuild report</title>'
            f'<style>{CSS}</style></head><body><main><h1>{html.escape(name)}</h1><p class="sub">'
            f'{html.escape(str(path))}</p>{warnings}{funnel(manifest, path)}{summary(path, stats, manifest)}{compared}<h2>Charts</h2>'
            f"{chart_grid(stats, manifest, row_tokens)}<h2>First {shown} rows</h2>{rows_html}<h2>Pins</h2>"
            f'{pins(manifest)}<script type="application/json" id="row-stats">{data}</script></main></body></html>\n')
