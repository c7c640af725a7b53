"""Which turns train (`train_turns`): a subset of the targets the loss-mask strategy proves, chosen
by turn, the mask of each chosen turn unchanged.

- `all` (default): every turn the strategy supervises.
- `last`: the last assistant message's turn only (LLaMA-Factory's `mask_history`): earlier turns
  stay in the row as context, their targets off.
- `flagged`: every turn except those of a message whose `train` is false in the data (axolotl's
  per-message training field, `message_field_training: train`). The field is the record's (every
  format carries it, sources/record.py); `train: true` can only keep a turn the strategy supervises,
  never add one (a user message's `train: true` is refused when the source is read). A turn of
  several assistant messages (written as one generation) trains only if none of them says false.

A turn is a strategy's span and the assistant messages it belongs to: the inference rule's turns
(encode/inference.py), muse_spark's one message per span; a template's own generation blocks are
given to the assistant message whose turn they start in: the turn begins where the render of the
messages before it stops agreeing with the whole render (a block across that place is refused,
mask_error). Under history
expansion (one sample per turn), a sample whose turn does not train is not written, and counted. A
conversation left without a trained turn is dropped wherever the stream meets it and counted in the
funnel (`no_trained_turn`), as it would add tokens and no target. A `train` field in the data of a
build whose `train_turns` is not `flagged` is refused (mask_error), never ignored.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

from .inference import Sample
from .placement import MaskError, fail

TRAIN_TURNS = ("all", "last", "flagged")
DEFAULT_TRAIN_TURNS = "all"
TRAIN_FIELD = "train"  # a message's flag in the record


class NoTrainedTurn(MaskError):
    """Every turn of the conversation is left out by train_turns: it is dropped and counted."""


def without_flags(messages: tuple[dict, ...]) -> tuple[tuple[dict, ...], tuple[bool | None, ...] | None]:
    """(the messages without their `train` field, as the template is given them; each message's flag,
    or None when no message has one)."""
    if not any(TRAIN_FIELD in m for m in messages):
        return messages, None
    return (tuple({k: v for k, v in m.items() if k != TRAIN_FIELD} for m in messages),
            tuple(m.get(TRAIN_FIELD) for m in messages))


def tagged_turns(messages, spans, text: str, render: Callable[..., str], tools) -> tuple[tuple[int, int], ...]:
    """The assistant message of each generation-block span. Assistant message k's turn begins where the
    render of the messages before it stops agreeing with the whole render (their common prefix: Phi-3
    ends a render with an EOS the whole render does not hold there); block j is the message's whose turn
    it starts in. A block across such a beginning cannot be given to one turn: refused."""
    begins = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        begin = len(os.path.commonprefix([render(messages[:index], tools), text])) if index else 0
        if any(start < begin < end for start, end in spans):
            raise fail(index, "a generation block of the template runs across the start of its turn: it cannot be "
                              "given to one turn, which train_turns needs", "train_turns: all trains every block")
        begins.append((begin, index))
    found = []
    for start, _ in spans:
        owners = [index for begin, index in begins if begin <= start]
        if not owners:
            raise MaskError("a generation block before the first assistant message: train_turns cannot give it to "
                            "a turn", "train_turns: all trains every block")
        found.append((owners[-1], owners[-1]))
    return tuple(found)


def _trains(turn: tuple[int, int], policy: str, last: int, flags: tuple[bool | None, ...] | None) -> bool:
    first, final = turn
    if policy == "last":
        return first <= last <= final
    return not flags or all(flags[m] is not False for m in range(first, final + 1))


def selected(samples: list[Sample], messages, policy: str, flags: tuple[bool | None, ...] | None,
             turns_of: Callable[[Sample], tuple[tuple[int, int], ...]]) -> tuple[list[Sample], int, int]:
    """(the samples to write, each with only its trained turns' spans; turns left out; samples left
    out). Raises NoTrainedTurn when none is left, MaskError for flags a policy other than flagged meets."""
    off = [k for k, f in enumerate(flags or ()) if f is False and messages[k].get("role") == "assistant"]
    if off and policy != "flagged":
        message = off[0]
        raise fail(message, f"it says train: false, which train_turns: {policy} does not read",
                   "set train_turns: flagged to train by the data's flags, or list 'train' in the source's "
                   "ignore_fields to build without them")
    if policy == "all" or policy == "flagged" and not flags or not any(s.spans for s in samples):
        return samples, 0, 0  # (a conversation the strategy supervises nothing of stays as it is, as under all)
    last = max((k for k, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    kept, turns_out, samples_out = [], 0, 0
    for sample in samples:
        turns = turns_of(sample)
        spans = tuple(span for span, turn in zip(sample.spans, turns) if _trains(turn, policy, last, flags))
        turns_out += len(sample.spans) - len(spans)
        if spans:
            kept.append(replace(sample, spans=spans, turns=tuple(
                turn for turn in turns if _trains(turn, policy, last, flags))))
        elif len(samples) > 1:  # an expanded sample whose turn does not train
            samples_out += 1
    if not kept:
        raise NoTrainedTurn(f"train_turns: {policy} leaves none of its {turns_out} turns to train")
    return kept, turns_out, samples_out
