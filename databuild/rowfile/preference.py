"""The preference row file (task: preference): its schema and its hashes. Its writer is
preference_write.py, its reading and checks (one row group at a time) preference_read.py.

One row per pair: `id`, `prompt_input_ids`, then `chosen_input_ids`, `chosen_loss_mask`,
`rejected_input_ids`, `rejected_loss_mask` (a pair file), or `completion_input_ids`,
`completion_loss_mask`, `label` (an unpaired file). A completion's ids do not repeat the prompt (TRL's
tokenized convention: prompt_ids, chosen_ids): the prompt is stored once, so it is the same in both
sequences by construction, and a sequence is the prompt's ids followed by the completion's.

rows_sha256: SHA-256 over the rows in order, each row's bytes (`row_bytes`) being: the id as its UTF-8
length (<u4) and bytes; then each list column in the order above, as its length (<u4) and its values
(ids <i4, masks one byte each, 0 or 1); then, in an unpaired file, the label as one byte (0 or 1). A row
digest is the first 16 hex digits of the SHA-256 of the row's bytes. parquet_sha256: the file's bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..records.pair import COMPLETION_NAMES
from .hashes import ROW_DIGEST_HEX
from .schema import RowFormatError

FORMAT = {"paired": "databuild-preference/1", "unpaired": "databuild-unpaired/1"}
PAIRS_PER_GROUP = 512  # fixed: the same rows give the same bytes whatever the batch size


def columns(kind: str) -> dict[str, pa.DataType]:
    names = COMPLETION_NAMES[2 if kind == "paired" else 1]
    types = {"id": pa.string(), "prompt_input_ids": pa.list_(pa.int32())}
    for name in names:
        types |= {f"{name}_input_ids": pa.list_(pa.int32()), f"{name}_loss_mask": pa.list_(pa.int8())}
    return types if kind == "paired" else types | {"label": pa.bool_()}


def schema(kind: str) -> pa.Schema:
    metadata = {"databuild.format": FORMAT[kind],
                "databuild.completions": "a completion's input_ids do not repeat the prompt: a sequence is "
                                         "prompt_input_ids + <name>_input_ids; <name>_loss_mask[i] = 1 means "
                                         "<name>_input_ids[i] is a training target (token-aligned, not shifted)",
                "databuild.consumers": "see data/README.md, Preference builds"}
    return pa.schema([pa.field(n, t, nullable=False) for n, t in columns(kind).items()], metadata=metadata)


def kind_of(file_schema: pa.Schema, path: Path) -> str:
    """paired or unpaired, from the schema's format; a file of another format is refused."""
    found = (file_schema.metadata or {}).get(b"databuild.format", b"").decode("utf-8", "replace")
    kinds = {v: k for k, v in FORMAT.items()}
    if found not in kinds:
        raise RowFormatError(f"{path}: schema: format {found!r} is not a preference row file "
                             f"({' or '.join(FORMAT.values())})")
    kind = kinds[found]
    expected = columns(kind)
    if file_schema.names != list(expected):
        raise RowFormatError(f"{path}: schema: columns {file_schema.names}, expected {list(expected)}")
    for name, kind_type in expected.items():
        if not file_schema.field(name).type.equals(kind_type):
            raise RowFormatError(f"{path}: schema: column '{name}' is {file_schema.field(name).type}, "
                                 f"expected {kind_type}")
    return kind


def row_bytes(pair_id: str, prompt: np.ndarray, completions, masks, label: bool | None) -> bytes:
    """One row's contribution to rows_sha256 (module docstring): its lists are the prompt's ids, then each
    completion's ids and mask in turn."""
    lists = [prompt, *(x for pair in zip(completions, masks) for x in pair)]
    encoded = pair_id.encode("utf-8")
    parts = [np.array([len(encoded)], dtype="<u4").tobytes(), encoded]
    for values in lists:
        kind = "<i4" if values.dtype.itemsize == 4 else "u1"
        parts += [np.array([len(values)], dtype="<u4").tobytes(), np.ascontiguousarray(values, dtype=kind).tobytes()]
    if label is not None:
        parts.append(b"\x01" if label else b"\x00")
    return b"".join(parts)


@dataclass
class PairFigures:
    """What a preference file holds, counted as it is written or read: rows, tokens, targets, its hashes."""
    kind: str
    rows: int = 0
    prompt_tokens: int = 0
    tokens: dict[str, int] = field(default_factory=dict)  # completion name -> its tokens, the prompt's not counted
    supervised_tokens: dict[str, int] = field(default_factory=dict)  # completion name -> its targets
    labels_true: int = 0  # unpaired: rows labelled desirable
    longest_prompt: int = 0
    longest_sequence: int = 0  # the prompt and its longer completion
    row_digests: list[str] = field(default_factory=list)
    _sha: object = field(default_factory=hashlib.sha256, repr=False)

    def add(self, pair_id: str, prompt: np.ndarray, completions, masks, label: bool | None) -> None:
        data = row_bytes(pair_id, prompt, completions, masks, label if self.kind == "unpaired" else None)
        self._sha.update(data)
        self.row_digests.append(hashlib.sha256(data).hexdigest()[:ROW_DIGEST_HEX])
        self.rows += 1
        self.prompt_tokens += len(prompt)
        for name, ids, mask in zip(COMPLETION_NAMES[len(completions)], completions, masks):
            self.tokens[name] = self.tokens.get(name, 0) + len(ids)
            self.supervised_tokens[name] = self.supervised_tokens.get(name, 0) + int(np.count_nonzero(mask))
        self.labels_true += bool(label)
        self.longest_prompt = max(self.longest_prompt, len(prompt))
        self.longest_sequence = max(self.longest_sequence, len(prompt) + max(len(c) for c in completions))

    @property
    def rows_sha256(self) -> str:
        return self._sha.hexdigest()

    def record(self) -> dict:
        """As the manifest's output section holds them (data/README: Preference builds)."""
        names = COMPLETION_NAMES[2 if self.kind == "paired" else 1]
        out = {"kind": self.kind, "rows": self.rows, "rows_sha256": self.rows_sha256,
               "prompt_tokens": self.prompt_tokens, **{f"{n}_tokens": self.tokens.get(n, 0) for n in names},
               **{f"{n}_supervised_tokens": self.supervised_tokens.get(n, 0) for n in names},
               "longest_prompt": self.longest_prompt, "longest_sequence": self.longest_sequence}
        return out | ({"labels_true": self.labels_true} if self.kind == "unpaired" else {})
