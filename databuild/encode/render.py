"""Render stage: the tokenizer's chat template applied as a training render, with the clock pinned.

The template runs in transformers' own sandboxed Jinja environment (the one `apply_chat_template`
uses), with the same variables: the messages as transformers prepares them, `tools` (the
conversation's, else None), `documents=None`, the tokenizer's special tokens, the config's
`template_kwargs`, and no generation prompt (the `assistant` strategy's inference renders ask for
one). One thing differs: `strftime_now`, which transformers binds to the wall clock, is bound to the
pinned `current_date` (midnight UTC), so a render never depends on the day, time or time zone it
runs in. A render can also return the character spans of the template's `{% generation %}` blocks,
recorded by transformers' own tracker.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import BuildError
from . import transformers_private
from .render_limit import DEFAULT_RENDER_TIMEOUT, time_limit

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
    """transformers' fast tokenizer from a local directory (already resolved and hash-checked): the class
    AutoTokenizer would load, found without importing torch where it can be (tokenizer_class.py)."""
    from transformers.utils import logging as hf_logging

    from .tokenizer_class import tokenizer_class

    hf_logging.set_verbosity_error()
    try:
        chosen = tokenizer_class(Path(directory))
        if chosen is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        else:
            tokenizer = chosen[0].from_pretrained(str(directory), local_files_only=True, **chosen[1])
    except Exception as exc:  # transformers and tokenizers raise many kinds (KeyError, bare Exception) on bad files
        raise BuildError(f"{directory}: cannot load tokenizer: {type(exc).__name__}: {exc}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise BuildError(f"{directory}: a fast tokenizer (tokenizer.json) is required for offsets")
    if not tokenizer.chat_template:
        raise BuildError(f"{directory}: the tokenizer has no chat template")
    return tokenizer


# transformers' own test for a template with assistant masks (render_jinja_template)
GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
PLAIN_KEYS = frozenset(("content", "role"))


def chat_templates(tokenizer) -> dict[str, str]:
    """The tokenizer's chat templates by name, as transformers loaded them: one unnamed template is
    'default'; a tokenizer_config.json list of {name, template}, or an additional_chat_templates/
    folder, gives several."""
    templates = tokenizer.chat_template
    return {"default": templates} if isinstance(templates, str) else dict(templates or {})


def template_messages(messages) -> list[dict]:
    """The messages as apply_chat_template hands them to the template (transformers_private.template_messages);
    messages of plain string role and content (the Tulu schema) are that already."""
    if all(type(v) is str and k in PLAIN_KEYS for m in messages for k, v in m.items()):
        return list(messages)
    return transformers_private.template_messages(messages)


@lru_cache(maxsize=8)
def _compiled(chat_template: str, current_date: str | None):
    environment = transformers_private.template_environment(chat_template)
    return environment.from_string(chat_template, globals={"strftime_now": pinned_strftime(current_date)})


class Renderer:
    """Renders conversations to text; picklable by (templates, variables) for worker processes.

    `templates` are the tokenizer's by name. With `name` (the config's chat_template_name) every
    conversation renders with that one; without, transformers' choice: `tool_use` for a conversation
    with tools when there is one, else `default`. Each render stops with RenderTimedOut after
    `timeout` seconds (time_limit).
    """

    def __init__(self, templates: dict[str, str] | str, special_tokens: dict[str, Any],
                 template_kwargs: dict[str, Any], name: str | None = None,
                 timeout: float | None = DEFAULT_RENDER_TIMEOUT):
        templates = {"default": templates} if isinstance(templates, str) else dict(templates)
        wanted = name or "default"
        if wanted not in templates:
            raise BuildError(f"the tokenizer has no chat template named {wanted!r} (it has: "
                             f"{', '.join(sorted(templates))}); set chat_template_name in the config")
        used = [wanted] if name or "tool_use" not in templates else [wanted, "tool_use"]
        self.templates = {n: templates[n] for n in used}
        self.tagged = {n: GENERATION_TAG.search(t) is not None for n, t in self.templates.items()}
        self.name = name
        self.timeout = timeout
        self.variables = {**special_tokens, **template_kwargs, "add_generation_prompt": False, "documents": None}
        self.current_date = template_kwargs.get("current_date")
        self._prepared: dict[str, tuple] = {}  # name -> (template, globals and variables merged), per process

    @classmethod
    def for_tokenizer(cls, tokenizer, template_kwargs: dict[str, Any], name: str | None = None,
                      timeout: float | None = DEFAULT_RENDER_TIMEOUT) -> Renderer:
        return cls(chat_templates(tokenizer), dict(tokenizer.special_tokens_map), template_kwargs, name, timeout)

    def template_name(self, tools) -> str:
        return self.name or ("tool_use" if tools is not None and "tool_use" in self.templates else "default")

    def has_generation_tags(self, tools=None) -> bool:
        return self.tagged[self.template_name(tools)]

    def json_filter(self, tools=None) -> Callable[..., str]:
        """The `tojson` filter the template runs with (transformers' own, bound by its environment):
        what views/arguments.py writes a tool call's arguments with, as the template would."""
        return self._template(self.template_name(tools))[0].environment.filters["tojson"]

    def pins(self) -> dict[str, Any]:
        """For the manifest: the configured name, and the sha256 of the text of each template used."""
        return {"name": self.name, "sha256": {n: hashlib.sha256(t.encode("utf-8")).hexdigest()
                                              for n, t in self.templates.items()}}

    def compile(self) -> None:
        """Compile the templates now: a template that does not compile is the config's error, found
        before the build starts, not an error of the first conversation rendered."""
        from jinja2 import TemplateError

        for name in self.templates:
            try:
                self._template(name)
            except TemplateError as exc:
                raise BuildError(f"the chat template does not compile: {type(exc).__name__}: {exc}")

    def _template(self, name: str):
        if name not in self._prepared:
            template = _compiled(self.templates[name], self.current_date)
            self._prepared[name] = template, {**template.globals, **self.variables}
        return self._prepared[name]

    def prepare(self, messages, tools) -> tuple[list[dict], Any]:
        """The messages and tools as the template receives them. Preparing is done message by message,
        so a slice of the prepared messages is the prepared slice: renders of a conversation's
        prefixes (encode/inference.py) prepare it once."""
        return template_messages(messages), None if tools is None else transformers_private.template_tools(tools)

    def _blocks(self, messages, tools, generation_prompt: bool = False, prepared: bool = False):
        template, shared = self._template(self.template_name(tools))
        if not prepared:
            messages, tools = self.prepare(messages, tools)
        variables = {**shared, "messages": messages, "tools": tools}
        if generation_prompt:
            variables["add_generation_prompt"] = True
        return template, transformers_private.render_blocks(template, variables)

    def render(self, messages, tools=None, generation_prompt: bool = False, prepared: bool = False) -> str:
        """The training render; with `generation_prompt`, the inference render of `messages` as a prompt
        (apply_chat_template(add_generation_prompt=True)); `prepared`: messages and tools from prepare()."""
        with time_limit(self.timeout):
            return "".join(self._blocks(messages, tools, generation_prompt, prepared)[1])

    def render_tracked(self, messages, tools=None) -> tuple[str, list[tuple[int, int]]]:
        """The text and the character spans of its `{% generation %}` blocks, in the order they close:
        transformers' tracker, run as `apply_chat_template(return_assistant_tokens_mask=True)` runs it."""
        template, blocks = self._blocks(messages, tools)
        rendered, spans = [], []
        with time_limit(self.timeout), transformers_private.generation_tracker(template, rendered, spans):
            for block in blocks:
                rendered.append(block)
        return "".join(rendered), spans

    def __getstate__(self):
        return {**self.__dict__, "_prepared": {}}
