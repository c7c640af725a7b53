"""`loss_mask: assistant`: on a template with `{% generation %}` tags, exactly the tagged spans
(tagged.py). Without tags, what the model writes at inference after the generation prompt, through
its stop token (encode/inference.py): the turns rendered as prefixes of the messages prepared once."""

from __future__ import annotations

from functools import partial

from ..inference import Sample, infer_samples
from .strategy import Strategy
from .tagged import tagged_samples, tracked


def samples(encoder, conversation, text: str, generation: list | None) -> list[Sample]:
    if generation is not None:
        return tagged_samples(text, generation)
    renderer = encoder.renderer
    prepared, tools = renderer.prepare(conversation.messages, conversation.tools)
    # under stop_tokens_in_fields: refuse, targets.samples checked the fields for these stops and more
    return infer_samples(prepared, tools, text, partial(renderer.render, prepared=True), encoder.stops, encoder.history,
                         encoder.special_tokens, fields_checked=encoder.stop_tokens_in_fields == "refuse")


STRATEGY = Strategy("assistant", tracked, samples)
