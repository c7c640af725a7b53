"""The command line: parses, calls, prints. Every failure is one line on stderr, never a traceback."""

from __future__ import annotations

import os
import sys

import click

# transformers advises about PyTorch on import; a data builder never needs it.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
# Download bars only on a terminal, as for the build's own bar: a log gets the result lines alone.
if not sys.stderr.isatty():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# huggingface_hub logs each retry of a request as a warning; what failed is databuild's one line.
os.environ.setdefault("HF_HUB_VERBOSITY", "error")

from .cli_files import export_command, hash_command, verify_command
from .cli_init import init
from .cli_make import make
from .cli_view import diff, report, show
from .errors import BuildError, one_line_errors


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="databuild")
def main():
    """Deterministic builder of packed SFT datasets and preference pairs (DPO, KTO).

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
    """The configs that `make NAME` knows, one line each; one that does not load is listed as BROKEN with
    its error, and the exit status is then 1.

    \b
    Example:
      databuild list
    """
    from .config import available_configs, load_config

    broken = []
    for name, path in available_configs().items():
        try:
            config = load_config(path)
        except (BuildError, OSError) as exc:  # one broken config hides none of the others
            broken.append(name)
            click.echo(f"{name}\tBROKEN\t{exc}\t{path}")
            continue
        sources = " + ".join((f"{s.repo}@{s.revision[:12]}" if s.repo else f"{s.dir} (local)")
                             + (f" (take {s.take})" if s.take is not None else "")
                             + (f" [{s.format}]" if s.format != "messages" else "") for s in config.sources)
        shape = (f"{config.rows_spelled} rows x {config.row_tokens} tokens" if config.task == "sft" else
                 f"{config.rows_spelled} pairs, prompt <= {config.prompt_tokens}, sequence <= "
                 f"{config.sequence_tokens} tokens")
        click.echo(f"{name}\t{shape}\t{sources}\t{path}")
    if broken:
        raise BuildError(f"{len(broken)} config(s) do not load: {', '.join(broken)} (the BROKEN lines above say why)")


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


for command in (make, init, hash_command, verify_command, export_command, show, report, diff):
    main.add_command(command)
