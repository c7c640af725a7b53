"""The spans a template declares with `{% generation %}` tags, recorded as transformers records them
(the template author's declaration, empty answers included): one sample, the render itself."""

from __future__ import annotations

from ..inference import Sample


def tracked(renderer, tools) -> bool:
    return renderer.has_generation_tags(tools)


def tagged_samples(text: str, generation: list) -> list[Sample]:
    return [Sample(text, tuple(generation), declared=True)]
