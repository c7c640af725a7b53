"""Where a row's tool calls, tool results and reasoning lie, from the record: each shown conversation
re-rendered from the build's pinned source and its fields placed token by token.

The row file holds tokens, masks and segment starts, not which message a token came from. So the
config the manifest names (or `--config`) is pinned offline and its pinned `inputs` and `build`
must be the manifest's; the row's conversations are read from the source by id (sources/lookup.py)
and encoded again as the build encodes them (Encoder.kept_samples: history-expanded samples
included). In each sample's text the fields of every message are placed with the sentinels of
encode/placement.py (message_fields: an assistant's reasoning, its tool calls' names and text
arguments, a tool message's content), and each row segment is found in its conversation's samples
by its tokens and targets (a segment continued from an earlier row lies past a sample's start; the
separator after a conversation is not the sample's). Arguments the sentinels cannot place (an
object, or a text the template writes through a JSON filter) are found after the call's name as the
template serializes them (views/arguments.py). A region is a field's tokens: a tool call's from its
name to the end of its arguments, or its name alone where they are not found once there (the note
counts those calls). A segment not found this way (its conversation not in the source, a template
the placement cannot follow) gets views/marks.py's reading of its text, and the note says how many.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import BuildError
from ..records.row import PADDING_ID
from ..rowfile.read import StoredRow
from ..sources.holdout import VALIDATION_SUFFIX
from .marks import REASONING, TOOL_CALL, TOOL_RESULT

_SHOWN_KINDS = {"reasoning": REASONING, "tool_call": TOOL_CALL, "tool_result": TOOL_RESULT}


@dataclass(frozen=True)
class TokenRegion:
    start: int  # row token indices, [start, end)
    end: int
    kind: str
    name_only: bool = False  # a tool call marked on its name alone: its arguments not found (views/arguments.py)


@dataclass(frozen=True)
class Part:
    """One sample of a conversation as the build tokenizes it, with its fields' token regions."""
    ids: np.ndarray
    mask: np.ndarray
    regions: tuple[TokenRegion, ...]  # in the sample's token indices


@dataclass(frozen=True)
class RecordMarks:
    by_segment: dict[tuple[int, int], list[TokenRegion]]  # (row index, segment): regions in row token indices
    note: str  # one line: where the marks come from

    def of_row(self, row: StoredRow) -> dict[int, list[TokenRegion]]:
        """The row's regions by segment, for views/show.py's spans and compose."""
        return {k: regions for (index, k), regions in self.by_segment.items() if index == row.index}


def unavailable(why: str) -> RecordMarks:
    return RecordMarks({}, f"marks: from the markup in the decoded text, not the record ({why})")


def record_marks(rows: list[StoredRow], manifest: dict | None, config_given: str | None) -> RecordMarks:
    """The record's regions of every real segment of `rows` that is found; where the source is not on
    this machine (or another config is), none, and a note saying why."""
    segments = [(row, k) for row in rows for k, cid in enumerate(row.conversation_ids) if cid != PADDING_ID]
    if not segments:
        return RecordMarks({}, "")
    try:
        config = _config(manifest, config_given)
        from ..prepare import pin
        from ..sources.lookup import find_by_id

        pinned = pin(config, offline=True)
        if _validation_file(manifest) and config.validation is not None:  # the split's own build, as make builds it
            from ..prepare import validation_split

            pinned = validation_split(pinned).pinned
        _check_same_pins(pinned, pinned.config, manifest)
        found = find_by_id(pinned.inputs.source_files, {row.conversation_ids[k] for row, k in segments})
    except BuildError as exc:
        return unavailable(f"the source is not available here: {exc}")
    parts = {cid: _parts(pinned.encoder, conversations) for cid, conversations in found.items()}
    by_segment, calls = {}, {}
    for row, k in segments:
        cid = row.conversation_ids[k]
        located = _locate(row, k, parts.get(cid, []))
        if located is not None:
            by_segment[(row.index, k)], shown = located
            calls.update({(cid, *call): name_only for call, name_only in shown.items()})
    missing = len(segments) - len(by_segment)
    note = f"marks: from the record (config {config.name}'s source re-rendered)"
    if missing:
        note += (f"; {missing} of {len(segments)} conversation segments not found in it are marked from the "
                 "markup in their decoded text")
    if any(calls.values()):
        note += (f"; {sum(calls.values())} of {len(calls)} tool calls marked on their name only (their arguments "
                 "as the template writes them not found once after it)")
    return RecordMarks(by_segment, note)


def _config(manifest: dict | None, given: str | None):
    from ..config import available_configs, load_config, resolve_config

    if given is not None:
        return resolve_config(given)
    name = (manifest or {}).get("name")
    if isinstance(name, str) and _validation_file(manifest):  # NAME.validation: built by config NAME
        name = name.removesuffix(VALIDATION_SUFFIX)
    path = available_configs().get(name) if isinstance(name, str) else None
    if path is None:
        raise BuildError(f"no config named {name!r} on this machine; pass --config" if name else
                         "no manifest names its config; pass --config")
    return load_config(path)


def _validation_file(manifest: dict | None) -> bool:
    """The manifest is a validation split's (build.validation.split), whose build is its config's split."""
    validation = ((manifest or {}).get("build") or {}).get("validation")
    return isinstance(validation, dict) and validation.get("split") == "validation"


