"""Ends of turn a config need not declare: the tokens `generate` stops on, and a check that the
template's own render of two exchanges can be masked.

A template without `{% generation %}` tags closes an assistant turn with a token of its own
(Phi-3's `<|end|>`, Gemma's `<end_of_turn>`), which is rarely the tokenizer's EOS. The model repo
says which: `generation_config.json`'s `eos_token_id` (one id or a list) is what `generate` stops
on, so a turn the model ends is a turn closed by one of them. `end_of_turn_tokens` takes
them as the ends of turn when the config declares none. `probe_problem` renders two user/assistant
exchanges and masks them as the build would: `databuild init` asks for the token to declare when even
that is refused. `make` does not refuse a template on it (a template may refuse plain exchanges and
build others: Nemotron 3's writes an empty think block in a plain answer but not in the generation
prompt); it refuses conversations one by one, and says a refusal common to all of them at the end
(records/problems.py template_wide).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..errors import BuildError, quoted
from ..utils import json_depth

GENERATION_CONFIG = "generation_config.json"
PROBE_ANSWER = "Hello"
# Two exchanges: the first turn must close before the next message (a last turn the render ends in is
# supervised to its end, as GLM's is: encode/inference.py), so an undeclared end of turn shows here.
PROBE = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": PROBE_ANSWER},
         {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"})


def generation_stops(directory: Path, tokenizer) -> tuple[str, ...]:
    """The tokens of generation_config.json's eos_token_id (an int or a list of ints), sorted; none
    without the file or the key."""
    path = directory / GENERATION_CONFIG
    if not path.is_file():
        return ()
    try:
        ids = json_depth.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise BuildError(f"{path}: not a JSON object ({exc})") from None
    ids = [ids] if isinstance(ids, int) and not isinstance(ids, bool) else ids
    if ids is None:
        return ()
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BuildError(f"{path}: eos_token_id = {quoted(ids)}: expected a token id or a list of them")
    vocabulary = len(tokenizer)
    for token_id in ids:
        if not 0 <= token_id < vocabulary:
            raise BuildError(f"{path}: eos_token_id {token_id} is not an id of the tokenizer ({vocabulary} ids)")
    return tuple(sorted(set(tokenizer.convert_ids_to_tokens(ids))))


def end_of_turn_tokens(tokenizer, configured: Iterable[str], special: set[str], stops: Iterable[str] = (),
                       tagged: bool = False) -> tuple[frozenset[str], str]:
    """The tokens the `assistant` strategy accepts as closing a turn, and where they come from: EOS,
    and the config's end_of_turn ("config"); when the config declares none and the template has no
    generation tags, the tokens `generate` stops on (`stops`, generation_config.json's eos_token_id:
    "generation_config"); else EOS alone ("eos")."""
    configured = tuple(configured)
    for token in configured:
        if token not in special:
            raise BuildError(f"key 'end_of_turn' = {token!r}: not a special token of the tokenizer")
    eos = {tokenizer.eos_token} if tokenizer.eos_token else set()
    if configured:
        return frozenset(configured) | eos, "config"
    if stops and not tagged:
        return frozenset(stops) | eos, "generation_config"
    return frozenset(eos), "eos"


def probe_problem(encoder) -> tuple[str, str | None] | None:
    """Why the `assistant` strategy cannot mask the template's own render of one plain exchange, and
    the special token that follows the answer there (the end of turn to declare); None when it can,
    or when it does not apply (another strategy, a tagged template, a template that refuses the exchange)."""
    from ..records.problems import MASK_ERROR
    from ..records.conversation import Conversation
    from ..records.origin import Origin

    if encoder.loss_mask != "assistant" or all(encoder.renderer.tagged.values()):
        return None
    from .render_limit import RenderTooLong

    try:
        out = encoder.encode_batch([Conversation(Origin(0, 0, "probe", "probe"), PROBE)])[0]
    except RenderTooLong:
        raise BuildError(f"the chat template's render of two plain user/assistant exchanges, made before the build "
                         f"starts, took longer than {encoder.renderer.timeout:g} s (render_timeout), which a render "
                         f"that ends does not; if the template is only slow, raise render_timeout in the config or "
                         f"--render-timeout; nothing was written") from None
    if out.problem is None or out.problem.kind != MASK_ERROR:
        return None  # masked, or a template that wants more than this exchange: the conversations will tell
    text = encoder.renderer.render(PROBE)
    closing = encoder.special_tokens.search(text, text.find(PROBE_ANSWER) + len(PROBE_ANSWER))
    return out.problem.reason, closing.group() if closing else None
