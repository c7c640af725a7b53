"""The `assistant` strategy on a template without `{% generation %}` tags: what the model writes at
inference, found by rendering the conversation as inference renders it.

For assistant message i, P = render(messages[:i], add_generation_prompt=True) is what the model is
given and R = render(messages[:i+1]) what it is trained to have written: P must be a prefix of R
(else message i is no turn of its own, below). The turn's target is R[len(P):] up to and including
the first stop token (the encoder's end-of-turn set: the tokenizer's EOS, the config's end_of_turn,
and whatever ends.end_of_turn_tokens adds); what the template writes after it (ChatML's newline)
is not a target. Where R holds no stop token after P, a stop token the next message writes right
after the turn closes it (GLM's `<|user|>`); where the whole render ends in the turn (GLM's last
turn: the template writes the model's stop only as the next message's header), the turn is
supervised to the render's end and counted as unclosed; else the turn is refused. An expanded
turn closed by the next message is R followed by that stop token, as the render through the next
message writes it.

- A run of assistant messages with no other message between them: a message whose P is not a
  prefix of its R continues the turn of the message before it (inference writes them as one
  generation: no generation prompt stands between them); its R then closes the turn, and no stop
  token may stand in the part of the turn written before the message (the model would have stopped
  there). A message whose P is a prefix of its R opens a turn of its own, as the model would be
  prompted again.
- Every turn's R, through its stop token, must be a prefix of the whole render F: the turn as
  trained is the turn as generated, so one render carries every target (what R writes after the
  stop, Phi-3's end-of-render EOS, need not be in F). A template that rewrites history (Qwen3 drops the
  reasoning of turns before the last user message; gpt-oss closes a final answer with `<|return|>`
  only when it is last) fails this for some turn: the config's `history` policy then refuses the
  conversation or expands it into one sample per turn (R of the turn, only that turn supervised).
- A stop token spelled inside any string of an assistant message (content, reasoning, tool calls)
  means the model would have stopped there: the conversation is refused (the encoder runs the same
  check under every strategy first, with every token the model stops at: targets.py).
- A tool call (its function name) or a reasoning trace (stripped) that the turn's target does not
  hold: the template drops it, and the model would be trained to answer without it: refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .placement import MaskError, fail
from ..records.conversation import REASONING_FIELDS

HISTORY_POLICIES = ("expand", "refuse")
DEFAULT_HISTORY = "expand"


class StopTokenInField(MaskError):
    pass


class HistoryRewritten(MaskError):
    pass


@dataclass(frozen=True)
class Sample:
    """A text to tokenize and the character spans of its targets. The conversation's own render has
    every turn; an expanded conversation gives one sample per turn."""
    text: str
    spans: tuple[tuple[int, int], ...]
    unclosed: int = 0  # its turns the render ends in, before any stop token (GLM's last turn)
    declared: bool = False  # spans the template declares (generation tags) or muse_spark places, not inferred
    turns: tuple[tuple[int, int], ...] = ()  # each span's turn: its first and last message; () when not known


NO_STOP = r"(?!)"  # the pattern of no stop token: matches nothing, never the empty string


def stop_pattern(stops: frozenset[str]) -> re.Pattern:
    """A pattern matching any of `stops` (none: NO_STOP)."""
    if not stops:
        return re.compile(NO_STOP)
    # longest first: where one stop token is a prefix of another, the longer one is the match
    return re.compile("|".join(re.escape(t) for t in sorted(stops, key=lambda t: (-len(t), t))))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def check_no_stop_in_fields(messages, stops: re.Pattern) -> None:
    if stops.pattern == NO_STOP:  # (stop_tokens_in_fields: train) NO_STOP would still be tried at every character
        return
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for key, value in message.items():
            if key == "role":
                continue
            found = next((m.group() for s in _strings(value) if (m := stops.search(s))), None)
            if found is not None:
                raise StopTokenInField(f"assistant message {index}: its {key} spells the stop token {found!r}: the "
                                       "model would have stopped there")


def check_written(messages, turn, target: str) -> None:
    """A tool call or reasoning the template leaves out of the turn would train the model to answer
    without it: refused, naming the field. (Content is not checked: templates trim or reformat it.)"""
    for index in range(turn.first, turn.last + 1):
        message = messages[index]
        reasoning = next((message[k] for k in REASONING_FIELDS if isinstance(message.get(k), str)), "")
        if reasoning.strip() and reasoning.strip() not in target:
            raise fail(index, "the template does not write its reasoning in its turn: the model would be trained "
                              "to answer without it")
        for call in message.get("tool_calls") or ():
            function = call.get("function", call) if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name and name not in target:
                raise fail(index, f"the template does not write its tool call {name!r} in its turn: the model would "
                                  "be trained to answer without it")


@dataclass
class _Turn:
    first: int
    last: int
    prompt: int  # len(P) of its first message: where the target starts
    text: str  # R of its last message
    written: int  # where, in `text`, the part written by its last message begins (0 if it has one message)


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _rewritten_prompt(messages, i: int, tools, render: Callable[..., str], prompt: str, rendered: str) -> _Turn:
    """Message i after a prompt the template rewrites once i is written (gpt-oss drops the analysis
    of a tool call once a final answer follows): the turn is what the render with it writes after
    the generation prompt G (the prompt's end beyond the plain render of messages[:i]), found where
    the render with an empty answer in its place, whose earlier messages the template rewrites the
    same way, stops agreeing with it; its sample is the prompt followed by that turn."""
    plain = render(messages[:i], tools)
    generation = prompt[len(plain):] if prompt.startswith(plain) else ""
    empty = render([*messages[:i], {"role": "assistant", "content": ""}], tools)
    start = rendered.rfind(generation, 0, _common_prefix(rendered, empty)) if generation else -1
    if start < 0:
        raise fail(i, "the render with it does not start with the generation prompt before it (the inference "
                      "render), and the generation prompt cannot be found in it: what the model would write "
                      "here is unknown")
    return _Turn(i, i, len(prompt), prompt + rendered[start + len(generation):], 0)


def _closed_by_next(messages, turn: _Turn, tools, text: str, render: Callable[..., str],
                    stops: re.Pattern) -> str | None:
    """The turn followed by the stop token the next message writes right after it (GLM's `<|user|>`):
    found in the whole render; where the template rewrites the turn once a message follows, in the
    render through the next message; where it drops reasoning then (GLM), in the render through the
    next message of the conversation without its reasoning."""
    if turn.last == len(messages) - 1:
        return None
    bare = [_without_reasoning(m) for m in messages[:turn.last + 1]]
    for written, through_next in ((turn.text, text), (turn.text, lambda: render(messages[:turn.last + 2], tools)),
                                  (lambda: render(bare, tools),
                                   lambda: render([*bare, messages[turn.last + 1]], tools))):
        written, through_next = (v() if callable(v) else v for v in (written, through_next))
        if through_next.startswith(written) and (stop := stops.match(through_next, len(written))) is not None:
            return turn.text + stop.group()
    return None


def _without_reasoning(message: dict) -> dict:
    if message.get("role") != "assistant":
        return message
    return {k: v for k, v in message.items() if k not in REASONING_FIELDS}


def _check_unclosed(messages, index: int, text: str, prompt: int, special: re.Pattern | None,
                    render: Callable[..., str], tools) -> None:
    """A last turn the render ends in is unclosed (GLM's) only where nothing special follows its content:
    a special token the template writes after the answer (ChatML's `<|im_end|>`, undeclared) is the
    template's end of turn, and the turn is refused naming it, as the earlier turns would be. An empty
    answer is looked at as the template writes a one-word one (one more render, in this case alone)."""
    message = messages[index]
    content = message.get("content")
    if special is None or not isinstance(content, str) or message.get("tool_calls"):
        return  # nothing to go by: no content, or tool calls the template may write after it
    if not content:
        content = "Answer"
        text = render([*messages[:index], {**message, "content": content}], tools)
    after = text.rfind(content, prompt)
    closing = special.search(text, after + len(content)) if after >= 0 else None
    if closing is not None:
        raise fail(index, f"the first special token after it ({closing.group()!r}) is not a stop token (the "
                          "tokenizer's EOS, the config's end_of_turn)",
                   f"if {closing.group()!r} closes the template's assistant turns, set end_of_turn: "
                   f"[{closing.group()!r}] in the config")


def infer_samples(messages, tools, text: str, render: Callable[..., str], stops: re.Pattern,
                  history: str, special: re.Pattern | None = None, fields_checked: bool = False) -> list[Sample]:
    """The conversation's targets by the rule above: one sample (the render itself) when every turn
    as generated is a prefix of the render; else, under history `expand`, one sample per turn.
    Raises MaskError (StopTokenInField, HistoryRewritten) naming the message. `fields_checked`: the
    caller has checked the fields for these stops already (with these among others)."""
    if not fields_checked:
        check_no_stop_in_fields(messages, stops)
    last_message = len(messages) - 1
    turns: list[_Turn] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        if i == 0:  # as transformers' apply_chat_template, which refuses to render an empty conversation
            raise fail(i, "it opens the conversation: there is no prompt to render before it (apply_chat_template "
                          "renders no empty conversation)")
        rendered = text if i == last_message else render(messages[:i + 1], tools)
        prompt = render(messages[:i], tools, generation_prompt=True)
        if rendered.startswith(prompt):
            turns.append(_Turn(i, i, len(prompt), rendered, 0))
        elif turns and turns[-1].last == i - 1:
            turn = turns[-1]
            turn.written = _common_prefix(turn.text, rendered)
            if turn.written < turn.prompt:
                raise fail(i, "it continues the turn of the message before it, whose generation prompt the render "
                              "with it does not start with")
            turn.last, turn.text = i, rendered
        else:
            turns.append(_rewritten_prompt(messages, i, tools, render, prompt, rendered))
    samples, whole = [], []
    for turn in turns:
        stop = stops.search(turn.text, turn.prompt)
        if stop is not None and stop.start() < turn.written:
            raise fail(turn.last, "a stop token stands in its turn before it: the model would have stopped there")
        if stop is not None:
            own = turn.text
        elif (own := _closed_by_next(messages, turn, tools, text, render, stops)) is not None:
            stop = stops.match(own, len(turn.text))
        else:
            _check_unclosed(messages, turn.last, turn.text, turn.prompt, special, render, tools)  # names the token, if any
            if not (turn.last == last_message and turn.text == text):
                raise fail(turn.last, "no stop token closes its turn (the tokenizer's EOS, the config's end_of_turn): "
                                      "declare the template's end of turn (end_of_turn in the config)")
            own = text  # the render ends in the turn: supervised to its end, counted as unclosed
        end = len(own) if stop is None else stop.end()
        check_written(messages, turn, own[turn.prompt:end])
        span = (turn.prompt, end)
        samples.append(Sample(own, (span,), int(stop is None), turns=((turn.first, turn.last),)))
        if text[:end] == own[:end]:  # the turn as trained is the turn as generated, through its stop
            whole.append(span)
        elif history == "refuse":
            raise HistoryRewritten(f"assistant message {turn.first}: the template rewrites history (the turn renders "
                                   "differently in the whole conversation than when it was generated); history: "
                                   "expand builds one sample per turn")
    if len(whole) == len(turns):
        return [Sample(text, tuple(whole), sum(s.unclosed for s in samples), turns=tuple(t for s in samples
                                                                                         for t in s.turns))]
    return samples
