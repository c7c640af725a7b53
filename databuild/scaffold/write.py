"""The config `init` writes: every input located and pinned, the template inspected, the YAML composed
(compose.py), loaded back into the config schema before it takes its name; and what init decided, for
the console."""

from __future__ import annotations

import io
import os
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from ..config import load_config
from ..errors import BuildError
from ..sources.formats import PREFERENCE_FORMATS
from .compose import compose
from .detect import Detected, detect_format
from .locate import Located, locate_source, locate_tokenizer
from .options import InitOptions, check_lengths, check_options, task_of
from .template import Inspected, inspect_template


def decisions(options: InitOptions, inspected: Inspected, sources: list[tuple[Located, Detected]]) -> list[str]:
    """What init decided that the user did not give, one line each, for the console: each source's
    format and why, the columns it leaves out, the targets, the ends of turn, what happens to a
    conversation that cannot be built, and the template variables left to the template's defaults."""
    lines = []
    for number, (located, detected) in enumerate(sources):
        extras = f"; tool/reasoning fields: {', '.join(detected.extras)}" if detected.extras else ""
        lines.append(f"source {number} format: {_spelled(detected.format)} ({detected.why}{extras})")
        if detected.unread:
            lines.append(f"source {number} ignore_fields: {', '.join(detected.unread)} (columns the format does not "
                         "read, left out on purpose; each is named in the config)")
    tags = "from its {% generation %} tags" if inspected.tagged else \
        "the template has no generation tags: each turn's target found by rendering it as inference does"
    lines.append(f"loss_mask: {options.loss_mask}" + (f" ({tags})" if options.loss_mask == "assistant" else ""))
    if inspected.end_of_turn:
        lines.append(f"end_of_turn: {', '.join(inspected.end_of_turn)} ({inspected.end_of_turn_why}; EOS "
                     f"{inspected.eos})")
    lines.append(f"on_bad_conversation: {options.on_bad_conversation}" + (
        " (a conversation that cannot be built is left out and counted by kind in make's summary and the manifest)"
        if options.on_bad_conversation == "skip" else " (the build stops at the first conversation it cannot build)"))
    if task_of(sources, options.sources) == "preference":
        lines.append(f"task: preference (every source is a preference source: one pair per row; prompt_tokens "
                     f"{options.prompt_tokens}, sequence_tokens {options.sequence_tokens}, overlong_prompt: drop)")
    else:
        lines.append("validation: none (nothing held out; --validation 0.05 or --validation 500 holds out a share or a "
                     "count of each source, built beside the training file)" if options.validation is None else
                     f"validation: {'share' if isinstance(options.validation, float) else 'count'} "
                     f"{options.validation} of each source, held out by its id into NAME.validation.parquet (seed 0)")
    if inspected.variables:
        lines.append(f"template variables left to the template's defaults: {', '.join(inspected.variables)} (set them "
                     "under template_kwargs to pin them)")
    return lines


def _spelled(format_: str | dict) -> str:
    return format_ if isinstance(format_, str) else "{" + ", ".join(f"{k}: {v}" for k, v in format_.items()) + "}"


def init_config(options: InitOptions) -> tuple[Path, CommentedMap, list[str]]:
    """Write the config (refusing to replace one unless `force`); return its path, its content and
    what init decided (decisions)."""
    check_options(options)
    path = (options.out or Path("configs") / f"{options.name}.yaml")
    if path.exists() and not options.force:
        raise BuildError(f"{path} exists: pass --force to replace it, or -o another path")
    tokenizer = locate_tokenizer(options.tokenizer, options.offline)
    inspected = inspect_template(tokenizer.root, options.loss_mask, options.chat_template_name, options.current_date,
                                 options.end_of_turn)
    sources = []
    for number, given in enumerate(options.sources):
        located = locate_source(given, options.split, options.offline)
        wanted = options.formats[number] if options.formats else "auto"
        if wanted != "auto":
            sources.append((located, Detected(wanted, "as --format gave", (), task="preference" if isinstance(
                wanted, str) and wanted in PREFERENCE_FORMATS else "sft")))
            continue
        found = [detect_format(located.root / name, given) for name in located.files]
        if any(d.format != found[0].format for d in found):
            odd = next(name for name, d in zip(located.files, found) if d.format != found[0].format)
            raise BuildError(f"--source {given}: {odd} has another format than {located.files[0]}: one source is "
                             "one format; split it into two sources")
        sources.append((located, found[0]))
    check_lengths(options, task_of(sources, options.sources))
    path.parent.mkdir(parents=True, exist_ok=True)
    config = compose(options, tokenizer, inspected, sources, path.parent)
    text = io.StringIO()
    yaml = YAML()
    yaml.width = 4096  # a comment is one line however long
    yaml.dump(config, text)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text.getvalue(), encoding="utf-8")
    try:
        load_config(partial)  # the one schema: what init writes is what make reads
    except BuildError as exc:
        partial.unlink()
        raise BuildError(f"init wrote a config its own schema refuses (a bug): {exc}") from None
    os.replace(partial, path)
    return path, config, decisions(options, inspected, sources)
