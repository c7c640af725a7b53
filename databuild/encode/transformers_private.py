"""The private transformers and Jinja APIs databuild uses, and only here.

A render must be transformers' render: the messages prepared as `apply_chat_template` prepares them,
the template compiled into transformers' sandboxed environment (its `{% generation %}` extension and
tracker included). Those are reused, not copied, through names transformers does not export and
may change in any release; the rest of databuild calls the functions below.

Pinned by requirements.lock: transformers==5.24.0 (transformers.utils.chat_template_utils:
_normalize_chat_messages, _plain_template_data, _alias_reasoning_fields, _compile_jinja_template,
_REASONING_FIELDS, and the environment's activate_tracker) and Jinja2==3.1.6 (Template.new_context
with shared=True, Template.root_render_func). tests/test_transformers_private.py checks that each
still exists and does what is relied on; tests/test_parity.py checks whole renders and masks against
apply_chat_template itself. Run both before moving either pin.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Iterator

def template_messages(messages: list) -> list[dict]:
    """The messages as apply_chat_template hands them to the template: keys whose value is None
    dropped, a plain copy, a reasoning trace under any of records.conversation.REASONING_FIELDS also as `thinking` and
    `reasoning_content`."""
    from transformers.utils.chat_template_utils import (_alias_reasoning_fields, _normalize_chat_messages,
                                                        _plain_template_data)

    return _alias_reasoning_fields(_plain_template_data(_normalize_chat_messages(list(messages))))


def template_tools(tools: Any) -> Any:
    """The tools as apply_chat_template hands them to the template: plain JSON values."""
    from transformers.utils.chat_template_utils import _plain_template_data

    return _plain_template_data(tools)


def template_environment(chat_template: str):
    """transformers' sandboxed Jinja environment for the template (its extensions and filters)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(chat_template).environment


def render_blocks(template, variables: dict[str, Any]) -> Iterator[str]:
    """Template.render's blocks, without merging the globals into the variables on every call:
    `variables` must hold them already (with shared=True the context takes the dict as it is)."""
    return template.root_render_func(template.new_context(variables, shared=True))


def generation_tracker(template, rendered: list[str], spans: list) -> AbstractContextManager:
    """transformers' tracker of `{% generation %}` blocks: while active, the blocks rendered into
    `rendered` record their character spans into `spans`."""
    return template.environment.activate_tracker(rendered, spans)
