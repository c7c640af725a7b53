"""`databuild show`, `databuild report` and `databuild diff`: look at the rows a build wrote.

cli.py registers these commands (main.add_command).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .errors import one_line_errors


EXIT_USAGE = 2  # diff: usage error or unreadable input; 0 and 1 say identical or not
_CONFIG_HELP = ("The config (name or path) whose source to re-render the row's conversations from, to mark their "
                "tool calls, tool results and reasoning from the record. Default: the one the manifest names.")
_TOKENIZER_HELP = ("A tokenizer directory, or a config (name or path) whose tokenizer to use. Default: the one "
                   "the manifest beside PARQUET pins: the folder it was read from, the hub cache, or a config's dir.")

# ANSI: green for targets, bold cyan for conversation starts; reset after each so nothing leaks.
_ANSI_TARGET, _ANSI_MARKER, _ANSI_RESET = "\x1b[32m", "\x1b[1;36m", "\x1b[0m"
# the labels of tool calls, tool results and reasoning (views/marks.py): one colour each
_ANSI_REGION = {"tool call": "\x1b[1;33m", "tool result": "\x1b[1;35m", "reasoning": "\x1b[1;34m"}


def _ansi_region(label: str) -> str:
    return _ANSI_REGION[label.strip("⟨/⟩")] + label + _ANSI_RESET


@click.command()
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--row", "row", type=int, default=0, show_default=True, help="The row to show (0-based).")
@click.option("--tokenizer", "name_or_dir", metavar="NAME_OR_DIR", help=_TOKENIZER_HELP)
@click.option("--config", "config", metavar="NAME_OR_PATH", help=_CONFIG_HELP)
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="ANSI colours (auto: only on a terminal); without them, targets are wrapped in [[...]].")
@one_line_errors
def show(parquet, row, name_or_dir, config, color):
    """Print one row decoded: supervised tokens highlighted, conversation starts, tool calls, tool
    results and reasoning marked.

    On a terminal, supervised tokens are green; otherwise they are wrapped in [[...]]. A line
    ⟦conversation-id⟧ marks where each conversation (or its continuation) starts in the row.
    ⟨tool call⟩ ... ⟨/tool call⟩, ⟨tool result⟩ ... and ⟨reasoning⟩ ... enclose those fields of the
    record: the row's conversations re-rendered from the config's source. Where the source is not
    here, they are read from the template's markup in the decoded text, and a line says so
    (data/README.md, "show and report").

    On a preference row file (task: preference): the pair's prompt once, marked ⟦prompt⟧, then
    ⟦chosen⟧ and ⟦rejected⟧ (or ⟦completion⟧ and its label), each as it follows the prompt.

    \b
    Examples:
      databuild show build/muse-spark-tiny-fixed512-v1.parquet
      databuild show rows.parquet --row 6000 --tokenizer ./tokenizer
      databuild show rows.parquet --row 12 --color always | less -R
      databuild show rows.parquet --row 3 --config configs/mine.yaml
      databuild show build/my-dpo.parquet --row 5
    """
    from .views.show_pair import preference_kind, show_pair

    ansi = color == "always" or (color == "auto" and sys.stdout.isatty())
    if preference_kind(parquet) is not None:  # a preference row file: the pair, its shared prompt marked
        click.echo(show_pair(parquet, row, name_or_dir, target=(lambda s: _ANSI_TARGET + s + _ANSI_RESET) if ansi
                             else (lambda s: f"[[{s}]]"), marker=(lambda s: _ANSI_MARKER + s + _ANSI_RESET) if ansi
                             else (lambda s: s)), color=ansi)
        return
    from .publish.manifest_read import manifest_beside
    from .inputs.tokenizer import tokenizer_dir
    from .encode.render import load_tokenizer
    from .views.record_marks import record_marks
    from .views.show import check_decodable, compose, controls_line, decode_spans, row_header, spans
    from .rowfile.read import open_parquet, read_rows

    parquet_file, manifest = open_parquet(parquet), manifest_beside(parquet)
    # the row first: its index is checked before any tokenizer is loaded
    target = read_rows(parquet_file, parquet, row, continued_rows=(manifest or {}).get("continued_rows"))[0]
    tokenizer = load_tokenizer(tokenizer_dir(parquet, name_or_dir, manifest))
    check_decodable(tokenizer, target, parquet)
    marks = record_marks([target], manifest, config)
    marked = marks.of_row(target)
    parts = spans(target, marked)
    texts = decode_spans(tokenizer, target, parts)
    if ansi:
        body = compose(target, parts, texts, target=lambda s: _ANSI_TARGET + s + _ANSI_RESET,
                       marker=lambda s: _ANSI_MARKER + s + _ANSI_RESET, region=_ansi_region, marked=marked)
    else:
        body = compose(target, parts, texts, target=lambda s: f"[[{s}]]", marker=lambda s: s, region=lambda s: s,
                       marked=marked)
    header = row_header(target, parquet_file.metadata.num_rows)
    notes = [line for line in (controls_line(manifest), marks.note) if line]
    click.echo(f"{header}\n" + "".join(f"{line}\n" for line in notes) + f"{body}{header}", color=ansi)


@click.command()
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the page. Default: NAME.report.html beside PARQUET.")
@click.option("--rows", "rows", type=click.IntRange(min=0), default=8, show_default=True,
              help="How many of the first rows the row viewer shows.")
@click.option("--tokenizer", "name_or_dir", metavar="NAME_OR_DIR",
              help=_TOKENIZER_HELP + " Without one, the viewer shows token ids.")
@click.option("--config", "config", metavar="NAME_OR_PATH", help=_CONFIG_HELP)
@click.option("--diff", "against", metavar="OTHER",
              help="Another row file, manifest or config: the page gets a section saying why they differ "
                   "(`databuild diff PARQUET OTHER`).")
@one_line_errors
def report(parquet, output, rows, name_or_dir, config, against):
    """Write one self-contained HTML page about PARQUET: summary, pins, charts and a row viewer.

    The page loads nothing from anywhere (inline CSS and SVG), so it opens offline and can be
    archived with the build.

    \b
    Examples:
      databuild report build/muse-spark-tiny-fixed512-v1.parquet
      databuild report rows.parquet -o /tmp/rows.html --rows 3 --tokenizer ./tokenizer
      databuild report build/NAME.parquet --diff theirs/NAME.parquet
      databuild report build/my-dpo.parquet
    """
    from .errors import BuildError
    from .views.report import render_report
    from .views.show_pair import preference_kind

    if preference_kind(parquet) is not None:  # a preference row file: its own page (views/report_pair.py)
        from .views.report_pair import render_pair_report
        if against is not None:
            raise BuildError("report --diff on a preference row file: run databuild diff A B instead")
        page = render_pair_report(parquet, rows, name_or_dir)
    else:
        page = render_report(parquet, rows, name_or_dir, against, config)
    output = output or parquet.with_name(parquet.name.removesuffix(".parquet") + ".report.html")
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"{output}: cannot write: {exc.strerror or exc}") from None
    click.echo(f"{output} ({len(page.encode('utf-8')):,} bytes)")


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--all", "everything", is_flag=True, help="List every differing pin (default: the first 12).")
@click.option("--tokenizer", "name_or_dir", metavar="NAME_OR_DIR",
              help="A tokenizer directory or config name to decode both sides with. Default: each side's "
                   "pinned one, as for show; token ids where it is not on this machine.")
@one_line_errors(status=EXIT_USAGE)
def diff(a, b, everything, name_or_dir):
    """Say why two builds differ: first what they were made from, then their rows.

    A and B are each a row file (with its manifest beside it), a manifest alone, or a config (name or
    YAML: its pinned inputs, resolved and hashed offline, nothing built). The first line names the
    causes; then each pin that differs, A's and B's values side by side; then how many rows and
    conversations differ, in what (ids, masks, segment boundaries, order, row count); then the first
    differing conversation decoded from both, targets in [[...]], ▶ at the first differing token.

    \b
    Exit codes: 0 identical (same pins, same rows), 1 they differ, 2 usage error or unreadable input.
    \b
    Examples:
      databuild diff build/muse-spark-tiny-fixed512-v1.parquet theirs/muse-spark-tiny-fixed512-v1.parquet
      databuild diff build/NAME.manifest.json rows.parquet          # after verify fails
      databuild diff build/NAME.parquet muse-spark-tiny-fixed512-v1  # against the config, nothing built
      databuild diff configs/v1.yaml configs/v2.yaml --all
    """
    from .compare import diff as run_diff
    from .views.diff import pinned_tokenizers, render
    from .verification.preference import is_preference_file

    preference = [Path(side).suffix == ".parquet" and is_preference_file(Path(side)) for side in (a, b)]
    if any(preference):  # two preference row files (compare_pairs.py)
        from .compare_pairs import diff_pairs, refuse_mixed, render_pairs

        refuse_mixed(Path(a), Path(b), *preference)
        pairs = diff_pairs(Path(a), Path(b))
        click.echo(render_pairs(pairs, everything), nl=False)
        sys.exit(0 if pairs.identical else 1)
    result = run_diff(a, b)
    click.echo(render(result, pinned_tokenizers(name_or_dir), everything), nl=False)
    sys.exit(0 if result.identical else 1)
