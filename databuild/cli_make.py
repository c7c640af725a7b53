"""`databuild make`: parses its options, calls the build (SFT: build.py; task: preference:
preference/build.py), prints its summary and funnel, and with --recipe writes the verified figures into
the recipe. cli.py registers this command (main.add_command)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from .cli_files import echo_funnel
from .errors import BuildError, one_line_errors


def _overrides(config, dataset_dir, tokenizer_dir):
    return config.with_overrides(dataset_dir=dataset_dir, tokenizer_dir=tokenizer_dir)


@click.command()
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
                   "threads; the output does not depend on it. Default, and the most that runs: 1 below 4 cores, "
                   "else one per core, 16 at most, as more were slower; DATABUILD_CORES sets the cores, "
                   "RAYON_NUM_THREADS the threads of each. Ray: the actors (default 1).")
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
@click.option("--render-timeout", type=click.FloatRange(min=0, max=10**9, min_open=True, max_open=True), default=None, metavar="SECONDS",
              help="The most one render of the chat template may take, for a template that is slow but ends; "
                   "past it the build stops. Default: the config's render_timeout, else 60. The rows do not "
                   "depend on it.")
@one_line_errors
def make(name, out_dir, offline, dataset_dir, tokenizer_dir, workers, batch_size, executor, ray_address, recipe, repin,
         force, render_timeout):
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
      databuild make configs/slow-template.yaml --render-timeout 600
    """
    from .executors import start_early

    # Where it will build with encode processes, their fork server starts first, so that its imports and the
    # tokenizer's load run beside the reading of the config and the build's own imports (pyarrow and its
    # compute functions, the sources' formats: ~0.5 s here). It builds for sure with --force, or where
    # --out holds no build of any name (publish/manifest.manifest_path's names); else it starts once the
    # config names its output and no build of that name is there (build.make starts it too, and finds it
    # running).
    early = (force or not any(out_dir.glob("*.manifest.json"))) and start_early(executor, workers)
    from .config import resolve_config
    from .publish.manifest import builds_anyway

    config = _overrides(resolve_config(name), dataset_dir, tokenizer_dir)
    if render_timeout is not None:
        config = replace(config, render_timeout=render_timeout)
    if config.task == "preference":
        _make_preference(config, out_dir, force, offline, workers, batch_size, executor, recipe, repin)
        return
    if not early and builds_anyway(out_dir / f"{config.name}.parquet", force):
        start_early(executor, workers)
    from .build import make as run_make
    from .records.row import NO_SUPERVISED_TOKEN
    result = run_make(config, out_dir, force=force, offline=offline, workers=workers, batch_size=batch_size,
                      executor=executor, ray_address=ray_address)
    s = result.data["output"]
    skipped = result.data["counts"]["rows_skipped"][NO_SUPERVISED_TOKEN]
    _echo_built(result)
    click.echo(f"{result.parquet}\n"
               f"  rows                   {s['rows']} x {s['row_tokens']} tokens ({s['tokens']:,} tokens)"
               + (" (rows: all; every row the sources give)\n" if result.data["build"]["rows"] == "all" else "\n")
               +
               f"  supervised_token_ratio {s['supervised_token_ratio']:.4f}\n"
               f"  rows skipped           {skipped} (no supervised token)\n"
               + (f"  padding_tokens         {s['padding_tokens']:,} ({s['padding_tokens'] / s['tokens']:.2%})\n"
                  if s["padding_tokens"] else "")
               + f"  rows_sha256            {s['rows_sha256']}\n"
               f"  parquet_sha256         {s['parquet_sha256']}\n"
               f"  parquet_bytes          {s['parquet_bytes']:,}\n"
               + (f"  time                   {result.seconds:.1f} s ({s['tokens'] / max(result.seconds, 1e-9):,.0f} "
                  "tokens/s)\n" if result.built is not None else "")
               + f"  manifest               {result.manifest}"
               + (f"\n  validation             {result.parquet.with_name(v['file'])} ({v['rows']} rows, rows_sha256 "
                  f"{v['rows_sha256']}; its own manifest and funnel beside it)" if (v := result.data.get("validation"))
                  else ""))
    echo_funnel(result.data)
    if recipe is not None:
        from .publish.recipe import update_recipe
        from .verification import gather, verify

        report = verify(result.parquet, gather(result.parquet, result.manifest))
        if report.failures:
            raise BuildError(f"{result.parquet} does not verify, recipe left unchanged: {report.failures[0]}")
        changed = update_recipe(recipe, result.manifest, repin=repin)
        click.echo(f"  recipe                 {recipe} ({'updated' if changed else 'already up to date'})")


