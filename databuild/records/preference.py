"""A preference example as it crosses the stages (issue 34): the shared context (`prompt`) and the
completions that follow it, either a pair (chosen, rejected: DPO and its relatives) or one completion
with its label (unpaired: KTO). Every preference source shape (sources/preference/) is read into this
one record, so that the encode stage sees it alone.

What each shape becomes:
- TRL's explicit prompt (`prompt`, `chosen`, `rejected`, each a list of messages): the prompt as it is,
  `completions == (chosen, rejected)`.
- TRL's implicit prompt (`chosen`, `rejected`, two whole conversations, as Tulu 3's preference mixture and
  UltraFeedback-binarized are): `prompt` is their longest common prefix of messages (each compared as a
  whole JSON value), `completions` the rest of each; the split rejoins to exactly the source's messages.
- Unpaired (`prompt`, `completion`, `label`): `completions == (completion,)`, `label` the row's bool.

A message is a dict of plain JSON values in the shape of `Conversation.messages`
(records/conversation.py): `role`, `content`, then the record's other fields in the source's order.
"""

from __future__ import annotations

from dataclasses import dataclass

from .origin import Origin
from .problems import Problem


@dataclass(frozen=True)
class PreferenceRecord:
    origin: Origin
    prompt: tuple[dict, ...]  # the shared context, rendered once (issue 34)
    completions: tuple[tuple[dict, ...], ...]  # (chosen, rejected) for a pair; (completion,) unpaired
    label: bool | None = None  # unpaired only: True desirable, False undesirable; None for a pair
    tools: list | None = None  # the template's `tools`, as in Conversation; None when it has none
    problem: Problem | None = None  # when it cannot be built: prompt and completions are () then

    @property
    def paired(self) -> bool:
        """A chosen/rejected pair (else one labelled completion, or a problem)."""
        return len(self.completions) == 2

    @property
    def chosen(self) -> tuple[dict, ...]:
        """A pair's chosen completion (messages after the prompt)."""
        if not self.paired:
            raise ValueError("an unpaired record has no chosen completion")
        return self.completions[0]

    @property
    def rejected(self) -> tuple[dict, ...]:
        """A pair's rejected completion (messages after the prompt)."""
        if not self.paired:
            raise ValueError("an unpaired record has no rejected completion")
        return self.completions[1]

    def conversations(self) -> tuple[tuple[dict, ...], ...]:
        """Each completion as the whole conversation it completes (prompt + completion), in order."""
        return tuple(self.prompt + completion for completion in self.completions)
