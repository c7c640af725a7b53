"""Encode stage: render and choose the targets, tokenize what is written, mask, one batch at a time
(`Encoder.encode_batch`, or its three steps: `render`, which is the render (`render_texts`) and the
samples its loss-mask strategy finds in it (`choose`); `tokenize`, the Rust part, which the executors
overlap with the next batch's Python; and `finish`). What the targets of a rendered conversation are
is encode/targets.py's.

The targets are chosen before tokenizing so that the tokenizer encodes exactly the texts written: the
render, or where the history policy expands a conversation, its samples (one per turn) in the render's
place, never both. The rendered text is encoded the way `apply_chat_template(tokenize=True)` encodes it:
without special tokens of the tokenizer's own (no double BOS), with the truncation and padding a
tokenizer.json may carry switched off, and special-token text in messages read as the special token. A
batch is a pure function of its conversations, so whoever runs it (databuild/executors) changes only the
speed, never the output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, NamedTuple

import numpy as np

from ..errors import BuildError
from ..records.conversation import Conversation, TokenizedConversation
from ..records.problems import TEMPLATE_ERROR, Problem
from . import targets
from .ends import end_of_turn_tokens
from .inference import DEFAULT_HISTORY, Sample, stop_pattern
from .positions import AddedTokens, Offsets, Split
from .render import Renderer
from .render_limit import MACHINE_LIMITS, RenderTimedOut, machine_limit, timed_out
from .strategies import strategy_for
from .turns import DEFAULT_TRAIN_TURNS, without_flags


class Rendered(NamedTuple):
    """A conversation's render, and the targets chosen in it (targets.chosen: the samples train_turns
    keeps, the turns and samples it leaves out)."""
    text: str
    generation: list[tuple[int, int]] | None  # the template's generation spans, when tracked
    chosen: targets.Chosen


def switch_off_truncation_and_padding(backend) -> dict:
    """What apply_chat_template does before every encode (its truncation=False, padding=False), done once:
    a tokenizer.json's own `truncation` or `padding` block would cut conversations, insert pad tokens,
    and make the rows depend on the batch size. Returns the blocks found, for the manifest."""
    found = {name: block for name, block in (("truncation", backend.truncation), ("padding", backend.padding))
             if block is not None}
    backend.no_truncation()
    backend.no_padding()
    backend.encode_special_tokens = False  # transformers' split_special_tokens=False
    return found


class Encoder:
    """Render + tokenize + mask for one batch; holds only picklable state for worker processes."""

    def __init__(self, tokenizer, renderer: Renderer, loss_mask: str, end_of_turn: Iterable[str] = (),
                 stops: Iterable[str] = (), history: str = DEFAULT_HISTORY, train_turns: str = DEFAULT_TRAIN_TURNS,
                 stop_tokens_in_fields: str = "refuse"):
        self.renderer = renderer
        self.loss_mask = loss_mask
        self.strategy = strategy_for(loss_mask)
        self.history = history
        self.train_turns = train_turns
        self.stop_tokens_in_fields = stop_tokens_in_fields
        special = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
        self.special_ids = frozenset(i for i, t in tokenizer.added_tokens_decoder.items() if t.special)
        self.end_of_turn, self.end_of_turn_from = end_of_turn_tokens(tokenizer, end_of_turn, special, stops,
                                                                     all(renderer.tagged.values()))
        self.stops = stop_pattern(self.end_of_turn)
        # What no assistant field may spell, whatever the strategy: a token the model stops at (the ends of
        # turn, EOS, what `generate` stops on; under muse_spark, the closings it supervises). The config's
        # stop_tokens_in_fields: train leaves declared spans (tags, muse_spark) as they were before the check.
        self.field_stops = stop_pattern(self.end_of_turn | frozenset(stops) | (
            self.strategy.closings)
            if stop_tokens_in_fields == "refuse" else frozenset())
        self.special_tokens = stop_pattern(frozenset(special))  # the token after a turn, to name an undeclared end
        self._backend, self._backend_json = tokenizer.backend_tokenizer, None
        self.tokenizer_size = len(tokenizer)  # every token id is below it: verify checks each one against it
        self.switched_off = switch_off_truncation_and_padding(self.backend)
        self.added = AddedTokens.of(self.backend)  # where the added tokens cut a text: its tokens placed without offsets

    @property
    def backend(self):
        """The tokenizer (tokenizers.Tokenizer). An unpickled encoder builds it at its first use: building
        it holds the GIL (~0.2 s for a 32k vocabulary), which a process that only reads the encoder's pins
        or passes it on (the build's, whose encode processes tokenize) need not spend, nor make its source
        pass's threads wait for."""
        if self._backend is None:
            from tokenizers import Tokenizer

            # the JSON is the tokenizer's own again from here on (to_str): not kept twice
            self._backend, self._backend_json = Tokenizer.from_str(self._backend_json), None
        return self._backend

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("_backend", "_backend_json")}
        return {**state, "backend_json": self._backend_json if self._backend is None else self._backend.to_str()}

    def __setstate__(self, state):
        self.__dict__.update({k: v for k, v in state.items() if k != "backend_json"})
        self._backend, self._backend_json = None, state["backend_json"]

    def render(self, batch: list[Conversation]) -> list[Rendered | Problem]:
        """Each conversation's render and targets, or the Problem that refuses it."""
        return self.choose(batch, self.render_texts(batch))

    def render_texts(self, batch: list[Conversation]) -> list[tuple[str, list | None] | Problem]:
        """The first half of `render`: each conversation's text and generation spans (when tracked)."""
        return [self._render(_unflagged(c)[0]) for c in batch]

    def choose(self, batch: list[Conversation], texts: list) -> list[Rendered | Problem]:
        """The second half of `render`: the targets of each render_texts item (targets.chosen)."""
        out = []
        for conversation, item in zip(batch, texts):
            if not isinstance(item, Problem):
                chosen = targets.chosen(self, *_unflagged(conversation), *item)
                item = chosen if isinstance(chosen, Problem) else Rendered(*item, chosen)
            out.append(item)
        return out

    def _render(self, conversation: Conversation) -> tuple[str, list | None] | Problem:
        if conversation.problem is not None:
            return conversation.problem
        try:
            if self.strategy.tracked(self.renderer, conversation.tools):
                return self.renderer.render_tracked(conversation.messages, conversation.tools)
            return self.renderer.render(conversation.messages, conversation.tools), None
        except BuildError:  # the config's fault (e.g. no pinned date), not this conversation's
            raise
        except MACHINE_LIMITS as exc:
            raise machine_limit(conversation.origin, exc) from None
        except RenderTimedOut:
            raise timed_out(conversation.origin, self.renderer.timeout) from None
        except Exception as exc:  # the template is code from the tokenizer repo; it may refuse a conversation
            return Problem(TEMPLATE_ERROR, f"the chat template raised {type(exc).__name__}: {exc}")

    def tokenize(self, rendered: list[Rendered | tuple[str, list | None] | Problem]) -> list:
        """The Rust part: runs on the tokenizer's threads with the GIL released. One encoding per item, of
        its text; in an expanded conversation's place, the list of its samples' encodings."""
        texts = [_texts(item) for item in rendered]
        if all(isinstance(text, str) for text in texts):
            return self.encode_texts(texts)
        flat = iter(self.encode_texts([t for text in texts for t in ([text] if isinstance(text, str) else text)]))
        return [next(flat) if isinstance(text, str) else [next(flat) for _ in text] for text in texts]

    def encode_texts(self, texts: list[str]) -> list[Split | Offsets]:
        """Each text's encoding (the Rust part), placed (encode/positions.py): without the tokenizer's
        character offsets where its added tokens place the tokens, which spares it a fourth of its work."""
        backend = self.backend
        if self.added.reason is None:
            return [Split(encoding, text, self.added, backend)
                    for encoding, text in zip(backend.encode_batch_fast(texts, add_special_tokens=False), texts)]
        return [Offsets(encoding, text, backend)
                for encoding, text in zip(backend.encode_batch(texts, add_special_tokens=False), texts)]

    def finish(self, batch: list[Conversation], rendered: list[Rendered | Problem],
               encodings: list) -> list[TokenizedConversation]:
        # the samples of expanded conversations whose whole render was tokenized instead (a caller that
        # tokenized the texts itself: encode/preference.py), tokenized together on the Rust threads
        expanded = [s.text for item, encoding in zip(rendered, encodings) if not isinstance(item, Problem)
                    and not _own_render(item.chosen[0], item) and not isinstance(encoding, list)
                    for s in item.chosen[0]]
        extra = iter(self.encode_texts(expanded) if expanded else ())
        out = []
        for conversation, item, encoding in zip(batch, rendered, encodings):
            if isinstance(item, Problem):
                out.append(unbuildable(conversation, item))
                continue
            samples, turns_out, samples_out = item.chosen
            encodings_of = [encoding] if _own_render(samples, item) else encoding if isinstance(encoding, list) \
                else [next(extra) for _ in samples]
            try:
                out += targets.tokenized(self, conversation, samples, encodings_of, turns_out, samples_out)
            except MACHINE_LIMITS as exc:
                raise machine_limit(conversation.origin, exc) from None
        return out

    def kept_samples(self, conversation: Conversation) -> list[Sample] | Problem:
        """The samples encode_batch tokenizes for one conversation (its parts, in order), or its Problem:
        what `show` and `report` place the record's fields in (views/record_marks.py)."""
        item = self.render([conversation])[0]
        return item if isinstance(item, Problem) else item.chosen[0]

    def encode_batch(self, batch: list[Conversation]) -> list[TokenizedConversation]:
        rendered = self.render(batch)
        return self.finish(batch, rendered, self.tokenize(rendered))


def _unflagged(conversation: Conversation) -> tuple[Conversation, tuple[bool | None, ...] | None]:
    """The conversation as the template is given it (without its messages' train flags), and the flags."""
    messages, flags = without_flags(conversation.messages)
    return (conversation if flags is None else replace(conversation, messages=messages)), flags


def _texts(item) -> str | list[str]:
    """What tokenize encodes for an item: its text, or an expanded conversation's samples' texts."""
    if isinstance(item, Problem):
        return ""
    if isinstance(item, Rendered) and not _own_render(item.chosen[0], item):
        return [sample.text for sample in item.chosen[0]]
    return item[0]


def _own_render(samples, item) -> bool:
    """Whether the samples are the one render the batch tokenized (else: one per turn, expanded)."""
    return len(samples) == 1 and samples[0].text is item[0]


def unbuildable(conversation: Conversation, problem: Problem) -> TokenizedConversation:
    """No tokens, and the problem with its reason on one line (it goes into the manifest as it is)."""
    empty, one_line = np.zeros(0, dtype=np.int32), problem._replace(reason=problem.reason.replace("\n", " "))
    return TokenizedConversation(conversation.origin, empty, empty.astype(np.int8), one_line)
