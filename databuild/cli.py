"""The command line: parses, calls, prints. Every failure is one line on stderr, never a traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

# transformers advises about PyTorch on import; a data builder never needs it.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Download bars only on a terminal, as for the build's own bar: a log gets the result lines alone.
if not sys.stderr.isatty():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# huggingface_hub logs each retry of a request as a warning; what failed is databuild's one line.
os.environ.setdefault("HF_HUB_VERBOSITY", "error")

from .cli_view import diff, report, show
from .errors import BuildError, one_line_errors, os_error_line

@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="databuild")
def main():
    """Deterministic builder of packed SFT datasets.

    \b
    Examples:
      databuild list
      databuild init my-sft --tokenizer ./tok --source ./data-a --source ./data-b --rows 100 --row-tokens 4096
      databuild make muse-spark-tiny-fixed512-v1 --out build/
      databuild fetch muse-spark-tulu3-fixed8192-v1
      databuild make muse-spark-tulu3-fixed8192-v1 --offline
      databuild hash build/muse-spark-tiny-fixed512-v1.parquet
      databuild diff build/muse-spark-tiny-fixed512-v1.parquet theirs/muse-spark-tiny-fixed512-v1.parquet
      databuild export build/muse-spark-tiny-fixed512-v1.parquet --to hf -o out/tiny-hf.parquet
    """


@main.command("list")
@one_line_errors
def list_configs():
    """The configs that `make NAME` knows, one line each.

    \b
    Example:
      databuild list
    """
    from .config import available_configs, load_config

    for name, path in available_configs().items():
        config = load_config(path)
        sources = " + ".join((f"{s.repo}@{s.revision[:12]}" if s.repo else f"{s.dir} (local)")
                             + (f" (take {s.take})" if s.take is not None else "")
                             + (f" [{s.format}]" if s.format != "messages" else "") for s in config.sources)
        click.echo(f"{name}\t{config.rows} rows x {config.row_tokens} tokens\t{sources}\t{path}")


def _echo_funnel(manifest: dict | None) -> None:
    """Where every source row went (counts.funnel), when the manifest has it."""
    from .publish.funnel import funnel_lines

    found = ((manifest or {}).get("counts") or {}).get("funnel")
    if found:
        sources = found["sources"]
        names = f" ({' + '.join(s['source'] for s in sources)})" if len(sources) > 1 else ""
        click.echo(f"  where the source rows went{names}\n" + "\n".join(funnel_lines(found)))


def _overrides(config, dataset_dir, tokenizer_dir):
    return config.with_overrides(dataset_dir=dataset_dir, tokenizer_dir=tokenizer_dir)


@main.command()
@click.argument("name")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("build"),
              show_default=True, help="Directory for NAME.parquet and NAME.manifest.json.")
@click.option("--offline", is_flag=True, help="Use the hub cache only (as HF_HUB_OFFLINE=1); never the network.")
@click.option("--dataset-dir", type=click.Path(file_okay=False, path_type=Path),
              help="A local copy of the source repo (data/*.parquet) in place of the hub; a config of one "
                   "source only (a mixture sets each source's 'dir' in the config).")
@click.option("--tokenizer-dir", type=click.Path(file_okay=False, path_type=Path),
              help="A local copy of the tokenizer files in place of the hub; checked against the pins.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes that render and tokenize, the cores shared out between them and the tokenizer's "
                   "threads; the output does not depend on it. Default, and the most that runs: one per 4 cores "
                   "(1 below 8 cores), as more were slower; DATABUILD_CORES sets the cores, RAYON_NUM_THREADS the "
                   "threads of each. Ray: the actors (default 1).")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Conversations per tokenizer batch; the output does not depend on it.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where render+tokenize+mask runs: local processes, or Ray (pip install 'databuild[ray]').")
@click.option("--ray-address", help="Address of an existing Ray cluster, e.g. 'auto' on a cluster node "
                                    "(default: start a private local instance).")
@click.option("--recipe", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="A recipe YAML whose workload.dataset block receives the results once the file verifies: "
                   "values it lacks are added; one it pins differently is refused (exit 1, recipe unchanged).")
@click.option("--repin", is_flag=True,
              help="Overwrite values the recipe already holds with this build's, e.g. when publishing a new version.")
@click.option("--force", is_flag=True,
              help="Build even when the build in --out is up to date, and replace it.")
@one_line_errors
def make(name, out_dir, offline, dataset_dir, tokenizer_dir, workers, batch_size, executor, ray_address, recipe, repin,
         force):
    """Build the rows of config NAME (a config name or a path to a config YAML).

    A build already in --out whose manifest records this config's pins and settings, and whose file
    verifies, is up to date: make says so and returns, writing nothing. Several makes of one config into
    one directory at once (every rank of a training job): one builds, the others wait for it and use it.

    \b
    Examples:
      databuild make muse-spark-tiny-fixed512-v1
      databuild make muse-spark-tulu3-fixed8192-v1 --offline --workers 2
      databuild make configs/my-build.yaml --out /data/rows --recipe recipe.yaml
      databuild make configs/my-build-v2.yaml --recipe recipe.yaml --repin   # a new version
      databuild make NAME --dataset-dir ./tulu --tokenizer-dir ./tok   # air-gapped
      databuild make muse-spark-tiny-fixed512-v1 --force   # rebuild, even if up to date
    """
    from .build import make as run_make
    from .config import resolve_config
    from .pack.rows import NO_SUPERVISED_TOKEN

    config = _overrides(resolve_config(name), dataset_dir, tokenizer_dir)
    result = run_make(config, out_dir, force=force, offline=offline, workers=workers, batch_size=batch_size,
                      executor=executor, ray_address=ray_address)
    s = result.data["output"]
    skipped = result.data["counts"]["rows_skipped"][NO_SUPERVISED_TOKEN]
    waited = f" after waiting {result.waited:.1f} s for another make" if result.waited >= 0.05 else ""
    if result.built is None:
        click.echo(f"up to date{waited}: the manifest records this config's pins and settings and the file verifies "
                   f"(checked in {result.seconds:.1f} s; nothing written; --force rebuilds)")
    else:
        click.echo(f"built{waited}: {result.built}\nencoded by: {result.encoding}")
    click.echo(f"{result.parquet}\n"
               f"  rows                   {s['rows']} x {s['row_tokens']} tokens ({s['tokens']:,} tokens)\n"
               f"  supervised_token_ratio {s['supervised_token_ratio']:.4f}\n"
               f"  rows skipped           {skipped} (no supervised token)\n"
               + (f"  padding_tokens         {s['padding_tokens']:,} ({s['padding_tokens'] / s['tokens']:.2%})\n"
                  if s["padding_tokens"] else "")
               + f"  rows_sha256            {s['rows_sha256']}\n"
               f"  parquet_sha256         {s['parquet_sha256']}\n"
               f"  parquet_bytes          {s['parquet_bytes']:,}\n"
               + (f"  time                   {result.seconds:.1f} s ({s['tokens'] / max(result.seconds, 1e-9):,.0f} "
                  "tokens/s)\n" if result.built is not None else "")
               + f"  manifest               {result.manifest}")
    _echo_funnel(result.data)
    if recipe is not None:
        from .publish.recipe import update_recipe
        from .verify import gather, verify

        report = verify(result.parquet, gather(result.parquet, result.manifest))
        if report.failures:
            raise BuildError(f"{result.parquet} does not verify, recipe left unchanged: {report.failures[0]}")
        changed = update_recipe(recipe, result.manifest, repin=repin)
        click.echo(f"  recipe                 {recipe} ({'updated' if changed else 'already up to date'})")


def _format_option(value: str):
    """--format: a format's name, 'auto', or a YAML mapping {messages: COLUMN, role: FIELD, content: FIELD}."""
    if not value.lstrip().startswith("{"):
        return value
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return dict(YAML(typ="safe", pure=True).load(value))
    except (YAMLError, TypeError, ValueError) as exc:
        raise BuildError(f"--format {value}: not a mapping ({str(exc).splitlines()[0]})") from None


