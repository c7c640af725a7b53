"""The config `init` writes: every input located and pinned, the template inspected, a comment on
each key (ruamel.yaml round-trip), loaded back into the config schema before it takes its name."""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString as Quoted

from ..config import load_config
from ..errors import BuildError
from ..sources.formats import PREFERENCE_FORMATS
from .detect import Detected, detect_format
from .locate import Located, locate_source, locate_tokenizer
from .template import Inspected, inspect_template


@dataclass(frozen=True)
class InitOptions:
    name: str
    tokenizer: str  # a folder, or REPO[@REVISION]
    sources: tuple[str, ...]  # each a folder, or REPO[@REVISION]
    row_tokens: int | None = None
    rows: int | str | None = None  # a count, or "all"
    out: Path | None = None  # default configs/NAME.yaml
    formats: tuple[str | dict, ...] = ()  # one per source when given ("auto": detect)
    split: str = "train"
    seed: int = 0
    loss_mask: str = "assistant"
    packing: str = "concat"
    current_date: str | None = None
    end_of_turn: tuple[str, ...] = ()
    chat_template_name: str | None = None
    on_bad_conversation: str = "skip"  # one's own data builds as it stands; the recipe configs keep error
    offline: bool = False
    force: bool = False
    validation: int | float | None = None  # held out of each source: a share (float) or a count (int); None: none
    prompt_tokens: int | None = None  # a preference build's (task: preference) longest prompt
    sequence_tokens: int | None = None  # a preference build's longest prompt + completion


def _relative(path: Path, config_dir: Path) -> str:
    """Relative to the config's folder when the two share a tree (they move together), else absolute."""
    config_dir = config_dir.resolve()
    if os.path.commonpath([path, config_dir]) == path.anchor:
        return str(path)
    return os.path.relpath(path, config_dir)


def _origin(map_: CommentedMap, located: Located, config_dir: Path) -> None:
    if located.repo is None:
        map_["dir"] = _relative(located.root, config_dir)
        map_.yaml_add_eol_comment("a local folder, pinned by its files' sha256 alone (no repo, no revision)", "dir")
        return
    map_["repo"] = located.repo
    map_["revision"] = Quoted(located.revision)
    asked = f"'{located.asked}' resolved to its commit" if located.asked else "the commit"
    map_.yaml_add_eol_comment(f"{asked}; a branch or tag is refused", "revision")


def _source(located: Located, detected: Detected, split: str, config_dir: Path) -> CommentedMap:
    entry = CommentedMap()
    _origin(entry, located, config_dir)
    if split != "train":
        entry["split"] = split
        entry.yaml_add_eol_comment("the files of this split (data/SPLIT-*.EXT, data/SPLIT.EXT, SPLIT.EXT, or the "
                                   "dataset card's data_files)", "split")
    entry["format"] = detected.format if isinstance(detected.format, str) else CommentedMap(detected.format)
    extras = f"; tool/reasoning fields: {', '.join(detected.extras)}" if detected.extras else ""
    entry.yaml_add_eol_comment(f"{detected.why}{extras}", "format")
    if detected.structs:
        entry["struct_nulls"] = "drop"
        entry.yaml_add_eol_comment(f"{detected.structs} is a parquet struct (every row's keys, null where a row had "
                                   "none): the keys whose value is null there are dropped, and counted; write it as "
                                   "datasets' Json or JSON text to keep it exactly", "struct_nulls")
    if detected.unread:
        entry["ignore_fields"] = CommentedSeq(detected.unread)
        entry.yaml_add_eol_comment("columns the format does not read, left out on purpose; remove one and the "
                                   "build refuses the file", "ignore_fields")
    entry["sha256"] = CommentedMap(located.pins)
    entry.yaml_add_eol_comment(f"every data file's sha256, checked before a row is built "
                               f"({len(located.files)} file{'s' if len(located.files) != 1 else ''})", "sha256")
    return entry


def _preference_keys(config: CommentedMap, options: InitOptions) -> None:
    """A preference build's keys (config/preference.py), in place of the SFT row's."""
    config["prompt_tokens"] = options.prompt_tokens
    config.yaml_add_eol_comment("the longest prompt, in tokens (a DPO trainer's max_prompt_length)", "prompt_tokens")
    config["sequence_tokens"] = options.sequence_tokens
    config.yaml_add_eol_comment("the longest prompt + completion, in tokens (a DPO trainer's max_length)",
                                "sequence_tokens")
    config["overlong_prompt"] = "drop"
    config.yaml_add_eol_comment("a prompt over prompt_tokens: drop the pair (counted); cut_left: keep its last "
                                "tokens (counted)", "overlong_prompt")


def task_of(sources: list[tuple[Located, Detected]], given: tuple[str, ...]) -> str:
    """preference when every source is a preference source, sft when none is; a mix refused naming one of each."""
    tasks = [detected.task for _, detected in sources]
    if len(set(tasks)) > 1:
        first, other = tasks.index("preference"), tasks.index("sft")
        raise BuildError(f"--source {given[first]} is a preference source and --source {given[other]} is not: a build "
                         "is of pairs or of conversations; write one config for each")
    return tasks[0]


