"""The chat template, inspected for what a build must pin: which named template renders, whether it
has generation tags, whether it reads the clock (then `current_date` must be given), the variables
it reads beyond transformers' own, and on an untagged template the ends of turn (the config's, else
generation_config.json's stop tokens), proven on one exchange as `make` will prove them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..encode.encoder import Encoder
from ..encode.ends import generation_stops, probe_problem
from ..encode.render import Renderer, chat_templates, load_tokenizer
from ..errors import BuildError

# Variables apply_chat_template or the render sets itself (render.Renderer.variables, transformers' globals)
SET_BY_RENDER = {"messages", "tools", "documents", "add_generation_prompt", "raise_exception", "strftime_now",
                 "bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token",
                 "additional_special_tokens", "range", "namespace", "loop", "true", "false", "none"}


@dataclass(frozen=True)
class Inspected:
    names: tuple[str, ...]  # every template of the tokenizer
    used: tuple[str, ...]  # those a build renders with
    tagged: bool  # every template used has {% generation %} tags
    reads_clock: bool
    variables: tuple[str, ...]  # read by a template, set by nothing of the render: template_kwargs candidates
    end_of_turn: tuple[str, ...]  # to write into the config (untagged `assistant` only)
    end_of_turn_why: str  # for its comment
    eos: str | None


def _variables(templates: dict[str, str]) -> tuple[str, ...]:
    """The variables a template reads from what the render is given (template_kwargs), from its AST.
    jinja2.meta lists every name read where it may not be assigned yet, which takes in the template's
    own locals set in some branch (Qwen3 copies message.content and message.reasoning_content into
    `content` and `reasoning_content`; a macro's parameters). A name the template assigns (set, for,
    a macro's parameter) is its own local, unless the template asks whether it is defined (Llama
    3.1's `{% if not date_string is defined %}{% set date_string = ... %}`: a variable with a default)."""
    from jinja2 import meta, nodes

    from ..encode import transformers_private

    found: set[str] = set()
    for text in templates.values():
        tree = transformers_private.template_environment(text).parse(text)
        parameters = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "param"}
        stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "store"}
        asked = {t.node.name for t in tree.find_all(nodes.Test)
                 if t.name in ("defined", "undefined") and isinstance(t.node, nodes.Name)} - parameters
        found |= meta.find_undeclared_variables(tree) - parameters - (stored - asked)
    return tuple(sorted(found - SET_BY_RENDER))


def inspect_template(directory: Path, loss_mask: str, name: str | None, current_date: str | None,
                     end_of_turn: tuple[str, ...]) -> Inspected:
    tokenizer = load_tokenizer(directory)
    templates = chat_templates(tokenizer)
    if name is None and "default" not in templates:
        raise BuildError(f"the tokenizer's chat templates are all named ({', '.join(sorted(templates))}): pass "
                         "--chat-template-name NAME")
    kwargs = {"current_date": current_date} if current_date else {}
    renderer = Renderer(templates, dict(tokenizer.special_tokens_map), kwargs, name)  # refuses an unknown name
    renderer.compile()
    reads_clock = any("strftime_now" in t for t in renderer.templates.values())
    if reads_clock and current_date is None:
        raise BuildError("the chat template reads the clock (strftime_now): pass --current-date YYYY-MM-DD, the "
                         "date every render will say (pinned, so the rows do not depend on the day they are built)")
    tagged = all(renderer.tagged.values())
    stops = generation_stops(directory, tokenizer)
    encoder = Encoder(tokenizer, renderer, loss_mask, end_of_turn, stops)
    chosen, why = (), ""
    if loss_mask == "assistant" and not tagged:
        if end_of_turn:
            chosen, why = end_of_turn, "as --end-of-turn gave"
        elif stops:
            chosen, why = stops, "generation_config.json's eos_token_id: the tokens generate stops on"
        found = probe_problem(encoder)
        if found is not None:
            reason, closing = found
            harmony = any("<|channel|>" in t and "<|message|>" in t for t in renderer.templates.values())
            fix = ("it writes harmony turns: pass --loss-mask muse_spark" if harmony else
                   f"pass --end-of-turn '{closing}' (the token after the answer in its render)" if closing else
                   "use a template with generation tags, or pass --loss-mask muse_spark for a harmony template")
            raise BuildError(f"the assistant mask refuses the template's own render of one user/assistant exchange "
                             f"({reason}): {fix}")
    return Inspected(tuple(sorted(templates)), tuple(renderer.templates), tagged, reads_clock,
                     _variables(renderer.templates), tuple(chosen), why, tokenizer.eos_token)
