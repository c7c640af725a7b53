"""Render stage: the tokenizer's chat template applied as a training render, with the clock pinned.

The template runs in transformers' own sandboxed Jinja environment (the one `apply_chat_template`
uses), with the same variables: the messages, the tokenizer's special tokens, the config's
`template_kwargs`, and no generation prompt. One thing differs: `strftime_now`, which transformers
binds to the wall clock, is bound to the pinned `current_date` (midnight UTC), so a render never
depends on the day, time or time zone it runs in.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import BuildError

_C_LOCALE_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_C_LOCALE_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
                    "September", "October", "November", "December")


def pinned_strftime(current_date: str | None):
    """strftime_now for templates: formats the pinned date; the names never follow the locale."""
    if current_date is None:
        def refuse(fmt: str) -> str:
            raise BuildError("the chat template reads the clock (strftime_now) but the config pins no "
                             "template_kwargs.current_date")
        return refuse
    moment = dt.datetime.strptime(current_date, "%Y-%m-%d").replace(tzinfo=dt.timezone.utc)

    def strftime_now(fmt: str) -> str:
        # %A/%B/%a/%b would follow LC_TIME if anything called setlocale; spell them out instead.
        for code, text in (("%A", _C_LOCALE_DAYS[moment.weekday()]), ("%a", _C_LOCALE_DAYS[moment.weekday()][:3]),
                           ("%B", _C_LOCALE_MONTHS[moment.month - 1]),
                           ("%b", _C_LOCALE_MONTHS[moment.month - 1][:3])):
            fmt = fmt.replace(code, text.replace("%", "%%"))
        return moment.strftime(fmt)

    return strftime_now


def load_tokenizer(directory: Path):
    """transformers' fast tokenizer from a local directory (already resolved and hash-checked)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as exc:  # transformers and tokenizers raise many kinds (KeyError, bare Exception) on bad files
        raise BuildError(f"{directory}: cannot load tokenizer: {type(exc).__name__}: {exc}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise BuildError(f"{directory}: a fast tokenizer (tokenizer.json) is required for offsets")
    if not tokenizer.chat_template:
        raise BuildError(f"{directory}: the tokenizer has no chat template")
    return tokenizer


@lru_cache(maxsize=8)
def _compiled(chat_template: str, current_date: str | None):
    from transformers.utils.chat_template_utils import _compile_jinja_template

    environment = _compile_jinja_template(chat_template).environment
    return environment.from_string(chat_template, globals={"strftime_now": pinned_strftime(current_date)})


class Renderer:
    """Renders conversations to text; picklable by (template, variables) for worker processes."""

    def __init__(self, chat_template: str, special_tokens: dict[str, Any], template_kwargs: dict[str, Any]):
        self.chat_template = chat_template
        self.variables = {**special_tokens, **template_kwargs, "add_generation_prompt": False}
        self.current_date = template_kwargs.get("current_date")
        self._prepared = None  # (template, globals and variables merged), made once per process

    @classmethod
    def for_tokenizer(cls, tokenizer, template_kwargs: dict[str, Any]) -> Renderer:
        return cls(tokenizer.chat_template, dict(tokenizer.special_tokens_map), template_kwargs)

    def compile(self) -> None:
        """Compile the template now: a template that does not compile is the config's error, found
        before the build starts, not an error of the first conversation rendered."""
        from jinja2 import TemplateError

        try:
            self._template()
        except TemplateError as exc:
            raise BuildError(f"the chat template does not compile: {type(exc).__name__}: {exc}")

    def _template(self):
        if self._prepared is None:
            template = _compiled(self.chat_template, self.current_date)
            self._prepared = template, {**template.globals, **self.variables}
        return self._prepared

    def render(self, messages: tuple[tuple[str, str], ...]) -> str:
        template, shared = self._template()
        # Template.render, less merging the globals into the variables on every call: with
        # shared=True the context takes the dict as it is.
        context = template.new_context({**shared, "messages": [{"role": r, "content": c} for r, c in messages]},
                                       shared=True)
        return "".join(template.root_render_func(context))

    def __getstate__(self):
        return {**self.__dict__, "_prepared": None}