def _check_same_pins(pinned, config, manifest: dict | None) -> None:
    from ..build import manifest_of
    from ..publish.manifest_diff import changes

    ours = manifest_of(pinned, f"{config.name}.parquet")
    theirs = manifest or {}
    for section in ("inputs", "build"):
        change = next((c for c in changes(theirs.get(section), ours.get(section), section)
                       if not c.key.startswith("build.validation")), None)
        if change is not None:
            raise BuildError(f"config {config.name} pins {change.key} otherwise than the manifest")


def _parts(encoder, conversations: Iterable) -> list[Part]:
    """The samples of each conversation with that id, as the build tokenizes them; none for one the
    build could not encode or whose fields cannot be placed."""
    from ..encode.placement import MaskError
    from ..records.problems import Problem

    out = []
    for conversation in conversations:
        samples = encoder.kept_samples(conversation)
        if isinstance(samples, Problem):
            continue
        tokenized = encoder.encode_batch([conversation])
        encodings = encoder.tokenize([(s.text, None) for s in samples])
        try:
            placed = [_placed(encoder.renderer, conversation, sample) for sample in samples]
        except MaskError:
            continue
        for encoding, fields, part in zip(encodings, placed, tokenized):
            out.append(Part(part.input_ids, part.loss_mask, tuple(_token_regions(encoding, fields))))
    return out


def _placed(renderer, conversation, sample) -> list[tuple[str, int, int, bool]]:
    """(kind, start, end, name only) of each marked field in the sample's text, a tool call's name and
    arguments as one. An expanded sample renders the messages through its turn (its text may end with
    the next message's stop token, or begin with a prompt the template rewrote): fields are placed in
    that render and carried over where it and the sample's text agree, from the start or from the end."""
    from ..encode.turns import without_flags
    from .arguments import placed_with_arguments

    messages, _ = without_flags(conversation.messages)
    tools = conversation.tools
    text = renderer.render(messages, tools)
    if text != sample.text and sample.turns:
        messages = messages[:max(last for _, last in sample.turns) + 1]
        text = renderer.render(messages, tools)
    placed, name_only = placed_with_arguments(renderer, messages, tools, text)
    head = len(os.path.commonprefix([text, sample.text]))
    tail = min(len(os.path.commonprefix([text[::-1], sample.text[::-1]])), min(len(text), len(sample.text)) - head)
    shift = len(sample.text) - len(text)
    regions: dict[tuple, list[int]] = {}
    for p in placed:
        if p.kind not in _SHOWN_KINDS:
            continue
        start, end = (p.start, p.end) if p.end <= head else \
            (p.start + shift, p.end + shift) if p.start >= len(text) - tail else (None, None)
        if start is None:
            continue
        key = (p.message, p.kind, p.call if p.kind == "tool_call" else start)
        bounds = regions.setdefault(key, [start, end])
        bounds[0], bounds[1] = min(bounds[0], start), max(bounds[1], end)
    return sorted((_SHOWN_KINDS[kind], start, end, kind == "tool_call" and (message, which) in name_only)
                  for (message, kind, which), (start, end) in regions.items())


def _token_regions(placed, fields: list[tuple[str, int, int, bool]]) -> Iterable[TokenRegion]:
    """`placed`: the sample's encoding as encode/positions.py places it."""
    for kind, start, end, name_only in fields:
        first, last = placed.holding(start), placed.holding(end - 1)
        if first is not None and last is not None:
            yield TokenRegion(first[0], last[0] + 1, kind, name_only)


def _locate(row: StoredRow, segment: int, parts: list[Part]) -> tuple[list[TokenRegion], dict] | None:
    """The regions of the row's segment, found in one of its conversation's samples by its tokens and
    targets: from the sample's start unless the segment continues an earlier row's; the separator the
    packer put after it left out. With them, each tool call shown, by (sample, its start there): whether
    it is marked on its name only."""
    start = int(row.seq_start_id[segment])
    end = int(row.seq_start_id[segment + 1]) if segment + 1 < len(row.seq_start_id) else len(row.input_ids)
    continued = segment == 0 and row.continued
    for trail in (0, 1):
        ids, mask = row.input_ids[start:end - trail], row.loss_mask[start:end - trail]
        if not len(ids):
            continue
        for n, part in enumerate(parts):
            for offset in _occurrences(part.ids, ids, anywhere=continued):
                if np.array_equal(part.mask[offset:offset + len(ids)], mask):
                    shown = [r for r in part.regions if r.end > offset and r.start < offset + len(ids)]
                    return ([TokenRegion(start + max(r.start - offset, 0), start + min(r.end - offset, len(ids)),
                                         r.kind, r.name_only) for r in shown],
                            {(n, r.start): r.name_only for r in shown if r.kind == TOOL_CALL})
    return None


def _occurrences(haystack: np.ndarray, needle: np.ndarray, anywhere: bool) -> Iterable[int]:
    """Where `needle` stands in `haystack` (int32 arrays): at 0 only, or anywhere."""
    if len(needle) > len(haystack):
        return
    if not anywhere:
        if np.array_equal(haystack[:len(needle)], needle):
            yield 0
        return
    data, sought = haystack.astype(np.int32).tobytes(), needle.astype(np.int32).tobytes()
    at = data.find(sought)
    while at >= 0:
        if at % 4 == 0:
            yield at // 4
        at = data.find(sought, at + 1)
