"""What `databuild init` is asked (`InitOptions`: the command line's options), checked before any input
is read (`check_options`) and once the sources' task is known (`task_of`, `check_lengths`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from .detect import Detected
from .locate import Located


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


def task_of(sources: list[tuple[Located, Detected]], given: tuple[str, ...]) -> str:
    """preference when every source is a preference source, sft when none is; a mix refused naming one of each."""
    tasks = [detected.task for _, detected in sources]
    if len(set(tasks)) > 1:
        first, other = tasks.index("preference"), tasks.index("sft")
        raise BuildError(f"--source {given[first]} is a preference source and --source {given[other]} is not: a build "
                         "is of pairs or of conversations; write one config for each")
    return tasks[0]


def check_options(options: InitOptions) -> None:
    if not re.match(r"^[A-Za-z0-9._-]+$", options.name):
        raise BuildError(f"init {options.name}: a name is letters, digits, '.', '_' and '-'")
    if not options.sources:
        raise BuildError("init needs a source: pass --source DIR or --source ORG/NAME[@REVISION]")
    if options.formats and len(options.formats) != len(options.sources):
        raise BuildError(f"--format is given {len(options.formats)} times for {len(options.sources)} sources: give "
                         "it once per source, in order ('auto' to detect one)")
    if options.rows is None:
        raise BuildError("init cannot decide rows: pass --rows N")


def check_lengths(options: InitOptions, task: str) -> None:
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
