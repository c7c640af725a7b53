"""The config `init` writes, as YAML with a comment on each key (ruamel.yaml round-trip): each input's
origin and pins, the format detected, what the template needs pinned, and the build's keys."""

from __future__ import annotations

import os
from pathlib import Path

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString as Quoted

from .detect import Detected
from .locate import Located
from .options import InitOptions, task_of
from .template import Inspected


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
