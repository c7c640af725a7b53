"""The manifest of a preference build (format databuild-preference-manifest/1): its pins, settings,
counts and library versions, written last beside the parquet; no time stamp or host name, so the same
build writes the same bytes. `format`, `name`, `build`, `inputs` and `versions` are fixed before the
first pair: make compares them to tell an up-to-date build (current.pinned). data/README ("Preference
builds", "Its manifest") lists every field.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import BuildError
from .manifest import TAKE_RULE, source_pins
from ..records.pair import LENGTH_DROPPED_KINDS, PAIR_REFUSED_KINDS
from ..records.problems import (IDENTICAL_COMPLETIONS, MALFORMED, NO_TRAINED_TURN, PREFERENCE_SKIPPED_KINDS,
                                SKIPPED_KINDS, BadConversation)
from ..rowfile.preference import FORMAT as ROW_FORMATS, PAIRS_PER_GROUP, PairFigures
from ..rowfile.write import WRITER_OPTIONS
from .manifest_read import manifest_of_format
from ..utils.versions import library_versions

FORMAT = "databuild-preference-manifest/1"
# skipped or stopping the build as on_bad_conversation says; malformed rows are counted apart
REFUSED_KINDS = (*(k for k in SKIPPED_KINDS if k != MALFORMED), *PREFERENCE_SKIPPED_KINDS, *PAIR_REFUSED_KINDS)
# dropped whatever on_bad_conversation says (a completion whose turns all say train: false: no_trained_turn)
DROPPED = (IDENTICAL_COMPLETIONS, *LENGTH_DROPPED_KINDS, NO_TRAINED_TURN)
PROMPT_RULE = ("the prompt's messages rendered with add_generation_prompt (it ends on a user or tool message), a "
               "prefix byte for byte and token for token of prompt + each completion rendered whole, else refused")


def pinned_manifest(config, inputs, kind: str, encoder_pins: dict[str, Any]) -> dict[str, Any]:
    """The sections known before the first pair."""
    return {
        "format": FORMAT,
        "name": config.name,
        "build": {
            "task": "preference", "kind": kind, "row_format": ROW_FORMATS[kind],
            "loss_mask": config.loss_mask, "seed": config.seed,
            "permutation": "numpy.random.default_rng(seed).permutation(source_rows)", "take": TAKE_RULE,
            "template_kwargs": config.template_kwargs_dict, "on_bad_conversation": config.on_bad_conversation,
            "parquet_writer": {**WRITER_OPTIONS, "row_group_rows": PAIRS_PER_GROUP},
            "rows": config.rows_spelled, "prompt_tokens": config.prompt_tokens,
            "sequence_tokens": config.sequence_tokens, "overlong_prompt": config.overlong_prompt,
            "prompt": PROMPT_RULE, "chat_template": encoder_pins["chat_template"],
            "end_of_turn": encoder_pins["end_of_turn"], "end_of_turn_from": encoder_pins["end_of_turn_from"],
            "history": config.history, "stop_tokens_in_fields": config.stop_tokens_in_fields,
        },
        "inputs": {
            "sources": [source_pins(source) for source in inputs.sources],
            "tokenizer": {"repo": config.tokenizer.repo, "revision": config.tokenizer.revision,
                          "origin": "local" if config.tokenizer.dir else "hub",
                          "sha256": dict(inputs.tokenizer_hashes),
                          "switched_off": encoder_pins["tokenizer_json_switched_off"],
                          "size": encoder_pins["tokenizer_size"]},
        },
        "versions": library_versions(),
    }


def full_manifest(pinned: dict[str, Any], config, file_name: str, figures: PairFigures, parquet: tuple[str, int],
                  read: int, skipped: list[BadConversation], cuts: tuple[int, int]) -> dict[str, Any]:
    """The manifest of a finished build: `read` records taken from the stream, `skipped` the ones left out (each
    with its kind), `cuts` (prompts cut, tokens cut) under overlong_prompt: cut_left."""
    kinds = Counter(bad.kind for bad in skipped)
    output = {"file": file_name, "parquet_sha256": parquet[0], "parquet_bytes": parquet[1], **figures.record()}
    counts = {
        "pairs_read": read,
        "malformed_in_source": kinds[MALFORMED],
        "pairs_refused": {kind: kinds[kind] for kind in REFUSED_KINDS},
        "pairs_dropped": {kind: kinds[kind] for kind in DROPPED},
        "pairs_kept": figures.rows,
        "prompts_cut": cuts[0],
        "prompt_tokens_cut": cuts[1],
    }
    order = list(pinned)
    out = {**pinned, "output": output, "counts": counts,
           **({"tokenizer_dir": str(config.tokenizer.dir)} if config.tokenizer.repo is None else {}),
           "skipped_pairs": [bad.record() for bad in skipped], "row_digests": figures.row_digests}
    return {key: out[key] for key in [*order[:2], "output", *order[2:], *(k for k in out if k not in order and
                                                                         k != "output")]}


def read_preference_manifest(path: Path) -> dict[str, Any]:
    """A preference manifest read back, its format and the fields verify reads type-checked."""
    manifest = manifest_of_format(path, FORMAT)
    for section, key, kind in (("output", "rows", int), ("output", "rows_sha256", str),
                               ("output", "parquet_sha256", str), ("output", "parquet_bytes", int),
                               ("output", "kind", str), ("build", "prompt_tokens", int),
                               ("build", "sequence_tokens", int), ("inputs", "tokenizer", dict)):
        value = manifest.get(section, {}).get(key) if isinstance(manifest.get(section), dict) else None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BuildError(f"{path}: manifest field {section}.{key} is {value!r}, expected {kind.__name__}")
    if not isinstance(manifest.get("row_digests"), list):
        raise BuildError(f"{path}: manifest field row_digests is missing or not a list")
    return manifest


def recipe_values(manifest: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    """(key path under workload.dataset, value) for what a preference build records in a recipe, written as
    publish/recipe.py writes an SFT build's."""
    from .recipe import tokenizer_text

    output, build = manifest["output"], manifest["build"]
    kwargs = ", ".join(f"{key} {value}" for key, value in build["template_kwargs"].items())
    names = ("chosen", "rejected") if output["kind"] == "paired" else ("completion",)
    return [
        (("rows_sha256",), output["rows_sha256"]),
        (("build", "name"), manifest["name"]),
        (("build", "task"), "preference"),
        (("build", "kind"), output["kind"]),
        (("build", "tokenizer"), tokenizer_text(manifest["inputs"]["tokenizer"])),
        (("build", "loss_mask"), build["loss_mask"]),
        (("build", "rows"), output["rows"]),
        (("build", "prompt_tokens"), build["prompt_tokens"]),
        (("build", "sequence_tokens"), build["sequence_tokens"]),
        (("build", "overlong_prompt"), build["overlong_prompt"]),
        (("build", "seed"), build["seed"]),
        *((("build", f"{name}_supervised_tokens"), output[f"{name}_supervised_tokens"]) for name in names),
        (("build", "parquet_sha256"), output["parquet_sha256"]),
        (("build", "parquet_bytes"), output["parquet_bytes"]),
        *([(("build", "template_kwargs"), kwargs)] if kwargs else []),
    ]
