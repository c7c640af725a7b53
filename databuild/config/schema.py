"""The config's schema: frozen dataclasses for a build, its sources and its tokenizer.

`load.py` fills them from YAML and validates every key; `databuild init` writes YAML that loads into
the same classes, so there is one schema for what is written and what is checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import BuildError
from ..sources.tool_checks import DataRules
from ..encode.render_limit import DEFAULT_RENDER_TIMEOUT

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
BAD_CONVERSATION_POLICIES = ("error", "skip")
STOP_TOKEN_POLICIES = ("refuse", "train")
ROWS_ALL = "all"  # `rows: all`: every row the sources give


@dataclass(frozen=True)
class SourceSpec:
    repo: str | None  # None: a local `dir` pinned by its files' content alone
    revision: str | None  # a 40-hex commit; None exactly when repo is
    split: str = "train"
    dir: Path | None = None  # a local copy laid out like the hub repo, used in place of the hub
    take: int | float | None = None  # a count of rows, or a fraction (0, 1] of the source; None: every row
    format: str = "messages"  # a name in sources.formats.FORMATS, or "columns" (a column mapping)
    columns: tuple[tuple[str, str], ...] = ()  # format "columns": (key, column or field name), sorted
    key: str = field(default="source", compare=False)  # where the config holds it: source, or sources[i]
    ignore_fields: tuple[str, ...] = ()  # columns and message fields left out on purpose, as the config lists them
    sha256: tuple[tuple[str, str], ...] = ()  # (file path in the source, hex digest), sorted; () pins none
    rules: DataRules = DataRules()  # struct_nulls, invalid_tool_arguments, undeclared_tool_calls

    @property
    def name(self) -> str:
        """What names the source in rows, ids and messages: its repo, else its folder's name."""
        return self.repo if self.repo is not None else self.dir.name

    @property
    def where(self) -> str:
        return f"dataset {self.repo}@{self.revision}" if self.repo is not None else f"dataset dir {self.dir}"

    @property
    def format_config(self) -> str | dict[str, str]:
        """The format as the config spells it: a name, or the column mapping."""
        return dict(self.columns) if self.columns else self.format  # a column mapping, as written


@dataclass(frozen=True)
class TokenizerSpec:
    repo: str | None  # None: a local `dir` pinned by its files' content alone
    revision: str | None
    sha256: tuple[tuple[str, str], ...]  # (file name, hex digest), sorted by file name
    dir: Path | None = None

    @property
    def where(self) -> str:
        return f"tokenizer {self.repo}@{self.revision}" if self.repo is not None else f"tokenizer dir {self.dir}"


@dataclass(frozen=True)
class BuildConfig:
    name: str
    sources: tuple[SourceSpec, ...]  # `source:` is a list of one
    tokenizer: TokenizerSpec
    loss_mask: str
    seed: int
    row_tokens: int | None  # None on a preference build (task: preference), which writes one pair per row
    rows: int | None  # None: `rows: all`, every row the sources give
    template_kwargs: tuple[tuple[str, Any], ...] = ()
    separator: str | None = None  # a token string; None means the tokenizer's EOS token
    on_bad_conversation: str = "error"
    packing: str = "concat"  # a policy of databuild/pack/policy.py's POLICIES
    packing_window: int | None = None  # bfd: conversations packed together (None under concat)
    overlong: str | None = None  # bfd: what a conversation longer than a row gets
    pad_token: str | None = None  # bfd: a token string; None means the tokenizer's pad token, else the separator
    path: Path | None = field(default=None, compare=False)
    chat_template_name: str | None = None  # one of the tokenizer's named templates; None: transformers' choice
    end_of_turn: tuple[str, ...] = ()  # special tokens closing an assistant turn, besides EOS
    history: str = "expand"  # a template that rewrites history: expand (one sample per turn) or refuse
    stop_tokens_in_fields: str = "refuse"  # an assistant field spelling a stop token: refuse, or train (declared spans)
    # seconds a render may take (encode/render_limit.py); the rows do not depend on it, so no manifest holds it
    render_timeout: float = field(default=DEFAULT_RENDER_TIMEOUT, compare=False)
    dedup: str = "none"  # exact: conversations the same after sources/dedup.py's normalisation kept once
    train_turns: str = "all"  # which of the supervised turns train: all, last, flagged (encode/turns.py)
    validation: Any = None  # a ValidationSpec (sources/holdout.py): the held-out split; None: no split
    split: str = "train"  # which split this build writes: train, or validation (the held-out conversations)
    task: str = "sft"  # sft (packed rows), or preference (one pair per row: config/preference.py)
    prompt_tokens: int | None = None  # preference: the most tokens of a prompt (None on an SFT build)
    sequence_tokens: int | None = None  # preference: the most tokens of a prompt and one completion
    overlong_prompt: str | None = None  # preference: drop or cut_left, for a prompt over prompt_tokens

    @property
    def rows_spelled(self) -> int | str:
        """`rows` as the config writes it (and the manifest's build.rows records it): a count, or "all"."""
        return ROWS_ALL if self.rows is None else self.rows

    @property
    def template_kwargs_dict(self) -> dict[str, Any]:
        return dict(self.template_kwargs)

    @property
    def tokenizer_sha256(self) -> dict[str, str]:
        return dict(self.tokenizer.sha256)

    def with_overrides(self, **changes: Any) -> BuildConfig:
        """A copy with source/tokenizer directories replaced (the CLI's air-gapped overrides)."""
        sources, tokenizer = self.sources, self.tokenizer
        if changes.get("dataset_dir") is not None:
            if len(sources) > 1:
                raise BuildError(f"{self.path}: --dataset-dir replaces the one source of a config, and this one "
                                 f"lists {len(sources)}: set each one's 'dir' in the config instead")
            sources = (replace(sources[0], dir=Path(changes["dataset_dir"]).resolve()),)
        if changes.get("tokenizer_dir") is not None:
            tokenizer = replace(tokenizer, dir=Path(changes["tokenizer_dir"]).resolve())
        return replace(self, sources=sources, tokenizer=tokenizer)
