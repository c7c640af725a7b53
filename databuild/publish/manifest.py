"""The manifest: every pin, count and library version of a build, written last, beside the parquet.

It holds no time stamp or host name, so the same build writes the same manifest bytes. Its `build`,
`inputs` and `versions` sections hold only what is fixed before the first row is built: `make`
compares them with the ones it would write to tell an up-to-date build (databuild/current.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ..pack.bfd import OVERLONG_COUNTS
from ..records.row import NO_SUPERVISED_TOKEN
from ..records.problems import MALFORMED, SKIPPED_KINDS
from ..utils.files import replace_durably
from ..utils.versions import library_versions
from ..sources.dedup import DEDUP_RULE, duplicate_record
from .record import BuildRecord
from .funnel import funnel

if TYPE_CHECKING:
    from ..pack.rows import PackStats
    from ..records.problems import BadConversation

FORMAT = "databuild-manifest/1"
def manifest_path(parquet: Path) -> Path:
    return parquet.with_name(parquet.name.removesuffix(".parquet") + ".manifest.json")


def builds_anyway(parquet: Path, force: bool) -> bool:
    """Whether make builds `parquet` without comparing a build there first: --force, or no build there. What
    it knows before pinning its inputs, and so when it can start its encode processes' fork server."""
    return force or not manifest_path(parquet).exists()


