"""Source stage: a split's files (parquet, JSON Lines, JSON), listed with their row counts and their schema checked,
and read batch by batch through its format's adapter (sources/formats) into the one conversation record
(SOURCE_SCHEMA). Each batch's rows are checked in sources/row_checks.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from .json_files import is_json, scan
from .json_rows import decode_json_columns, json_batches, json_messages, message_strings
from .layout import split_files

if TYPE_CHECKING:
    from .formats import Adapter

READ_BATCH_ROWS = 4096


@dataclass(frozen=True)
class SourceFile:
    path: Path
    name: str  # path relative to the source root, as recorded in the manifest
    rows: int
    first_index: int  # of its first row among the rows of every file of every source, in config order
    message_bytes: int  # the message and tools columns' uncompressed size (parquet), the decompressed size (JSON)
    source: str  # the config's repo of its source: names it in errors, stands in for a missing source column
    adapter: Adapter  # its source's format
    groups: tuple[int, ...] = ()  # rows of each part a pass may read alone: parquet row groups; a JSON file is one

    @property
    def is_json(self) -> bool:
        return is_json(self.name)


def source_files(root: Path, split: str, adapter: Adapter, source: str, first: int = 0,
                 paths: list[Path] | None = None) -> list[SourceFile]:
    """The split's files under root (sources/layout.py; `paths`: as split_files listed them already), in
    sorted name order, with their row counts, a parquet file's schema checked against the adapter's format
    (a JSON file's, batch by batch); their rows numbered from `first`."""
    files = []
    for path in split_files(root, split) if paths is None else paths:
        name = path.relative_to(root).as_posix()
        if is_json(name):
            try:
                rows, size = scan(path, name)
            except (OSError, pa.ArrowException) as exc:
                raise BuildError(f"{name}: not a readable JSON file ({exc})") from None
            files.append(SourceFile(path, name, rows, first, size, source, adapter, (rows,)))
            first += rows
            continue
        try:
            meta = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as exc:
            raise BuildError(f"{name}: not a readable parquet file ({exc})") from None
        if not json_messages(meta.schema_arrow, adapter.message_columns):  # messages in Json: checked as decoded
            problem = adapter.schema_problem(meta.schema_arrow)
            if problem is not None:
                raise BuildError(f"{name}: schema: {problem}")
        metadata = meta.metadata
        files.append(SourceFile(path, name, metadata.num_rows, first,
                                _message_bytes(metadata, (*adapter.message_columns, adapter.tools)), source, adapter,
                                tuple(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))))
        first += metadata.num_rows
    return files


def _message_bytes(metadata: pq.FileMetaData, columns: tuple[str, ...]) -> int:
    return sum(group.column(j).total_uncompressed_size
               for group in (metadata.row_group(g) for g in range(metadata.num_row_groups))
               for j in range(group.num_columns)
               if group.column(j).path_in_schema.split(".")[0] in columns)


def iter_batches(file: SourceFile, groups: range | None = None) -> Iterator[tuple[int, pa.RecordBatch, dict[int, str],
                                                                                Counter]]:
    """(index of the batch's first row, batch, rows the format refuses, keys with a null value the
    format dropped from structs by row: formats/structs.py), streaming, every batch in
    SOURCE_SCHEMA whatever the file's format and flavour of strings, lists and struct field order, so
    that rows of different files and sources can share a bucket file. `groups`: only those of the
    file's `groups` (all of them by default), so that parts of one file can be read at once."""
    groups = range(len(file.groups)) if groups is None else groups
    offset = file.first_index + sum(file.groups[:groups.start])
    try:
        for batch, problems, rebuilt in (json_batches(file.path, file.name, file.adapter, READ_BATCH_ROWS) if file.is_json else _parquet_batches(file, groups)):
            if rebuilt:  # built from JSON values: its schema is checked here, not from the file's
                problem = file.adapter.schema_problem(batch.schema)
                if problem is not None:
                    first = offset - file.first_index
                    raise BuildError(f"{file.source}: {file.name}: rows {first}-{first + batch.num_rows - 1}: "
                                     f"schema: {problem}")
            normalised, refused, dropped = file.adapter.normalise(batch, file, offset)
            yield offset, normalised, {**refused, **problems}, dropped
            offset += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"{file.source}: {file.name}: unreadable after row {offset - file.first_index}: "
                         f"{exc}") from None


def _parquet_batches(file: SourceFile, groups: range) -> Iterator[tuple[pa.RecordBatch, dict[int, str], bool]]:
    """(batch, rows refused, whether its messages were rebuilt from Json: sources/json_rows.py)."""
    parquet = pq.ParquetFile(file.path)
    columns = file.adapter.read_columns(parquet.schema_arrow)
    rebuilt = bool(json_messages(parquet.schema_arrow, file.adapter.message_columns))
    for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=groups, columns=columns):
        problems: dict[int, str] = {}
        if rebuilt:
            batch = decode_json_columns(batch, file.adapter.message_columns, message_strings(file.adapter), problems)
        yield batch, problems, rebuilt
