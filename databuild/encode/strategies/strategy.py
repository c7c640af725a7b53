"""What a loss-mask strategy is: how a conversation is rendered for it, the samples (text and target
spans) it finds in the render, and the tokens it supervises that no assistant field may spell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from ...records.conversation import Conversation
    from ..inference import Sample
    from ..render import Renderer


@dataclass(frozen=True)
class Strategy:
    name: str
    # Whether the render records the template's generation spans (`{% generation %}` tags) for `tools`.
    tracked: Callable[[Renderer, list | None], bool]
    # The samples of a render: (the encoder asking, whose renderer and stops it may use; the conversation;
    # the text; its generation spans when tracked).
    samples: Callable[[object, Conversation, str, list | None], list[Sample]]
    closings: frozenset[str] = frozenset()  # tokens it supervises: no assistant field may spell them
