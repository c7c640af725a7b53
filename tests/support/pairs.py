"""Preference records (records/preference.py) built by hand for the encode tests, and encoders over the fixture
tokenizer with a small generation-tagged template (transformers' own masks are the reference there)."""

from __future__ import annotations

from typing import Any

from conftest import TOKENIZER_DIR
from databuild.encode.encoder import Encoder
from databuild.encode.preference import PairEncoder
from databuild.encode.render import Renderer, load_tokenizer
from databuild.records.origin import Origin
from databuild.records.preference import PreferenceRecord

# Harmony-like markup with the assistant's text and its <|end|> in generation blocks; the generation
# prompt is GENERATION (the tests vary it to make a prompt that is not a prefix).
GENERATION = "<|start|>assistant<|message|>"
TAGGED = ("{% for m in messages %}{% if m.role == 'assistant' %}<|start|>assistant<|message|>{% generation %}"
          "{{ m.content }}<|end|>{% endgeneration %}{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
          "{% endif %}{% endfor %}{% if add_generation_prompt %}GENERATION{% endif %}")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def pair(number: int, prompt: tuple[dict, ...], *completions: tuple[dict, ...],
         label: bool | None = None) -> PreferenceRecord:
    return PreferenceRecord(Origin(number, number, f"pair-{number}", "hand"), prompt, completions, label)


def tagged_template(generation: str = GENERATION) -> str:
    return TAGGED.replace("GENERATION", generation)


def pair_encoder(template: str | None = None, loss_mask: str = "assistant") -> tuple[Any, PairEncoder]:
    """(the fixture tokenizer, a PairEncoder) over `template` (default: the tokenizer's own, muse_spark)."""
    tokenizer = load_tokenizer(TOKENIZER_DIR)
    kwargs = {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
    if template is None:
        renderer, loss_mask = Renderer.for_tokenizer(tokenizer, kwargs), "muse_spark"
    else:
        renderer = Renderer(template, dict(tokenizer.special_tokens_map), kwargs)
    encoder = Encoder(tokenizer, renderer, loss_mask, train_turns="flagged", stop_tokens_in_fields="train")
    return tokenizer, PairEncoder(encoder)