def dumps(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def build_manifest(record: BuildRecord) -> dict[str, Any]:
    """The manifest of a finished build: every pin, count and version, nothing of the moment it ran."""
    config, inputs, packing, stats = record.config, record.inputs, record.packing, record.stats
    skipped, encoder_pins = record.skipped, record.encoder_pins
    total = stats.tokens_kept
    read = list(record.read) or [0] * len(inputs.sources)  # before the first row: none read
    return {
        "format": FORMAT,
        "name": config.name,
        "output": {
            "file": record.file_name,
            "rows_sha256": record.rows_sha256,
            "segments_sha256": record.segments_sha256,
            "parquet_sha256": record.parquet_sha256,
            "parquet_bytes": record.parquet_bytes,
            "rows": stats.rows_kept,
            "row_tokens": config.row_tokens,
            "padding_tokens": stats.padding_tokens,
            "tokens": total,
            "supervised_tokens": stats.supervised_tokens_kept,
            "supervised_token_ratio": stats.supervised_tokens_kept / total if total else 0.0,
        },
        "build": {
            "loss_mask": config.loss_mask,
            "seed": config.seed,
            "permutation": "numpy.random.default_rng(seed).permutation(source_conversations)",
            "take": TAKE_RULE,
            "template_kwargs": config.template_kwargs_dict,
            "separator": {"token": packing.separator, "id": packing.separator_id},
            "on_bad_conversation": config.on_bad_conversation,
            "parquet_writer": record.parquet_writer,
            "rows": config.rows_spelled,
            "row_tokens": config.row_tokens,
            "chat_template": encoder_pins.get("chat_template"),
            "end_of_turn": encoder_pins.get("end_of_turn"),
            "end_of_turn_from": encoder_pins.get("end_of_turn_from"),
            "history": config.history,
            "train_turns": config.train_turns,
            "stop_tokens_in_fields": config.stop_tokens_in_fields,
            **({"validation": {**config.validation.record(), "split": config.split}} if config.validation else {}),
            "dedup": {"policy": config.dedup, **({"key": DEDUP_RULE} if config.dedup == "exact" else {})},
            "packing": packing.record(),
        },
        "inputs": {
            "sources": [source_pins(source) for source in inputs.sources],
            "tokenizer": {
                "repo": config.tokenizer.repo, "revision": config.tokenizer.revision,
                "origin": "local" if config.tokenizer.dir else "hub",
                "sha256": dict(inputs.tokenizer_hashes),
                "switched_off": encoder_pins.get("tokenizer_json_switched_off", {}),
                "size": encoder_pins.get("tokenizer_size"),
            },
        },
        "counts": {
            "source_conversations": sum(len(source.selected) for source in inputs.sources),
            "malformed_in_source": len(record.malformed),
            "conversations_read": stats.conversations_read,
            "conversations_skipped": {kind: sum(1 for b in skipped if b.kind == kind) for kind in SKIPPED_KINDS},
            "separators_inserted": stats.separators_inserted,
            "repeated_ids": stats.repeated_ids,
            "empty_renders": stats.empty_renders,
            "empty_assistant_turns": stats.empty_assistant_turns,
            "unclosed_turns": stats.unclosed_turns,
            "prompt_tokens_differ": stats.prompt_tokens_differ,
            "history_expanded": history_expanded(stats),
            "train_turns": {"turns_not_trained": stats.turns_not_trained,
                            "samples_not_written": stats.samples_not_written},
            "rows_skipped": {NO_SUPERVISED_TOKEN: stats.rows_skipped_unsupervised},
            **({} if packing.policy == "concat" else {"overlong_conversations": {
                kind: stats.overlong[kind] for kind in OVERLONG_COUNTS.values()}}),
            "by_source": {source: {"conversations": stats.conversations_by_source[source],
                                   "tokens": stats.tokens_by_source[source]}
                          for source in sorted(stats.tokens_by_source)},
            "sources": source_counts(record, read),
            "funnel": funnel(record, read),
            "duplicates": _per_source_of(record, record.duplicates),
            **({"validation_held_out": _per_source_of(record, record.held_out)} if config.validation else {}),
        },
        # where a tokenizer pinned by content alone was read, for show and report (not a pin: a build
        # whose folder moved is still up to date)
        **({"tokenizer_dir": str(config.tokenizer.dir)} if config.tokenizer.repo is None else {}),
        "skipped_conversations": [bad.record() for bad in skipped],
        "duplicate_conversations": [duplicate_record(bad) for bad in record.duplicates],
        **({"validation": record.validation} if record.validation else {}),
        "versions": library_versions(),
        "row_digests": record.row_digests,
        "continued_rows": stats.continued_rows,
    }


def history_expanded(stats: PackStats) -> dict[str, Any]:
    """Conversations the history policy expanded into one sample per assistant turn, and their samples:
    in all, and by the conversations' `source` (as by_source)."""
    return {"conversations": sum(stats.history_expanded.values()), "samples": sum(stats.expanded_samples.values()),
            "by_source": {source: {"conversations": stats.history_expanded[source],
                                   "samples": stats.expanded_samples[source]}
                          for source in sorted(stats.history_expanded)}}


TAKE_RULE = "sorted(numpy.random.default_rng([seed, 1]).permutation(rows)[:selected]) per source"


def source_pins(source) -> dict[str, Any]:
    """One source's pins, files and selected rows (inputs.sources[i])."""
    from ..sources.mixture import selection_sha256

    spec = source.spec
    named = {} if spec.repo is not None else {"name": spec.name}  # pinned by content: the name it goes by
    return {"repo": spec.repo, "revision": spec.revision, **named, "split": spec.split, "format": spec.format_config,
            "ignore_fields": list(spec.ignore_fields), "rules": spec.rules.as_dict(), "take": spec.take,
            "origin": source.origin,
            "files": [{"path": p, "bytes": b, "sha256": s, "rows": f.rows}
                      for (p, b, s), f in zip(source.hashes, source.files)],
            "rows": source.rows, "selected": len(source.selected),
            "selected_sha256": selection_sha256(source.selected)}


def source_counts(record: BuildRecord, read: list[int]) -> list[dict[str, Any]]:
    """counts.sources[i]: each source's share of every conversation count; they add up to the totals.
    `read` is record.read: the stream positions the packer was handed, by source,
    of which the skipped and the empty renders are not conversations read."""
    from ..sources.mixture import source_of

    inputs, stats, skipped, malformed = record.inputs, record.stats, record.skipped, record.malformed
    firsts, _ = inputs.selections
    skipped_of, malformed_of, empty_of = (source_of(firsts, rows).tolist() for rows in (
        [b.index for b in skipped], [b.index for b in malformed], stats.empty_render_rows))
    counts = []
    for number, source in enumerate(inputs.sources):
        kinds = {kind: sum(1 for b, s in zip(skipped, skipped_of) if s == number and b.kind == kind)
                 for kind in SKIPPED_KINDS}
        dropped = sum(1 for s in skipped_of if s == number)  # skipped, and duplicates met
        counts.append({"repo": source.spec.name, "selected": len(source.selected),
                       MALFORMED: malformed_of.count(number),
                       "conversations_read": read[number] - dropped - empty_of.count(number),
                       "conversations_skipped": kinds,
                       **({"messages": record.record_counts[number]} if record.record_counts else {})})
    return counts


def _per_source_of(record: BuildRecord, found: tuple[BadConversation, ...]) -> dict[str, Any]:
    """counts.duplicates, counts.validation_held_out: the conversations the first pass found to drop
    among the rows the stream holds (each row once, however often a take repeats it), in all and by
    source (config order)."""
    from ..sources.mixture import source_of

    firsts, _ = record.inputs.selections
    of = source_of(firsts, [b.index for b in found]).tolist() if found else []
    return {"found": len(found), "by_source": [of.count(number) for number in range(len(record.inputs.sources))]}


def write_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Temporary name, fsync, rename: a reader sees the old manifest or the whole new one."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(dumps(manifest))
        handle.flush()
        os.fsync(handle.fileno())
    replace_durably(partial, path)