@main.command()
@click.argument("name")
@click.option("--tokenizer", "tokenizer", required=True, metavar="DIR|ORG/NAME[@REV]",
              help="The tokenizer: a local folder (pinned by content), or a hub model repo at a branch, tag or "
                   "commit (default main), resolved to its commit; offline, from the hub cache.")
@click.option("--source", "sources", required=True, multiple=True, metavar="DIR|ORG/NAME[@REV]",
              help="A source, laid out as its hub repo (data/SPLIT-*.parquet); repeat for a mixture, in order.")
@click.option("--format", "formats", multiple=True, metavar="NAME|MAPPING",
              help="A source's format, once per source in order, where detection cannot decide: messages, "
                   "sharegpt, prompt_completion, '{messages: COL, role: F, content: F}', or auto.")
@click.option("--rows", type=click.IntRange(min=1), help="Rows the build keeps.")
@click.option("--row-tokens", type=click.IntRange(min=1), help="Tokens per row.")
@click.option("--split", default="train", show_default=True, help="The split every source is read from.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="The permutation's seed.")
@click.option("--loss-mask", type=click.Choice(["assistant", "muse_spark"]), default="assistant", show_default=True,
              help="The targets: assistant turns, or muse_spark for harmony templates.")
@click.option("--packing", type=click.Choice(["concat", "bfd"]), default="concat", show_default=True)
@click.option("--current-date", metavar="YYYY-MM-DD", help="The date a template that reads the clock renders.")
@click.option("--end-of-turn", "end_of_turn", multiple=True, metavar="TOKEN",
              help="A token closing assistant turns on a template without generation tags (default: the "
                   "tokens generation_config.json stops on).")
@click.option("--chat-template-name", help="Which of the tokenizer's named chat templates renders.")
@click.option("--on-bad-conversation", type=click.Choice(["error", "skip"]), default="error", show_default=True)
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the config. Default: configs/NAME.yaml.")
@click.option("--offline", is_flag=True, help="Use the hub cache only (as HF_HUB_OFFLINE=1).")
@click.option("--force", is_flag=True, help="Replace the config if it exists.")
@one_line_errors
def init(name, tokenizer, sources, formats, rows, row_tokens, split, seed, loss_mask, packing, current_date,
         end_of_turn, chat_template_name, on_bad_conversation, out, offline, force):
    """Write configs/NAME.yaml from a tokenizer and sources, every input pinned, ready for `make NAME`.

    Hub revisions are resolved to commits and every file's sha256 pinned; local folders are pinned
    by content. Each source's format is detected from its schema, and the chat template inspected
    (generation tags, ends of turn, the clock, named templates); each key gets a comment. What it
    cannot decide it asks for, naming the option.

    \b
    Examples:
      databuild init my-sft --tokenizer ./phi-3-mini --source ./tulu --source ./sharegpt --rows 1000 --row-tokens 4096
      databuild init my-sft --tokenizer Qwen/Qwen2.5-7B-Instruct --source allenai/tulu-3-sft-mixture \\
          --rows 6400 --row-tokens 8192 --offline
      databuild make my-sft
    """
    from .scaffold import InitOptions, init_config

    options = InitOptions(name, tokenizer, tuple(sources), row_tokens, rows, out, tuple(map(_format_option, formats)),
                          split, seed, loss_mask, packing, current_date, tuple(end_of_turn), chat_template_name,
                          on_bad_conversation, offline, force)
    path, config = init_config(options)
    click.echo(f"{path}")
    def pinned(entry) -> str:
        return f"{len(entry['sha256'])} file{'s' if len(entry['sha256']) != 1 else ''} pinned"

    for number, source in enumerate(config["sources"]):
        where = source.get("repo") or source.get("dir")
        fmt = source["format"] if isinstance(source["format"], str) else "columns"
        click.echo(f"  source {number}  {where} ({fmt}, {pinned(source)})")
    click.echo(f"  tokenizer {config['tokenizer'].get('repo') or config['tokenizer'].get('dir')} "
               f"({pinned(config['tokenizer'])})")
    if "end_of_turn" in config:
        click.echo(f"  end_of_turn {', '.join(config['end_of_turn'])}")
    click.echo(f"next: databuild make {path if options.out else name}")


@main.command()
@click.argument("name")
@one_line_errors
def fetch(name):
    """Download exactly the pinned files of every source and the tokenizer into the hub cache.

    Run it where the hub is reachable; `make NAME --offline` then builds from the cache alone.

    \b
    Example:
      HF_HOME=/shared/hf databuild fetch muse-spark-tulu3-fixed8192-v1
    """
    from .config import resolve_config
    from .inputs.resolve import fetch as run_fetch

    resolved = run_fetch(resolve_config(name))
    for source in resolved.sources:
        click.echo(f"source    {source.root} ({len(source.files)} files)")
    click.echo(f"tokenizer {resolved.tokenizer_dir}")


@main.command("hash")
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@one_line_errors
def hash_command(parquet):
    """Print the pinned figures of a row file, computed from the file alone; then, from the manifest
    beside it, where every source row went (the funnel).

    \b
    Example:
      databuild hash build/muse-spark-tiny-fixed512-v1.parquet
    """
    from .rowfile.hashes import hash_parquet

    summary = hash_parquet(parquet)
    for key in ("rows_sha256", "segments_sha256", "parquet_sha256", "parquet_bytes", "rows", "row_tokens",
                "padding_tokens"):
        click.echo(f"{key:<23}{getattr(summary, key)}")
    click.echo(f"{'supervised_token_ratio':<23}{summary.supervised_token_ratio!r}")
    from .publish.manifest_read import manifest_beside

    try:  # not from the file: the manifest beside it says where its rows came from, when it can be read
        _echo_funnel(manifest_beside(parquet))
    except BuildError as exc:  # the figures above stand on the file alone
        click.echo(f"  (no funnel: {exc})")


@main.command("verify")
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
    from .rowfile.hashes import UnreadableError
    from .verify import EXIT_DIFFERENT, EXIT_UNREADABLE, EXIT_USAGE, UsageError, verify_file

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


@main.command("export")
@click.argument("parquet", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--to", "to", required=True, type=click.Choice(["megatron-bridge", "miles", "hf"]),
              help="The trainer's format (data/README.md, \"Trainers\").")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The export's file, ending in .parquet; beside it go its manifest (OUT without .parquet, "
                   ".manifest.json) and the trainer's configuration for it (data/README.md, \"Trainers\").")
