"""`databuild make`: the stages wired together, then the results published atomically.

The recipe, in order: pin and prepare (prepare.py: inputs resolved and hashed, tokenizer and template
loaded; the sources read, checked and spilled in permutation order), stream and encode (the
executor, over the spill's batches), keep (`buildable`: on_bad_conversation applied), pack, take (the
config's rows), write (`write_rows`, hashed as written), publish (`publish`, the manifest last, from
`manifest_of`: the counts this build saw). When the stream runs out first, shortfall.py says why.

First the inputs are resolved and hashed and the tokenizer loaded; when the build already in the
output directory is up to date for them (databuild/current.py), make returns without taking any lock
or writing anything. Otherwise it takes the output's lock (publish/lock.py), looks again (another
process may have just built it), and builds. Order of publication, all under the lock: parquet
written and fsynced under a partial name of this process's own; the source files hashed again (a
file changed while the build read it is refused); the old manifest removed; the parquet renamed to
its final name; the manifest written last. A build is complete exactly when its manifest exists: a
crash at any point leaves no manifest that describes a file it does not match.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from .config import BuildConfig
from .errors import BuildError
from .encode.encoder import Encoder
from .executors import Encoding, encoding_on, start_early
from .executors.fork_server import refuse_in_starting_child
from .rowfile.hashes import RowsHasher, SegmentsHasher
from .inputs.pins import check_unchanged, hashing_in_background
from .current import stale_reason
from .prepare import DEFAULT_WINDOW, Pinned, Prepared, pin, prepare, validation_split
from .publish.lock import exclusive
from .publish.record import BuildRecord
from .publish.manifest import build_manifest, builds_anyway, manifest_path, write_manifest
from .publish.manifest_read import read_manifest
from .pack.bfd import OverlongConversation
from .pack.rows import PackStats
from .pack.policy import pack
from .records.problems import OVERLONG, BadConversation, Problem, bad_conversation, buildable, refusal
from .sources.mixture import counting_by_source
from .sources.spill_folder import remove_stale_spill_folders
from .utils.early import import_pandas_early
from .utils.versions import read_versions_early
from .shortfall import ran_out
from .rowfile.write import WRITER_OPTIONS, partial_path, partials, publish, rows_per_group, write_rows

DEFAULT_BATCH = 256


@dataclass(frozen=True)
class BuildResult:
    parquet: Path
    manifest: Path
    data: dict[str, Any]  # the manifest's content
    seconds: float
    built: str | None = None  # why this make built it (no build yet, what differed, --force); None: up to date
    waited: float = 0.0  # seconds spent waiting for another process's lock on the output
    encoding: str | None = None  # how the encode step ran (executors.Encoding.summary); None: not built


def encoder_pins(encoder: Encoder) -> dict[str, Any]:
    """What the manifest records of the render and mask set-up: the template used, by hash, the
    declared ends of turn, and the tokenizer.json blocks switched off."""
    return {"chat_template": encoder.renderer.pins(), "end_of_turn": sorted(encoder.end_of_turn),
            "end_of_turn_from": encoder.end_of_turn_from, "tokenizer_json_switched_off": encoder.switched_off,
            "tokenizer_size": encoder.tokenizer_size}


def manifest_of(build: Pinned | Prepared, parquet_name: str, stats: PackStats | None = None,
                skipped: list[BadConversation] = (), hasher: RowsHasher | None = None,
                segments: SegmentsHasher | None = None, parquet: tuple[str, int] = ("", 0),
                validation: BuildResult | None = None, read: list[int] = ()) -> dict[str, Any]:
    """The manifest of `build`; without stats and hashes, the one it will write as far as it is known
    before its first row, whose pinned sections tell whether a build already there is up to date."""
    malformed = tuple(build.malformed.values()) if isinstance(build, Prepared) else ()
    duplicates = tuple(build.duplicates.values()) if isinstance(build, Prepared) else ()
    held_out = tuple(build.held_out.values()) if isinstance(build, Prepared) else ()
    record_counts = tuple(build.spill.counts_of(source.files) for source in build.inputs.sources) if isinstance(
        build, Prepared) else ()
    hasher, segments = hasher or RowsHasher(), segments or SegmentsHasher()
    writer = {**WRITER_OPTIONS, "row_group_rows": rows_per_group(build.config.row_tokens)}
    return build_manifest(BuildRecord(
        config=build.config, inputs=build.inputs, packing=build.packing, encoder_pins=encoder_pins(build.encoder),
        parquet_writer=writer, file_name=parquet_name, stats=stats or PackStats(), rows_sha256=hasher.hexdigest(),
        segments_sha256=segments.hexdigest(), row_digests=hasher.row_digests, skipped=tuple(skipped),
        malformed=malformed, parquet_sha256=parquet[0], parquet_bytes=parquet[1], record_counts=record_counts,
        duplicates=duplicates, held_out=held_out, validation=validation and validation_record(validation),
        read=tuple(read)))


def validation_record(result: BuildResult) -> dict[str, Any]:
    """What the training manifest records of its validation file (manifest `validation`)."""
    output = result.data["output"]
    return {"file": result.parquet.name, "manifest": result.manifest.name,
            **{key: output[key] for key in ("rows", "rows_sha256", "segments_sha256", "parquet_sha256",
                                            "parquet_bytes", "supervised_tokens")}}


def make(config: BuildConfig, out_dir: Path, *, force: bool = False, offline: bool = False, workers: int | None = None,
         batch_size: int = DEFAULT_BATCH, window: int = DEFAULT_WINDOW, spill_prefix: int | None = None,
         progress: bool | None = None, executor: str = "local", ray_address: str | None = None) -> BuildResult:
    """Build config into out_dir/NAME.parquet, unless the build there is up to date (`force`: build anyway).
    `workers` None: the machine's default (executors/cores.py)."""
    refuse_in_starting_child("databuild.build.make()")  # before the output's lock: an unguarded script's child
    if config.task != "sft":
        raise BuildError(f"{config.path}: task: {config.task}: built by databuild.preference.build.make_preference")
    started = time.perf_counter()
    final = Path(out_dir) / f"{config.name}.parquet"
    remove_stale_spill_folders()  # a killed build's, whether or not this one builds
    builds = builds_anyway(final, force)
    forking = builds and start_early(executor, workers)  # its workers' fork server imports while it pins
    if builds:
        import_pandas_early()
        read_versions_early()
    # Where it builds, the source pass runs while the tokenizer loads (prepare.pin, wait=False), in a child
    # of the fork server where there is one (executors/loader.py); the local workers start meanwhile and
    # wait for the encoder (encoding_on).
    pinned = pin(config, offline, wait=not builds, in_child=forking)
    split = validation_split(pinned) if config.validation is not None else None
    validation_final = final.with_name(f"{config.name}.validation.parquet")

    def stale() -> str | None:
        if not manifest_path(final).exists():  # no build to compare with: the pins are not needed yet
            return stale_reason(final, {})
        reason = stale_reason(final, manifest_of(pinned, final.name))
        if reason is None and split is not None:
            reason = stale_reason(validation_final, manifest_of(split.pinned, validation_final.name))
            reason = reason and f"its validation file: {reason}"
        return reason

    def build() -> BuildResult:
        # The encode workers start first, so that they start while the source is read; how many depends
        # on the machine (executors/cores.py).
        with encoding_on(executor, lambda: pinned.encoder, workers, ray_address) as encode:
            validation, exclude = None, None
            if split is not None:  # first, so that the training build knows the held-out conversations
                with prepare(split.pinned.config, offline, window, None, split.pinned, ahead=encode.ahead) as held:
                    validation = _make(held, validation_final, encode, batch_size, progress, started)
                    exclude = split.rows, split.ids, {key for key, _ in held.spill.keys.values()}
            with prepare(config, offline, window, spill_prefix, pinned, exclude, encode.ahead) as prepared:
                result = _make(prepared, final, encode, batch_size, progress, started, validation)
        return replace(result, encoding=encode.summary)

    return built_once(final, force, stale, lambda: current_build(final, started, read_manifest), build,
                      (validation_final,))


