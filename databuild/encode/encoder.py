"""Tokenize stage: render, tokenize once whole, mask, one batch at a time (`Encoder.encode_batch`).

The rendered text is encoded the way `apply_chat_template(tokenize=True)` encodes it: without special
tokens of the tokenizer's own (no double BOS), with the truncation and padding a tokenizer.json may
carry switched off, and special-token text in messages read as the special token. A batch is a pure
function of its conversations, so whoever runs it (databuild/executors) changes only the speed,
never the output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import BuildError
from ..encode.masks import STRATEGIES, spans_to_mask
from ..encode.placement import MaskError, place_fields
from ..encode.render import Renderer
from ..sources.bad import MASK_ERROR, TEMPLATE_ERROR, Problem, shown_id
from ..sources.reader import Conversation


Rendered = tuple[str, "list[tuple[int, int]] | None"]  # the text, and its generation spans when tracked


@dataclass(frozen=True)
class TokenizedConversation:
    position: int
    index: int
    id: str
    source: str
    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # int8, 1 = target
    problem: Problem | None = None  # when it cannot be built; no tokens then
    empty_assistant_turns: int = 0  # assistant messages whose content is ""


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


class Encoder:
    """Render + tokenize + mask for one batch; holds only picklable state for worker processes."""

    def __init__(self, tokenizer, renderer: Renderer, loss_mask: str, end_of_turn: Iterable[str] = (),
                 stops: Iterable[str] = ()):
        self.renderer = renderer
        self.loss_mask = loss_mask
        special = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
        # longest first: where one special token is a prefix of another, the longer one is the match
        self.special_tokens = re.compile("|".join(re.escape(t) for t in sorted(special, key=lambda t: (-len(t), t))))
        self.end_of_turn, self.end_of_turn_from = end_of_turn_tokens(tokenizer, end_of_turn, special, stops,
                                                                     all(renderer.tagged.values()))
        self._backend = tokenizer.backend_tokenizer
        self.switched_off = switch_off_truncation_and_padding(self._backend)

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k != "_backend"}
        return {**state, "backend_json": self._backend.to_str()}

    def __setstate__(self, state):
        from tokenizers import Tokenizer

        self.__dict__.update({k: v for k, v in state.items() if k != "backend_json"})
        self._backend = Tokenizer.from_str(state["backend_json"])

    def render(self, batch: list[Conversation]) -> list[Rendered | Problem]:
        return [self._render(c) for c in batch]

    def _render(self, conversation: Conversation) -> Rendered | Problem:
        if conversation.problem is not None:
            return conversation.problem
        try:
            if self.loss_mask == "assistant" and self.renderer.has_generation_tags(conversation.tools):
                return self.renderer.render_tracked(conversation.messages, conversation.tools)
            return self.renderer.render(conversation.messages, conversation.tools), None
        except BuildError:  # the config's fault (e.g. no pinned date), not this conversation's
            raise
        except MACHINE_LIMITS as exc:
            raise _machine_limit(conversation, exc) from None
        except Exception as exc:  # the template is code from the tokenizer repo; it may refuse a conversation
            return Problem(TEMPLATE_ERROR, f"the chat template raised {type(exc).__name__}: {exc}")

    def tokenize(self, rendered: list[Rendered | Problem]) -> list:
        """The Rust part: runs on the tokenizer's threads with the GIL released."""
        return self._backend.encode_batch(["" if isinstance(r, Problem) else r[0] for r in rendered],
                                          add_special_tokens=False)

    def spans(self, conversation: Conversation, text: str, generation: list | None) -> list[tuple[int, int]]:
        """The strategy's spans: a tagged template's own, else from the proven places of the fields."""
        if generation is not None:
            return generation
        placed = place_fields(conversation.messages, conversation.tools, text, self.renderer.render)
        return STRATEGIES[self.loss_mask](conversation.messages, text, placed, self.special_tokens, self.end_of_turn)

    def finish(self, batch: list[Conversation], rendered: list[Rendered | Problem],
               encodings: list) -> list[TokenizedConversation]:
        out = []
        for conversation, item, encoding in zip(batch, rendered, encodings):
            if isinstance(item, Problem):
                out.append(_unbuildable(conversation, item))
                continue
            ids = np.fromiter(encoding.ids, dtype=np.int32, count=len(encoding))
            try:
                spans = self.spans(conversation, *item)
            except MaskError as exc:
                out.append(_unbuildable(conversation, Problem(MASK_ERROR, str(exc), exc.fix)))
                continue
            except MACHINE_LIMITS as exc:
                raise _machine_limit(conversation, exc) from None
            empty = sum(1 for m in conversation.messages if m.get("role") == "assistant" and m.get("content") == "")
            out.append(TokenizedConversation(conversation.position, conversation.index, conversation.id,
                                             conversation.source, ids, spans_to_mask(spans, encoding, len(ids)),
                                             empty_assistant_turns=empty))
        return out

    def encode_batch(self, batch: list[Conversation]) -> list[TokenizedConversation]:
        rendered = self.render(batch)
        return self.finish(batch, rendered, self.tokenize(rendered))


# Where these strike depends on the thread's stack depth and the machine's memory, not on the
# conversation alone: counting the conversation as bad would let the workers change the output.
MACHINE_LIMITS = (RecursionError, MemoryError)


def _machine_limit(conversation: Conversation, exc: BaseException) -> BuildError:
    return BuildError(f"conversation {shown_id(conversation.id)} (source row {conversation.index}): rendering it hit a "
                      f"{type(exc).__name__}, a limit of this machine, not of the conversation; nothing was written")


def _unbuildable(conversation: Conversation, problem: Problem) -> TokenizedConversation:
    """No tokens, and the problem with its reason on one line (it goes into the manifest as it is)."""
    empty, one_line = np.zeros(0, dtype=np.int32), problem._replace(reason=problem.reason.replace("\n", " "))
    return TokenizedConversation(conversation.position, conversation.index, conversation.id, conversation.source,
                                 empty, empty.astype(np.int8), one_line)