@one_line_errors
def export_command(parquet, to, out):
    """Write a verified row file in a trainer's format, with a manifest and the trainer's
    configuration for exactly this file beside it (Bridge YAML overrides and Python, miles/slime
    flags, TRL SFTConfig arguments and a train script).

    PARQUET must verify against the manifest beside it: nothing is written otherwise.

    \b
    Examples:
      databuild export build/NAME.parquet --to megatron-bridge -o packed/training_8192.idx.parquet
      databuild export build/NAME.parquet --to miles -o miles/NAME.parquet
      databuild export build/NAME.parquet --to hf -o hf/NAME.parquet
      databuild verify hf/NAME.parquet --from build/NAME.parquet
    """
    from .export import export

    result = export(parquet, to, out)
    counts = result.data["counts"]
    lost = ", ".join(f"{n} {kind}" for kind, n in counts["unrepresentable"].items()) or "none"
    click.echo(f"{result.path}\n"
               f"  format                 {to}\n"
               f"  rows                   {result.data['output']['rows']}\n"
               f"  targets it cannot hold {lost} (of {result.data['source']['targets']})\n"
               f"  padding dropped        {counts['padding_tokens_dropped']} tokens\n"
               f"  sha256                 {result.data['output']['sha256']}\n"
               f"  manifest               {result.manifest}")
    for name in [sidecar["file"] for sidecar in result.data["sidecars"]] + result.data["trainer_config"]:
        click.echo(f"  beside it              {result.path.with_name(name)}")


main.add_command(show)
main.add_command(report)
main.add_command(diff)