def _echo_built(result) -> None:
    """make's first lines: up to date (nothing written), or why it built and how it encoded."""
    waited = f" after waiting {result.waited:.1f} s for another make" if result.waited >= 0.05 else ""
    if result.built is None:
        click.echo(f"up to date{waited}: the manifest records this config's pins and settings and the file verifies "
                   f"(checked in {result.seconds:.1f} s; nothing written; --force rebuilds)")
    else:
        click.echo(f"built{waited}: {result.built}\nencoded by: {result.encoding}")


def _make_preference(config, out_dir, force, offline, workers, batch_size, executor, recipe, repin) -> None:
    """make of a preference config (task: preference): its build, then its summary and counts."""
    from .preference.build import make_preference

    if executor != "local":
        raise BuildError(f"--executor {executor}: a preference build runs on local processes only (--workers)")
    result = make_preference(config, out_dir, force=force, offline=offline, workers=workers, batch_size=batch_size)
    s, counts = result.data["output"], result.data["counts"]
    _echo_built(result)
    names = ("chosen", "rejected") if s["kind"] == "paired" else ("completion",)
    left_out = {**counts["pairs_refused"], **counts["pairs_dropped"]}
    left_out = ", ".join(f"{n} {kind}" for kind, n in left_out.items() if n) or "none"
    click.echo(f"{result.parquet}\n"
               f"  {'pairs' if s['kind'] == 'paired' else 'unpaired rows':<22} {s['rows']} (of {counts['pairs_read']} "
               f"read{'; rows: all' if result.data['build']['rows'] == 'all' else ''})\n"
               f"  left out               {left_out}" + (f"; {counts['malformed_in_source']} malformed in the source"
                                                         if counts["malformed_in_source"] else "") + "\n"
               f"  prompts cut            {counts['prompts_cut']} ({counts['prompt_tokens_cut']:,} tokens; "
               f"overlong_prompt: {result.data['build']['overlong_prompt']})\n"
               f"  prompt tokens          {s['prompt_tokens']:,}\n"
               + "".join(f"  {name + ' tokens':<22} {s[name + '_tokens']:,} ({s[name + '_supervised_tokens']:,} "
                         f"targets)\n" for name in names)
               + f"  rows_sha256            {s['rows_sha256']}\n"
               f"  parquet_sha256         {s['parquet_sha256']}\n"
               f"  parquet_bytes          {s['parquet_bytes']:,}\n"
               + (f"  time                   {result.seconds:.1f} s ({counts['pairs_read'] / max(result.seconds, 1e-9):,.0f} "
                  "pairs read/s)\n" if result.built is not None else "")
               + f"  manifest               {result.manifest}")
    if recipe is not None:
        from .publish.preference import recipe_values
        from .publish.recipe import update_recipe
        from .verification.preference import verify_preference

        report, _ = verify_preference(result.parquet, result.manifest)
        if report.failures:
            raise BuildError(f"{result.parquet} does not verify, recipe left unchanged: {report.failures[0]}")
        changed = update_recipe(recipe, result.manifest, repin=repin, values=recipe_values(result.data))
        click.echo(f"  recipe                 {recipe} ({'updated' if changed else 'already up to date'})")
