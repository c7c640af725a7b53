"""A build's first two steps, before its first row: pin (`pin`: the inputs resolved and hashed, the
tokenizer loaded, the template compiled) and prepare (`prepare`: the sources read, checked and spilled
in permutation order, the conversations dropped up front found: malformed, duplicates, the validation
split's). Also the validation split of a config (`validation_split`): its own pinned build and what the
training build drops for it. build.py runs these, then the stream.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from itertools import chain
from typing import Callable, Iterator

from .config import BuildConfig
from .encode.encoder import Encoder
from .errors import BuildError
from .executors.ahead import EncodedAhead
from .executors.loader import load_in_child, loaded
from .executors.stream import batch_sizes, batches
from .inputs.resolve import ResolvedInputs, resolve_inputs
from .pack.rows import Packing
from .records.conversation import Conversation
from .records.problems import BadConversation, marked, on_bad_conversation
from .sources.dedup import find_duplicates
from .sources.holdout import VALIDATION_SUFFIX, held_out_conversations, held_out_rows
from .sources.mixture import placement
from .sources.preference import preference_sources
from .sources.spill import Spill, expected_prefix
from .sources.spill_folder import spill_folder
from .sources.spilled import SpilledBatch

DEFAULT_WINDOW = 8192  # conversations per spilled bucket: the memory bound of the source stage


@dataclass(frozen=True)
class Pinned:
    """The inputs resolved and hashed, the tokenizer loaded, the template compiled: all that a build's
    pinned manifest sections depend on, known before its first row. The tokenizer may still be loading
    (`pin(wait=False)`): `packing` and `encoder` wait for it, and raise its error."""
    config: BuildConfig
    inputs: ResolvedInputs
    loaded: Future  # of (packing, encoder)

    @property
    def packing(self) -> Packing:
        return self.loaded.result()[0]

    @property
    def encoder(self) -> Encoder:
        return self.loaded.result()[1]

    def load_error(self) -> BaseException | None:
        """The tokenizer's load error, once it is loaded or has failed (None: loaded)."""
        return self.loaded.exception()


def pin(config: BuildConfig, offline: bool = False, wait: bool = True, in_child: bool = False) -> Pinned:
    """The config's inputs resolved and hashed, and its tokenizer loaded. The tokenizer loads
    (transformers' tokenizer modules and the files: ~2 s on a 16-core node) from when its files are
    checked, while the sources are listed and hashed: on a thread of its own, or with `in_child` in a
    process forked from the workers' fork server (executors/loader.py), where there is one; an input's
    error still comes first, the tokenizer's after, as when one followed the other. With `wait` False it
    may still be loading when this returns, so that a build reads its source meanwhile (build.make):
    whoever asks for the encoder first waits for it."""
    loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="databuild-load-tokenizer")
    loading: list[Future] = []

    def load(directory: Path) -> None:
        child = load_in_child(loaded, config, directory) if in_child else None
        loading.append(child or loader.submit(loaded, config, directory))

    try:
        inputs = resolve_inputs(config, offline, load)
    except BaseException:
        loader.shutdown()  # an input's error once the load has ended, as before
        raise
    loader.shutdown(wait=False)  # its one load goes on
    pinned = Pinned(config, inputs, loading[0])
    if wait:
        pinned.encoder  # noqa: B018  (raises the tokenizer's error here)
    return pinned


@dataclass
class Prepared:
    """Everything checked and loaded before the first row: what every executor streams from.

    A context manager: the source's bucket files live in a temporary directory until it exits.
    """
    config: BuildConfig
    inputs: ResolvedInputs
    packing: Packing
    malformed: dict[int, BadConversation]
    encoder: Encoder
    spill: Spill
    spill_dir: tempfile.TemporaryDirectory
    duplicates: dict[int, BadConversation]  # dedup: exact's, by source row (sources/dedup.py); {} without
    held_out: dict[int, BadConversation]  # the validation split's (sources/holdout.py); {} without

    @property
    def dropped_up_front(self) -> dict[int, BadConversation]:
        """The conversations the first pass found unbuildable (malformed) or dropped (duplicates, the
        validation split's), by source row."""
        return {**self.malformed, **self.held_out, **self.duplicates}

    def conversations(self) -> Iterator[Conversation]:
        """The stream in permutation order, the conversations dropped up front marked."""
        return marked(self.spill.conversations(), self.dropped_up_front)

    def batches(self, size: int, by_reference: bool,
                processes: int = 1) -> Iterator[list[Conversation] | SpilledBatch | EncodedAhead]:
        """conversations() cut into batches of `size`, the first ones smaller for `processes` encode
        processes (executors.stream.batch_sizes): as references into the spill, read by whoever encodes
        them (`by_reference`: worker processes), else read here in bulk, the cheaper way for one reader.
        Where the pass sent the stream's first positions ahead, they stand for those positions' batches, and
        the rest come in full batches: the processes are busy already."""
        dropped = self.dropped_up_front
        if self.spill.ahead is not None:
            sent = self.spill.ahead_positions
            again = EncodedAhead(tuple(self.spill.ahead), sent, dropped,
                                 lambda: self.spill.batches(batch_sizes(size, processes), dropped, 0, sent))
            return chain((again,), self.spill.batches(size, dropped, sent))
        sizes = batch_sizes(size, processes)
        if by_reference:
            return self.spill.batches(sizes, dropped)
        return batches(self.conversations(), sizes)

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, *exc) -> None:
        self.spill_dir.cleanup()


