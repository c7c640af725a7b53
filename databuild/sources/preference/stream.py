"""A preference build's source stage: its sources read, checked and spilled in permutation order by
the SFT machinery unchanged (sources/reader.py, row_checks.py, spill.py; the placement and seed of
sources/mixture.py), each spilled row read back as a PreferenceRecord (split.py).

The spill bounds memory as for SFT (one bucket of `window` rows in memory at a time). It spills the
whole stream on its first pass: a preference build has no row budget to stop at (every pair is one row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

from ...errors import BuildError
from ...records.preference import PreferenceRecord
from ...records.problems import BadConversation, bad_conversation, marked, on_bad_conversation
from ..formats import PREFERENCE_FORMATS
from ..mixture import placement
from ..spill import Spill
from ..spill_folder import spill_folder
from ..spilled import read_bucket
from .split import column_message, preference_record

DEFAULT_WINDOW = 8192  # rows per spilled bucket, as prepare.DEFAULT_WINDOW


def preference_sources(formats: Sequence[str]) -> bool:
    """Whether a config's sources (their `format`s, in config order) are preference sources: True when all
    are, False when none is; a mix refused, naming the first of each."""
    preference = [name in PREFERENCE_FORMATS for name in formats]
    if any(preference) and not all(preference):
        first, other = preference.index(True), preference.index(False)
        raise BuildError(f"sources[{first}] has the preference format {formats[first]!r} and sources[{other}] "
                         f"the SFT format {formats[other]!r}: a build is all preference sources or none")
    return bool(preference) and all(preference)


@dataclass
class PreferenceStream:
    """The spilled preference sources: `records()` in permutation order, `malformed` the rows the check
    pass refused under on_bad_conversation: skip (by source row). A context manager: the bucket files
    live in a temporary directory until it exits."""
    spill: Spill
    malformed: dict[int, BadConversation]
    folder: object  # the TemporaryDirectory of the bucket files

    def records(self) -> Iterator[PreferenceRecord]:
        """Every row of the stream in permutation order, as its record; a malformed row's record carries
        its problem and no messages (records/problems.marked)."""
        for conversation in marked(self.spill.conversations(), self.malformed):
            yield preference_record(conversation)

    def bad(self, record: PreferenceRecord) -> BadConversation:
        """A record with a problem named by its source, file, row and id (records/problems.py), for its
        refusal or its count."""
        return bad_conversation(self.spill.files, record.origin.index, record.origin.id, record.problem)

    def __enter__(self) -> PreferenceStream:
        return self

    def __exit__(self, *exc) -> None:
        self.folder.cleanup()


MESSAGE_NUMBER = re.compile(r"message (\d+): ")


def renumbered(spill: Spill, found: list[BadConversation]) -> list[BadConversation]:
    """`found` with each reason's "message N" (the record's checks number a row's messages across its
    columns) named as the column's own ("rejected: message 0"), read from the row's spilled marks: only
    the buckets holding such a row are read again."""
    wanted = {bad.index: bad for bad in found if MESSAGE_NUMBER.match(bad.problem.reason)}
    by_bucket: dict[int, set[int]] = {}
    for index in wanted:
        _, positions = spill.placement.within(index, 1)
        by_bucket.setdefault(int(positions[0]) // spill.window, set()).add(index)
    named: dict[int, BadConversation] = {}
    for bucket, indices in sorted(by_bucket.items()):
        for conversation in read_bucket(spill._path(bucket)):
            index = conversation.origin.index
            if index in indices and index not in named:
                bad = wanted[index]
                match = MESSAGE_NUMBER.match(bad.problem.reason)
                column = column_message(conversation.messages, int(match.group(1)))
                named[index] = bad if column is None else replace(bad, problem=bad.problem._replace(
                    reason=f"{column}: {bad.problem.reason[match.end():]}"))
    return [named.get(bad.index, bad) for bad in found]


def preference_stream(config, inputs, window: int = DEFAULT_WINDOW) -> PreferenceStream:
    """The preference sources of `config` (a BuildConfig) as resolved (`inputs`: inputs/resolve.py),
    checked and spilled: every malformed row found before the first record, and refused (the build
    stops, naming it) unless on_bad_conversation: skip."""
    preference_sources([spec.format for spec in config.sources])
    placed = placement(*inputs.selections, config.seed)
    folder = spill_folder()
    try:
        spill = Spill(inputs.source_files, placed, window, Path(folder.name))
        found = on_bad_conversation(config.on_bad_conversation, renumbered(spill, spill.check_and_spill(placed.size)))
    except BaseException:
        folder.cleanup()
        raise
    return PreferenceStream(spill, {bad.index: bad for bad in found}, folder)
