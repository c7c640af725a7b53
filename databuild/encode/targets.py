"""Encode stage, the targets of one rendered conversation: the samples its loss-mask strategy finds
(encode/strategies/, the one the config's `loss_mask` names), the turns `train_turns` keeps of them
(encode/turns.py), and each kept sample's tokens and mask, an inferred turn's characters taken to
tokens as inference tokenizes its prompt (`turn_spans`).

These are functions of the encoder's settings (encode/encoder.py's Encoder: the strategy, the stop
tokens, train_turns, the renderer, the special ids and the tokenizer); the encoder applies them to a
batch it has rendered and tokenized. `chosen` then `tokenized` are the whole rule for one
conversation, whoever renders it (a preference pair's completions: encode/preference.py).
"""

from __future__ import annotations

import numpy as np

from ..records.conversation import Conversation, TokenizedConversation
from ..records.problems import HISTORY_REWRITTEN, MASK_ERROR, NO_TRAINED_TURN, STOP_TOKEN_IN_FIELD, Problem
from .inference import HistoryRewritten, Sample, StopTokenInField, check_no_stop_in_fields
from .masks import spans_to_mask
from .placement import MaskError
from .render_limit import MACHINE_LIMITS, RenderTimedOut, machine_limit, timed_out
from .turns import NoTrainedTurn, selected, tagged_turns

Chosen = tuple[list[Sample], int, int]  # the samples train_turns keeps, the turns and samples it leaves out
_KINDS = {StopTokenInField: STOP_TOKEN_IN_FIELD, HistoryRewritten: HISTORY_REWRITTEN}


def samples(encoder, conversation: Conversation, text: str, generation: list | None) -> list[Sample]:
    """The samples of the strategy the config names (encode/strategies/). Under every strategy, a
    conversation an assistant field of which spells a stop token is refused."""
    check_no_stop_in_fields(conversation.messages, encoder.field_stops)
    return encoder.strategy.samples(encoder, conversation, text, generation)


def chosen(encoder, conversation: Conversation, flags, text: str, generation: list | None) -> Chosen | Problem:
    """(the samples train_turns keeps, turns it leaves out, samples it leaves out), or the Problem.
    `conversation` is as the template was given it, without its messages' train `flags`."""
    try:
        found = samples(encoder, conversation, text, generation)
        messages, tools = conversation.messages, conversation.tools
        return selected(found, messages, encoder.train_turns, flags, lambda sample: sample.turns or tagged_turns(
            messages, sample.spans, sample.text, encoder.renderer.render, tools))
    except NoTrainedTurn as exc:
        return Problem(NO_TRAINED_TURN, str(exc))
    except MaskError as exc:
        return Problem(_KINDS.get(type(exc), MASK_ERROR), str(exc), exc.fix)
    except MACHINE_LIMITS as exc:
        raise machine_limit(conversation.origin, exc) from None
    except RenderTimedOut:
        raise timed_out(conversation.origin, encoder.renderer.timeout) from None


def tokenized(encoder, conversation: Conversation, kept: list[Sample], encodings: list, turns_not_trained: int = 0,
              samples_not_written: int = 0) -> list[TokenizedConversation]:
    """One tokenized conversation per kept sample, given each sample's encoding; the conversation's counts
    (empty assistant turns, and what train_turns left out) on the first."""
    empty = sum(1 for m in conversation.messages if m.get("role") == "assistant" and m.get("content") == "")
    out = []
    for part, (sample, encoding) in enumerate(zip(kept, encodings)):
        ids = encoding.id_array()
        spans, differ = (list(sample.spans), 0) if sample.declared else turn_spans(encoder, sample, encoding, ids)
        first = part == 0
        out.append(TokenizedConversation(conversation.origin, ids, spans_to_mask(spans, encoding, len(ids)),
                                         empty_assistant_turns=empty if first else 0,
                                         unclosed_turns=sample.unclosed, prompt_tokens_differ=differ,
                                         part=part, parts=len(kept),
                                         turns_not_trained=turns_not_trained if first else 0,
                                         samples_not_written=samples_not_written if first else 0))
    return out


def turn_spans(encoder, sample: Sample, placed, ids: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    """The spans of inferred turns in token terms, and how many turns' prompts tokenize otherwise.

    At inference the prompt is tokenized alone; its tokens should be the sample's first tokens, and the
    target starts with the next one. Where the prompt ends inside a special token that takes the
    whitespace after it (Phi-3's `<|assistant|>` with rstrip), the prompt alone ends with that token
    too: the target starts after it. Where the prompt's tokens are not the sample's first (its last
    token and the answer's first merge: Qwen3.5's `<think>\n` before `\n</think>`), the tokens
    overlapping the turn's characters are targets, as for any span, and the turn is counted. Special
    tokens cut a text into pieces tokenized independently, so the prompt's tokens are the sample's
    through its last special token, and only the text after that one is encoded again."""
    special_ids, spans, differ = encoder.special_ids, [], 0
    for start, end in sample.spans:
        held = placed.holding(start)
        if held is not None:
            first, token_start, token_end = held  # token_end: asked only of a token that starts before `start`
            if token_start < start and ids[first] in special_ids and not sample.text[start:token_end].strip():
                spans.append((token_end, end))
                continue
            last_special = next((k for k in range(first - 1, -1, -1) if ids[k] in special_ids), -1)
            cut = placed.token_end(last_special) if last_special >= 0 else 0
            tail = placed.alone(cut, start) if cut < start else []
            if token_start == start and ids[last_special + 1:first].tolist() == tail:
                spans.append((start, end))
                continue
        spans.append((start, end))
        differ += 1
    return spans, differ
