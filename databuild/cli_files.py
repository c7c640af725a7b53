"""`databuild hash`, `databuild verify` and `databuild export`: what is checked and written of a built
row file.

cli.py registers these commands (main.add_command).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .errors import BuildError, one_line_errors, os_error_line


def echo_funnel(manifest: dict | None) -> None:
    """Where every source row went (counts.funnel), when the manifest has it."""
    from .publish.funnel import data_notes, funnel_lines

    found = ((manifest or {}).get("counts") or {}).get("funnel")
    if found:
        sources = found["sources"]
        names = f" ({' + '.join(s['source'] for s in sources)})" if len(sources) > 1 else ""
        click.echo(f"  where the source rows went{names}\n" + "\n".join(funnel_lines(found)))
    listed = [f"{key} ({n:,})" for key in ("skipped_conversations", "duplicate_conversations")
              if (n := len((manifest or {}).get(key) or ()))]
    if listed:  # the funnel says how many were dropped; which ones, and why, only the manifest says
        click.echo(f"  which ones, and why: {' and '.join(listed)} in the manifest, each with its id, file, row "
                   "and reason")
    for note in data_notes(manifest):
        click.echo(f"  note: {note}")


@click.command("hash")
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@one_line_errors
def hash_command(parquet):
    """Print the pinned figures of a row file, computed from the file alone; then, from the manifest
    beside it, where every source row went (the funnel). A preference row file: its rows, rows_sha256,
    tokens and targets of each side, parquet_sha256 and bytes.

    \b
    Example:
      databuild hash build/muse-spark-tiny-fixed512-v1.parquet
    """
    from .rowfile.hashes import hash_parquet
    from .verification.preference import is_preference_file

    if is_preference_file(parquet):  # a preference row file: its own figures (rowfile/preference.py)
        from .rowfile.preference_read import figures_of

        figures, digest, size = figures_of(parquet)
        for key, value in {**figures.record(), "parquet_sha256": digest, "parquet_bytes": size}.items():
            click.echo(f"{key:<27}{value}")
        return
    summary = hash_parquet(parquet)
    for key in ("rows_sha256", "segments_sha256", "parquet_sha256", "parquet_bytes", "rows", "row_tokens",
                "padding_tokens"):
        click.echo(f"{key:<23}{getattr(summary, key)}")
    click.echo(f"{'supervised_token_ratio':<23}{summary.supervised_token_ratio!r}")
    from .publish.manifest_read import manifest_beside

    try:  # not from the file: the manifest beside it says where its rows came from, when it can be read
        echo_funnel(manifest_beside(parquet))
    except BuildError as exc:  # the figures above stand on the file alone
        click.echo(f"  (no funnel: {exc})")


@click.command("verify")
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--manifest", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Manifest to check against (default: the one beside PARQUET, unless another check is given).")
@click.option("--recipe", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Recipe YAML whose workload.dataset block holds the hashes.")
@click.option("--rows-sha256", help="Expected rows_sha256 (of an export: its --from file's).")
@click.option("--parquet-sha256", help="Expected sha256 of the file's bytes (of an export: its --from file's).")
@click.option("--segments-sha256", help="Expected segments_sha256, seq_start_id and conversation ids (of an "
                                        "export: its --from file's).")
@click.option("--from", "source", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="For an export: the native file it comes from; it is exported afresh and compared, and the "
                   "hashes or recipe given are checked on it.")
@one_line_errors
def verify_command(parquet, manifest, recipe, rows_sha256, parquet_sha256, segments_sha256, source):
    """Check PARQUET (a row file, or an export) against its hashes; exit 0 only when every check holds.

    Every expectation given is checked; one that does not apply to the file is refused (exit 2).

    \b
    Exit codes: 0 verified, 1 a difference (each printed: expected, found),
    2 usage error (an option that does not apply), 3 the file is unreadable (missing included).
    \b
    Examples:
      databuild verify build/muse-spark-tiny-fixed512-v1.parquet
      databuild verify rows.parquet --recipe recipe.yaml
      databuild verify rows.parquet --rows-sha256 4003478c...128f
      databuild verify out/tiny-hf.parquet --from build/muse-spark-tiny-fixed512-v1.parquet
      databuild verify out/tiny-hf.parquet --from build/muse-spark-tiny-fixed512-v1.parquet --recipe recipe.yaml
    """
    from .rowfile.schema import UnreadableError
    from .api import verify_file
    from .verification import EXIT_DIFFERENT, EXIT_UNREADABLE, EXIT_USAGE, UsageError

    try:
        report, checked, hint = verify_file(parquet, manifest, recipe, rows_sha256, parquet_sha256, segments_sha256, source)
    except UsageError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except UnreadableError as exc:
        click.echo(f"FAILED {exc}", err=True)
        sys.exit(EXIT_UNREADABLE)
    except BuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_DIFFERENT)
    except OSError as exc:  # a file that cannot be read at all (permissions, I/O error)
        click.echo(f"FAILED {os_error_line(exc)}", err=True)
        sys.exit(EXIT_UNREADABLE)
    for line in report.warnings:
        click.echo(f"warning: {line}", err=True)
    for line in report.failures:
        click.echo(f"FAILED {line}", err=True)
    if hint:
        click.echo(hint, err=True)
    if not report.failures:
        click.echo(f"verified {parquet}: {checked}" + (f", and a fresh export of {source}" if source else ""))
    sys.exit(report.exit_code)


@click.command("export")
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--to", "to", required=True, type=click.Choice(["megatron-bridge", "miles", "hf", "trl-dpo", "trl-kto"]),
              help="The trainer's format (data/README.md, \"Trainers\").")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The export's file, ending in .parquet; beside it go its manifest (OUT without .parquet, "
                   ".manifest.json) and the trainer's configuration for it (data/README.md, \"Trainers\").")
@one_line_errors
def export_command(parquet, to, out):
    """Write a verified row file in a trainer's format, with a manifest and the trainer's
    configuration for exactly this file beside it (Bridge YAML overrides and Python, miles/slime
    flags, TRL SFTConfig arguments and a train script; for a preference row file, TRL DPOConfig or
    KTOConfig arguments and a train script).

    PARQUET must verify against the manifest beside it: nothing is written otherwise.

    \b
    Examples:
      databuild export build/NAME.parquet --to megatron-bridge -o packed/training_8192.idx.parquet
      databuild export build/NAME.parquet --to miles -o miles/NAME.parquet
      databuild export build/NAME.parquet --to hf -o hf/NAME.parquet
      databuild export build/PAIRS.parquet --to trl-dpo -o dpo/PAIRS.parquet
      databuild verify hf/NAME.parquet --from build/NAME.parquet
    """
    from .exports import export, make_format

    result = export(parquet, to, out)
    counts, layout = result.data["counts"], make_format(to)
    lost = counts["unrepresentable"]
    click.echo(f"{result.path}\n"
               f"  format                 {to}\n"
               f"  rows                   {result.data['output']['rows']}\n"
               f"  targets                {result.data['source']['targets']} in {parquet.name}; "
               + ("the trainer trains every one" if not any(lost.values()) else
                  "of them the trainer cannot train (counts.unrepresentable in the manifest):")
               + "".join(f"\n    {n} {kind}: {layout.why[kind]}" for kind, n in lost.items())
               + f"\n  padding dropped        {counts['padding_tokens_dropped']} tokens: {layout.padding_why}\n"
               + ("" if "untrained_tail_tokens_dropped" not in counts else
                  f"  tails dropped          {counts['untrained_tail_tokens_dropped']} tokens: {layout.tail_why}\n")
               + f"  sha256                 {result.data['output']['sha256']}\n"
               f"  manifest               {result.manifest}")
    for name in [sidecar["file"] for sidecar in result.data["sidecars"]] + result.data["trainer_config"]:
        click.echo(f"  beside it              {result.path.with_name(name)}")