def compose(options: InitOptions, tokenizer: Located, inspected: Inspected,
            sources: list[tuple[Located, Detected]], config_dir: Path) -> CommentedMap:
    preference = task_of(sources, options.sources) == "preference"
    config = CommentedMap()
    config["name"] = options.name
    config.yaml_add_eol_comment("the build's name: NAME.parquet, NAME.manifest.json", "name")
    config["description"] = f"written by databuild init from {', '.join(options.sources)}"
    if preference:
        config["task"] = "preference"
        config.yaml_add_eol_comment("chosen/rejected pairs (or unpaired labelled completions), one per row, for DPO "
                                    "and KTO: the sources are preference sources", "task")
    listed = CommentedSeq(_source(located, detected, options.split, config_dir) for located, detected in sources)
    config["sources"] = listed
    config.yaml_set_comment_before_after_key(
        "sources", before="The sources, in order: their rows are mixed and permuted with `seed`. A source may add\n"
                          "`take: N` (rows) or `take: 0.25` (a fraction) to use part of it.")
    spec = CommentedMap()
    _origin(spec, tokenizer, config_dir)
    spec["sha256"] = CommentedMap(tokenizer.pins)
    spec.yaml_add_eol_comment("every tokenizer file's sha256 (generation_config.json included: its stop tokens)",
                              "sha256")
    config["tokenizer"] = spec
    config.yaml_set_comment_before_after_key("tokenizer",
                                             before="The tokenizer and its chat template, pinned file by file.")
    if inspected.reads_clock:
        config["template_kwargs"] = CommentedMap(current_date=Quoted(options.current_date))
        config["template_kwargs"].yaml_add_eol_comment("the template reads the clock: the date every render says",
                                                       "current_date")
    config["loss_mask"] = options.loss_mask
    tags = "has {% generation %} tags" if inspected.tagged else "has no generation tags"
    config.yaml_add_eol_comment(f"the targets; the template {tags}", "loss_mask")
    if inspected.end_of_turn:
        config["end_of_turn"] = CommentedSeq(Quoted(t) for t in inspected.end_of_turn)
        config.yaml_add_eol_comment(f"closes an assistant turn, with EOS {inspected.eos}: {inspected.end_of_turn_why}",
                                    "end_of_turn")
    if options.chat_template_name is not None or len(inspected.names) > 1:
        config["chat_template_name"] = options.chat_template_name
        config.yaml_add_eol_comment(f"the tokenizer's templates: {', '.join(inspected.names)}; null: transformers' "
                                    "choice (tool_use for a conversation with tools, else default)",
                                    "chat_template_name")
    config["seed"] = options.seed
    config.yaml_add_eol_comment("the permutation's seed, and the takes'", "seed")
    if preference:
        _preference_keys(config, options)
    else:
        config["row_tokens"] = options.row_tokens
        config.yaml_add_eol_comment("tokens per row", "row_tokens")
    config["rows"] = options.rows
    config.yaml_add_eol_comment("rows the build keeps; all: every row the sources give" if options.rows == "all" else
                                "rows the build keeps; make fails, naming its counts, if the sources run out "
                                "(all: every row they give)", "rows")
    if not preference:
        config["packing"] = options.packing
        config.yaml_add_eol_comment("concat: one stream cut into rows; bfd: whole conversations, rows padded",
                                    "packing")
    if options.validation is not None:
        key = "share" if isinstance(options.validation, float) else "count"
        config["validation"] = CommentedMap([(key, options.validation), ("seed", 0)])
        config.yaml_add_eol_comment("held out of each source by sha256(seed:id) into NAME.validation.parquet; "
                                    "none of it trains", "validation")
    config["on_bad_conversation"] = options.on_bad_conversation
    config.yaml_add_eol_comment(
        "skip: a conversation that cannot be built is left out and counted by kind (make's summary lists them, the "
        "manifest counts them); error: stop at the first" if options.on_bad_conversation == "skip" else
        "error: stop at the first conversation that cannot be built; skip: leave it out and count it by kind",
        "on_bad_conversation")
    if inspected.variables:
        config.yaml_set_comment_before_after_key(
            "loss_mask", before=f"The template also reads the variables {', '.join(inspected.variables)}: set them "
                                "under template_kwargs to pin them (unset, the template's own default applies).")
    return config


def _check_options(options: InitOptions) -> None:
    if not re.match(r"^[A-Za-z0-9._-]+$", options.name):
        raise BuildError(f"init {options.name}: a name is letters, digits, '.', '_' and '-'")
    if not options.sources:
        raise BuildError("init needs a source: pass --source DIR or --source ORG/NAME[@REVISION]")
    if options.formats and len(options.formats) != len(options.sources):
        raise BuildError(f"--format is given {len(options.formats)} times for {len(options.sources)} sources: give "
                         "it once per source, in order ('auto' to detect one)")
    if options.rows is None:
        raise BuildError("init cannot decide rows: pass --rows N")


def _check_lengths(options: InitOptions, task: str) -> None:
    """The lengths a build of `task` needs, asked for by option; the other task's refused."""
    needed = (("--prompt-tokens", options.prompt_tokens), ("--sequence-tokens", options.sequence_tokens)) \
        if task == "preference" else (("--row-tokens", options.row_tokens),)
    for option, value in needed:
        if value is None:
            raise BuildError(f"init cannot decide {option[2:]}: pass {option} N" + (
                " (the sources are preference sources: a build of pairs)" if task == "preference" else ""))
    foreign = (("--row-tokens", options.row_tokens),) if task == "preference" else (
        ("--prompt-tokens", options.prompt_tokens), ("--sequence-tokens", options.sequence_tokens))
    if task == "preference" and options.validation is not None:
        raise BuildError("--validation holds out conversations of an SFT build: a preference build has no validation "
                         "split yet (task: preference refuses the key)")
    for option, value in foreign:
        if value is not None:
            raise BuildError(f"{option} is for a build of {'conversations' if task == 'preference' else 'pairs'}: the "
                             f"sources are {'preference' if task == 'preference' else 'SFT'} sources")


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
    _check_options(options)
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
    _check_lengths(options, task_of(sources, options.sources))
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
