"""content_sha256 of an export: what its rows hold, independent of the parquet encoding, so that
`verify` can name the first row that differs (and a pyarrow upgrade that changes the file's bytes
does not change it).

Each row contributes its columns in schema order (a struct's fields in order, in place of the
struct): a list of integers as its length (<u4) then its values, little-endian, at the column's
width; a list of strings as its length (<u4) then each string; a string as its UTF-8 length (<u4)
then its bytes; a bool as one byte, 1 or 0. content_sha256 is the SHA-256 of all rows' bytes in
order; row_digests holds the first 16 hex digits of each row's own SHA-256.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from ..rowfile.hashes import ROW_DIGEST_HEX


def _u4(n: int) -> bytes:
    return int(n).to_bytes(4, "little")


def _text(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _u4(len(encoded)) + encoded


def _column_bytes(array: pa.Array) -> list[bytes]:
    """Each row's bytes for one column."""
    kind = array.type
    if pa.types.is_struct(kind):
        fields = [_column_bytes(array.field(i)) for i in range(kind.num_fields)]
        return [b"".join(parts) for parts in zip(*fields)]
    if pa.types.is_boolean(kind):
        return [b"\x01" if v else b"\x00" for v in array.to_pylist()]
    if pa.types.is_string(kind):
        return [_text(v) for v in array.to_pylist()]
    if pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
        return [_u4(len(v)) + b"".join(_text(s) for s in v) for v in array.to_pylist()]
    if pa.types.is_list(kind) and pa.types.is_integer(kind.value_type):
        offsets = array.offsets.to_numpy()
        values = array.flatten().to_numpy()
        values = values.astype(values.dtype.newbyteorder("<"), copy=False)
        return [_u4(b - a) + values[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]
    raise TypeError(f"no content bytes defined for a column of type {kind}")


def row_contents(table: pa.Table) -> list[bytes]:
    columns = [_column_bytes(table.column(i).combine_chunks()) for i in range(table.num_columns)]
    return [b"".join(parts) for parts in zip(*columns)] if columns else []


class ContentHasher:
    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.row_digests: list[str] = []

    def update(self, table: pa.Table) -> None:
        for row in row_contents(table):
            self._sha.update(row)
            self.row_digests.append(hashlib.sha256(row).hexdigest()[:ROW_DIGEST_HEX])

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

