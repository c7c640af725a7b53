"""Encode stage of a preference build: a pair's prompt rendered once, and each completion's targets by
the SFT rule (`PairEncoder`).

The prompt is rendered as TRL renders it for DPO (trl/data_utils.py `apply_chat_template`,
huggingface/trl@f2cd5771): with the generation prompt, as it must end on a user or tool turn (TRL
continues a final assistant message instead; such a prompt is refused here, `prompt_last_role`). Each
completion is rendered whole, prompt and completion as one conversation, by the config's loss-mask
strategy through the SFT encoder (encode/encoder.py) with the prompt's assistant turns flagged not to
train (train_turns: flagged): its targets are exactly SFT's, tool calls, reasoning and the stop token
included. Then, for each completion, the prompt's render must be the start of the whole render, byte
for byte (`prompt_not_prefix`: never re-aligned, where TRL takes the common prefix), the prompt's
tokens the start of its tokens (`prompt_tokens_not_prefix`), no target begin inside the prompt
(`target_in_prompt`), and the completion hold a target (`no_target`); a pair that fails one is refused
(records/pair.py), on_bad_conversation deciding whether the build stops or counts it.
A batch is a pure function of its records, tokenized in one call on the tokenizer's Rust threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import BuildError
from ..records.conversation import Conversation
from ..records.origin import Origin
from ..records.pair import (NO_TARGET, PROMPT_LAST_ROLE, PROMPT_NOT_PREFIX, PROMPT_TOKENS_NOT_PREFIX,
                            TARGET_IN_PROMPT, COMPLETION_NAMES, TokenizedPair, unbuilt)
from ..records.problems import HISTORY_REWRITTEN, TEMPLATE_ERROR, Problem
from .encoder import Encoder
from .render_limit import MACHINE_LIMITS, RenderTimedOut
from .turns import TRAIN_FIELD

PROMPT_LAST_ROLES = ("user", "tool")  # TRL adds the generation prompt after these


def conversation_of(origin: Origin, messages: tuple[dict, ...], tools) -> Conversation:
    """The SFT record of one completion's whole conversation."""
    return Conversation(origin, messages, None, tools)


def whole(prompt: tuple[dict, ...], completion: tuple[dict, ...]) -> tuple[dict, ...]:
    """Prompt and completion as one conversation, the prompt's assistant turns flagged not to train (a
    completion's own `train` flags stay: train: false in the data leaves that turn out, as under SFT)."""
    return (*({**m, TRAIN_FIELD: False} if m.get("role") == "assistant" else
              {k: v for k, v in m.items() if k != TRAIN_FIELD} for m in prompt), *completion)