def prepare(config: BuildConfig, offline: bool = False, window: int = DEFAULT_WINDOW,
            spill_prefix: int | None = None, pinned: Pinned | None = None,
            exclude: tuple[set[int], set[str], set[bytes]] | None = None,
            ahead: Callable[[], Callable[[SpilledBatch], Future]] | None = None) -> Prepared:
    """Resolve and check the inputs, load the tokenizer (unless `pinned` has, or is loading it: the pass
    runs meanwhile, and this returns once both are done), and make the first pass over the source: it
    checks every conversation and spills the stream's expected prefix (`spill_prefix` overrides it).
    Nothing is rendered before this, but for the stream's first positions sent `ahead` (executors.Encoding.ahead),
    whose stream the build starts once this returns. `exclude`: the validation split's rows, ids and content keys,
    which this stream drops."""
    if preference_sources([spec.format for spec in config.sources]):
        raise BuildError(f"the sources have the preference format {config.sources[0].format!r}: an SFT build "
                         "reads conversations; set task: preference to build chosen/rejected pairs")
    pinned = pinned or pin(config, offline)
    inputs = pinned.inputs
    placed = placement(*inputs.selections, config.seed)
    spill_dir = spill_folder()
    try:
        keys = config.dedup == "exact" or config.validation is not None  # content keys: dedup, the split's check
        spill = Spill(inputs.source_files, placed, window, Path(spill_dir.name), keys=keys)
        if spill_prefix is None:
            spill_prefix = (placed.size if config.rows is None else  # rows: all reads the whole stream
                            expected_prefix(inputs.source_files, placed, config.rows * config.row_tokens))
        found = on_bad_conversation(config.on_bad_conversation, spill.check_and_spill(
            spill_prefix, ahead and ahead(), exact=config.rows is None))
        malformed = {bad.index: bad for bad in found}
        files = list(inputs.source_files)
        held_out = held_out_conversations(spill.keys, *exclude, files) if exclude else {}
        duplicates = find_duplicates({i: k for i, k in spill.keys.items() if i not in held_out}, files) if \
            config.dedup == "exact" else {}
        return Prepared(config, inputs, pinned.packing, malformed, pinned.encoder, spill, spill_dir, duplicates,
                        held_out)
    except Exception:
        spill_dir.cleanup()
        # The tokenizer may have loaded meanwhile (pin(wait=False)): its error comes first, as when the
        # pass followed the load.
        if (failed := pinned.load_error()) is not None:
            raise failed from None
        raise
    except BaseException:
        spill_dir.cleanup()
        raise


@dataclass(frozen=True)
class Split:
    """The validation split of a build: its own build (the held-out rows of each source, every one once,
    rows: all) and what the training build drops for it (rows, ids)."""
    pinned: Pinned
    rows: set[int]  # held-out rows, numbered across every source's files
    ids: set[str]


def validation_split(pinned: Pinned) -> Split:
    """The split of `pinned`'s config (sources/holdout.py): its build is the config renamed NAME.validation,
    rows: all, over each source's held-out rows (in place of its take)."""
    config, inputs = pinned.config, pinned.inputs
    held, ids = held_out_rows(inputs.sources, config.validation)
    sources = tuple(replace(s, selected=rows) for s, rows in zip(inputs.sources, held))
    vconfig = replace(config, name=f"{config.name}{VALIDATION_SUFFIX}", rows=None, split="validation")
    return Split(Pinned(vconfig, replace(inputs, sources=sources), pinned.loaded),
                 {s.first_index + int(r) for s, rows in zip(inputs.sources, held) for r in rows},
                 {i for source_ids, rows in zip(ids, held) for i in (source_ids[int(r)] for r in rows)})
