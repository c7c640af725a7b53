"""`databuild make` of a preference config: pin (inputs resolved and hashed, tokenizer and template
loaded), read (psrc's preference_stream: the sources checked and spilled, records in permutation
order), encode (encode/preference.py, on executors/pairs.py), keep (the refusals under
on_bad_conversation; length.py's drops), take (`rows` pairs), write (rowfile/preference.py, hashed as
written, under a partial name), publish (the sources hashed again, the parquet renamed, the manifest
written last). As for SFT, through the same build.built_once: up to date means done, and a build is made
once under the output's lock (publish/lock.py).
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from ..build import BuildResult, built_once, current_build, encoder_pins, published
from ..current import stale_reason as current_reason
from ..encode.preference import PairEncoder
from ..errors import BuildError
from ..executors.cores import encode_processes
from ..executors.fork_server import refuse_in_starting_child
from ..executors.pairs import encode_pairs
from ..executors.stream import batches
from ..inputs.pins import check_unchanged
from ..inputs.resolve import resolve_inputs
from ..executors.loader import encoder_of
from ..publish.preference import DROPPED, full_manifest, pinned_manifest, read_preference_manifest
from ..records.pair import TokenizedPair
from ..records.problems import MALFORMED, BadConversation, on_bad_conversation, template_wide
from ..rowfile.preference import PairFigures
from ..rowfile.preference_write import write_pairs
from ..rowfile.write import partial_path
from ..sources.spill_folder import remove_stale_spill_folders
from ..utils.files import file_sha256
from ..verification.preference import verify_preference
from .length import Lengths, kept

DEFAULT_BATCH = 256  # records per tokenizer batch
UNPAIRED_FORMATS = ("unpaired_preference",)


@dataclass(frozen=True)
class PinnedPairs:
    config: Any
    inputs: Any
    encoder: PairEncoder
    kind: str  # paired or unpaired
    manifest: dict[str, Any]  # the pinned sections


def kind_of(config) -> str:
    """paired or unpaired, from the sources' formats (a mix refused: one row file holds one kind)."""
    unpaired = [spec.format in UNPAIRED_FORMATS for spec in config.sources]
    if any(unpaired) and not all(unpaired):
        first, other = unpaired.index(True), unpaired.index(False)
        raise BuildError(f"{config.path}: sources[{first}] is unpaired ({config.sources[first].format}) and "
                         f"sources[{other}] paired ({config.sources[other].format}): one preference build writes "
                         "pairs or unpaired rows, not both")
    return "unpaired" if all(unpaired) else "paired"


def pin_pairs(config, offline: bool = False) -> PinnedPairs:
    kind = kind_of(config)
    inputs = resolve_inputs(config, offline=offline)
    # the prompt's turns flagged off (encode/preference.py)
    _, encoder = encoder_of(config, inputs.tokenizer_dir, "flagged")
    return PinnedPairs(config, inputs, PairEncoder(encoder), kind,
                       pinned_manifest(config, inputs, kind, encoder_pins(encoder)))


def stale_reason(parquet: Path, expected: dict[str, Any]) -> str | None:
    """None when the preference build at `parquet` is this one (pinned sections equal, and it verifies)."""
    return current_reason(parquet, expected, read_preference_manifest,
                          lambda file, manifest: verify_preference(file, manifest)[0])


def make_preference(config, out_dir: Path, *, force: bool = False, offline: bool = False, workers: int | None = None,
                    batch_size: int = DEFAULT_BATCH, window: int | None = None) -> BuildResult:
    refuse_in_starting_child("databuild.preference.build.make_preference()")  # as build.make
    started = time.perf_counter()
    final = Path(out_dir) / f"{config.name}.parquet"
    remove_stale_spill_folders()
    built = pin_pairs(config, offline)

    def build() -> BuildResult:
        processes = encode_processes(workers)
        result = _build(built, final, processes, batch_size, window, started)
        return replace(result, encoding=f"{processes} process{'es' if processes > 1 else ''}")

    return built_once(final, force, lambda: stale_reason(final, built.manifest),
                      lambda: current_build(final, started, read_preference_manifest), build)


class Kept:
    """The keep step over the tokenized stream: what it read, skipped (with its kind) and cut."""

    def __init__(self, pairs: Iterator[TokenizedPair], stream, config, kind: str):
        self.pairs, self.stream, self.config, self.kind = pairs, stream, config, kind
        self.lengths = Lengths.of(config)
        self.read, self.skipped, self.cuts = 0, [], [0, 0]

    def __iter__(self) -> Iterator[TokenizedPair]:
        expected = 2 if self.kind == "paired" else 1
        for pair in self.pairs:
            self.read += 1
            pair = kept(pair, self.lengths)
            if pair.problem is None:
                if len(pair.completion_ids) != expected:
                    raise BuildError(f"pair {pair.origin.id!r} (source row {pair.origin.index}) has "
                                     f"{len(pair.completion_ids)} completions in a {self.kind} build")
                self.cuts[0] += pair.prompt_tokens_cut > 0
                self.cuts[1] += pair.prompt_tokens_cut
                yield pair
                continue
            bad: BadConversation = self.stream.bad(pair)
            # malformed: refused or counted when the sources were checked; the length drops: always counted
            self.skipped += [bad] if bad.kind in (MALFORMED, *DROPPED) else on_bad_conversation(
                self.config.on_bad_conversation, [bad])


def _build(built: PinnedPairs, final: Path, processes: int, batch_size: int, window: int | None,
           started: float) -> BuildResult:
    from ..sources.preference import preference_stream

    config, inputs = built.config, built.inputs
    partial = partial_path(final)
    figures = PairFigures(built.kind)
    with preference_stream(config, inputs, *(() if window is None else (window,))) as stream:
        # closed as soon as the rows are written: worker processes stop then, not when collected
        with closing(encode_pairs(batches(stream.records(), batch_size), built.encoder, processes)) as encoded:
            keep = Kept(encoded, stream, config, built.kind)
            written = write_pairs(islice(keep, config.rows), partial, built.kind, figures)
    try:
        if written < (config.rows or 1):
            raise _ran_out(written, config.rows, keep)
        check_unchanged(inputs)
        manifest = full_manifest(built.manifest, config, final.name, figures, file_sha256(partial), keep.read,
                                 keep.skipped, tuple(keep.cuts))
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return published(partial, final, manifest, started)


def _ran_out(written: int, rows: int | None, keep: Kept) -> BuildError:
    from collections import Counter

    kinds = Counter(bad.kind for bad in keep.skipped)
    fates = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    asked = "rows: all, and no pair could be built" if rows is None else f"rows: {rows} pairs asked"
    return BuildError(f"{asked}: the sources gave {written} of {keep.read} read" + (f" (left out: {fates})" if fates
                                                                                       else "")
                      + template_wide(keep.skipped, written))