class PairEncoder:
    """Render + tokenize + check for one batch of preference records (records/preference.py's
    PreferenceRecord: origin, prompt, completions, label, tools, problem). `encoder` is the SFT encoder
    built with train_turns: flagged. Has render, tokenize and finish as Encoder has, so the executors'
    overlap runs it."""

    def __init__(self, encoder: Encoder):
        if encoder.train_turns != "flagged":
            raise ValueError("a pair's encoder trains by flags: the prompt's turns are flagged off")
        self.encoder = encoder

    @property
    def renderer(self):
        return self.encoder.renderer

    @property
    def backend(self):  # its tokenizer, which a worker builds as it starts (executors/workers.start_worker)
        return self.encoder.backend

    def render(self, batch: list) -> list:
        """Per record: its Problem, or (the prompt's text, the whole conversations, their renders)."""
        return [self._render(record) for record in batch]

    def _render(self, record) -> Any:
        if record.problem is not None:
            return record.problem
        last = record.prompt[-1].get("role") if record.prompt else None
        if last not in PROMPT_LAST_ROLES:
            return Problem(PROMPT_LAST_ROLE, f"the prompt ends on a {last!r} message: a prompt ends on a user or "
                                             "tool message, after which the template's generation prompt opens "
                                             "the completion")
        try:
            prompt = self.renderer.render([{k: v for k, v in m.items() if k != TRAIN_FIELD} for m in record.prompt],
                                          record.tools, generation_prompt=True)
        except BuildError:
            raise
        except MACHINE_LIMITS as exc:
            raise BuildError(f"pair {record.origin.id!r} (source row {record.origin.index}): rendering its prompt "
                             f"hit a {type(exc).__name__}, a limit of this machine; nothing was written") from None
        except RenderTimedOut:
            raise BuildError(f"pair {record.origin.id!r} (source row {record.origin.index}): a render of its prompt "
                             f"took longer than {self.renderer.timeout:g} s (render_timeout); nothing was "
                             "written") from None
        except Exception as exc:  # the template may refuse a prompt, as it may a conversation
            return Problem(TEMPLATE_ERROR, f"the chat template raised {type(exc).__name__} on the prompt: {exc}")
        conversations = [conversation_of(record.origin, whole(record.prompt, c), record.tools)
                         for c in record.completions]
        return prompt, conversations, self.encoder.render(conversations)

    def tokenize(self, rendered: list) -> list:
        """Every prompt's and whole conversation's text in one call on the Rust threads."""
        texts = []
        for item in rendered:
            if not isinstance(item, Problem):
                prompt, _, renders = item
                texts += [prompt, *("" if isinstance(r, Problem) else r[0] for r in renders)]
        return self.encoder.tokenize([(text, None) for text in texts])

    def finish(self, batch: list, rendered: list, encodings: list) -> list[TokenizedPair]:
        out, at = [], 0
        for record, item in zip(batch, rendered):
            if isinstance(item, Problem):
                out.append(unbuilt(record.origin, item, record.label))
                continue
            prompt, conversations, renders = item
            mine = encodings[at:at + 1 + len(conversations)]
            at += len(mine)
            found = self._pair(record, prompt, conversations, renders, mine)
            out.append(found if isinstance(found, TokenizedPair) else unbuilt(record.origin, found, record.label))
        return out

    def _pair(self, record, prompt: str, conversations, renders, encodings) -> TokenizedPair | Problem:
        prompt_ids = np.asarray(encodings[0].ids, dtype=np.int32)
        whole_encodings = encodings[1:]
        tokenized = self.encoder.finish(conversations, renders, whole_encodings)
        names = COMPLETION_NAMES[len(conversations)]
        completions, masks = [], []
        for name, render, encoding in zip(names, renders, whole_encodings):
            samples, tokenized = tokenized[:tokenized[0].parts], tokenized[tokenized[0].parts:]
            if samples[0].problem is not None:
                return samples[0].problem._replace(reason=f"{name}: {samples[0].problem.reason}")
            text = render[0]
            ids, mask = samples[0].input_ids, samples[0].loss_mask
            if len(samples) > 1 or not np.array_equal(ids, np.asarray(encoding.ids, dtype=np.int32)):
                return Problem(HISTORY_REWRITTEN, f"{name}: the template rewrites earlier turns in the render of "
                                                  f"this completion: it cannot be one sequence after its prompt")
            if not text.startswith(prompt):
                at = next((i for i, (a, b) in enumerate(zip(prompt, text)) if a != b), min(len(prompt), len(text)))
                return Problem(PROMPT_NOT_PREFIX, f"{name}: the prompt's render is not the start of the render of "
                                                  f"prompt and {name}: they differ at character {at} "
                                                  f"({prompt[at:at + 20]!r} against {text[at:at + 20]!r})")
            size = len(prompt_ids)
            if not np.array_equal(ids[:size], prompt_ids):
                differ = np.flatnonzero(ids[:size] != prompt_ids[:len(ids[:size])])
                at = int(differ[0]) if differ.size else len(ids)  # else the sequence is shorter than its prompt
                return Problem(PROMPT_TOKENS_NOT_PREFIX, f"{name}: the prompt's {size} tokens are not the first "
                                                         f"tokens of prompt and {name} (they differ at token {at}: "
                                                         "the prompt's last token and the completion's first merge)")
            if mask[:size].any():
                return Problem(TARGET_IN_PROMPT, f"{name}: a target of the completion begins inside the prompt's "
                                                 f"tokens (token {int(np.flatnonzero(mask[:size])[0])})")
            if not mask[size:].any():
                return Problem(NO_TARGET, f"{name}: the completion holds no target token for the trainer to score")
            completions.append(ids[size:])
            masks.append(mask[size:])
        return TokenizedPair(record.origin, prompt_ids, tuple(completions), tuple(masks), record.label)

    def encode_batch(self, batch: list) -> list[TokenizedPair]:
        rendered = self.render(batch)
        return self.finish(batch, rendered, self.tokenize(rendered))
