"""`databuild init`: a config written from a user's own tokenizer and datasets.

cli.py registers this command (main.add_command).
"""

from __future__ import annotations

from pathlib import Path

import click

from .errors import BuildError, one_line_errors


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


def _rows_option(value: str | None) -> int | str | None:
    if value is None or value == "all":
        return value
    if not value.isdigit() or int(value) < 1:
        raise click.BadParameter(f"{value!r}: a count of rows (1 or more), or all")
    return int(value)


def _validation_option(value: str | None) -> int | float | None:
    if value is None or value == "none":
        return None
    try:
        number = float(value) if "." in value else int(value)
    except ValueError:
        number = None
    if number is None or number <= 0 or isinstance(number, float) and number >= 1:
        raise click.BadParameter(f"{value!r}: a share in (0, 1) like 0.05, a count of conversations like 500, or none")
    return number


@click.command()
@click.argument("name")
@click.option("--tokenizer", "tokenizer", required=True, metavar="DIR|ORG/NAME[@REV]",
              help="The tokenizer: a local folder (pinned by content), or a hub model repo at a branch, tag or "
                   "commit (default main), resolved to its commit; offline, from the hub cache.")
@click.option("--source", "sources", required=True, multiple=True, metavar="DIR|ORG/NAME[@REV]",
              help="A source, laid out as its hub repo (data/SPLIT-*.parquet); repeat for a mixture, in order.")
@click.option("--format", "formats", multiple=True, metavar="NAME|MAPPING",
              help="A source's format, once per source in order, where detection cannot decide: messages, "
                   "sharegpt, prompt_completion, '{messages: COL, role: F, content: F}', or auto.")
@click.option("--rows", callback=lambda context, parameter, value: _rows_option(value), metavar="N|all",
              help="Rows the build keeps; all: every row the sources give.")
@click.option("--row-tokens", type=click.IntRange(min=1), help="Tokens per row (an SFT build).")
@click.option("--prompt-tokens", type=click.IntRange(min=1),
              help="A preference build's longest prompt, in tokens (its sources are preference sources).")
@click.option("--sequence-tokens", type=click.IntRange(min=1),
              help="A preference build's longest prompt + completion, in tokens.")
@click.option("--validation", callback=lambda context, parameter, value: _validation_option(value),
              metavar="SHARE|COUNT|none", help="Hold out a validation split of each source: a share (0.05) or a "
                                                "count (500) of its conversations; none (the default): no split.")
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
@click.option("--on-bad-conversation", type=click.Choice(["error", "skip"]), default="skip", show_default=True,
              help="skip: a conversation that cannot be built is left out and counted by kind (make's summary, the "
                   "manifest), so one's own data builds as it stands; error: the build stops at the first.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the config. Default: configs/NAME.yaml.")
@click.option("--offline", is_flag=True, help="Use the hub cache only (as HF_HUB_OFFLINE=1).")
@click.option("--force", is_flag=True, help="Replace the config if it exists.")
@one_line_errors
def init(name, tokenizer, sources, formats, rows, row_tokens, prompt_tokens, sequence_tokens, validation, split, seed, loss_mask, packing, current_date,
         end_of_turn, chat_template_name, on_bad_conversation, out, offline, force):
    """Write configs/NAME.yaml from a tokenizer and sources, every input pinned, ready for `make NAME`.

    Hub revisions are resolved to commits and every file's sha256 pinned; local folders are pinned
    by content. Each source's format is detected from its schema (a preference source's, from its
    chosen/rejected or prompt/completion/label columns, makes a preference config), and the chat template inspected
    (generation tags, ends of turn, the clock, named templates); each key gets a comment. What it
    cannot decide it asks for, naming the option.

    \b
    Examples:
      databuild init my-sft --tokenizer ./phi-3-mini --source ./tulu --source ./sharegpt --rows 1000 --row-tokens 4096
      databuild init my-sft --tokenizer ./phi-3-mini --source ./tulu --rows all --row-tokens 4096 --validation 0.05
      databuild init mine --tokenizer ./tok --source ./my-data --rows all --row-tokens 4096
      databuild init my-sft --tokenizer Qwen/Qwen2.5-7B-Instruct --source allenai/tulu-3-sft-mixture \\
          --rows 6400 --row-tokens 8192 --offline
      databuild init my-dpo --tokenizer ./phi-3-mini --source allenai/llama-3.1-tulu-3-8b-preference-mixture \\
          --rows all --prompt-tokens 1024 --sequence-tokens 2048
      databuild make my-sft
    """
    from .scaffold import InitOptions, init_config

    options = InitOptions(name, tokenizer, tuple(sources), row_tokens, rows, out, tuple(map(_format_option, formats)),
                          split, seed, loss_mask, packing, current_date, tuple(end_of_turn), chat_template_name,
                          on_bad_conversation, offline, force, validation, prompt_tokens, sequence_tokens)
    path, config, decided = init_config(options)
    click.echo(f"{path}")
    def pinned(entry) -> str:
        return f"{len(entry['sha256'])} file{'s' if len(entry['sha256']) != 1 else ''} pinned"

    for number, source in enumerate(config["sources"]):
        where = source.get("repo") or source.get("dir")
        fmt = source["format"] if isinstance(source["format"], str) else "columns"
        click.echo(f"  source {number}  {where} ({fmt}, {pinned(source)})")
    click.echo(f"  tokenizer {config['tokenizer'].get('repo') or config['tokenizer'].get('dir')} "
               f"({pinned(config['tokenizer'])})")
    click.echo("decided (each with a comment in the config):\n" + "\n".join(f"  {line}" for line in decided))
    click.echo(f"next: databuild make {path if options.out else name}")