def built_once(final: Path, force: bool, stale: Callable[[], str | None], current: Callable[[], BuildResult],
               build: Callable[[], BuildResult], beside: tuple[Path, ...] = ()) -> BuildResult:
    """The build at `final`, made at most once however many makes run at once: `current()` when `stale()`
    finds it up to date (no lock taken, nothing written); else, under the output's lock, the partial files
    of a process gone removed (its and those of the files `beside` it that the build writes too), asked
    again (another process may have just built it), and `build()`."""
    if not force and stale() is None:
        return current()
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(final, f"make of {final.stem} into {final.parent}") as waited:
        # under the lock: whoever wrote them is gone
        for partial in [p for file in (final, *beside) for p in partials(file)]:
            partial.unlink(missing_ok=True)
        reason = "--force given" if force else stale()
        if reason is None:  # another process built it while this one waited
            return replace(current(), waited=waited)
        result = build()
    return replace(result, built=reason, waited=waited)


def current_build(final: Path, started: float, read: Callable[[Path], dict[str, Any]]) -> BuildResult:
    """The build already at `final`, its manifest read by `read`."""
    manifest_file = manifest_path(final)
    return BuildResult(final, manifest_file, read(manifest_file), time.perf_counter() - started)


def _make(prepared: Prepared, final: Path, encode: Encoding, batch_size: int, progress: bool | None,
          started: float, validation: BuildResult | None = None) -> BuildResult:
    config, inputs = prepared.config, prepared.inputs
    partial = partial_path(final)
    stats, skipped, hasher, segments = PackStats(), [], RowsHasher(), SegmentsHasher()
    read = [0] * len(inputs.sources)  # what the stream hands the packer, by source: the manifest's reads
    stream = encode(prepared.batches(batch_size, encode.by_reference, encode.processes))
    # The end-of-build check's hashing starts now, overlapping the encoding: the source is not read
    # again (unless the stream outruns the spill; then it is hashed again at the end).
    passes = prepared.spill.passes
    with hashing_in_background([f.path for f in inputs.source_files]) as rehash:
        with closing(stream) as tokenized:
            counted = counting_by_source(tokenized, inputs.selections[0], read)
            kept = buildable(counted, config.on_bad_conversation, list(inputs.source_files), skipped)
            rows = islice(pack(kept, prepared.packing, stats), config.rows)
            # disable=None: a bar on a terminal, nothing in logs and CI
            bar = tqdm(rows, total=config.rows, unit="row", desc=config.name,
                       disable=None if progress is None else not progress, leave=False)
            try:
                written = write_rows(bar, partial, config.row_tokens, hasher, segments)
            except OverlongConversation as exc:
                raise refusal(bad_conversation(list(inputs.source_files), exc.conversation.origin.index,
                                               exc.conversation.origin.id, Problem(OVERLONG, str(exc)))) from None
        try:
            if written.rows < (config.rows or 1):  # rows: all needs one row at least
                raise ran_out(written.rows, config.rows, stats, skipped)
            # a failed early hash (a file deleted meanwhile) is left to the check, which names it
            early = prepared.spill.passes == passes and rehash.exception() is None
            check_unchanged(inputs, rehash.result() if early else None)
            manifest = manifest_of(prepared, final.name, stats, skipped, hasher, segments,
                                   (written.sha256, written.bytes), validation, read)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return published(partial, final, manifest, started)


def published(partial: Path, final: Path, manifest: dict[str, Any], started: float) -> BuildResult:
    """The finished file renamed to its final name, its old manifest removed first and the new one written
    last: a build is complete exactly when its manifest exists."""
    manifest_file = manifest_path(final)
    manifest_file.unlink(missing_ok=True)
    publish(partial, final)
    write_manifest(manifest, manifest_file)
    return BuildResult(final, manifest_file, manifest, time.perf_counter() - started)
