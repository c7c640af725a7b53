"""Source files in JSON Lines and JSON (`.jsonl`, `.json`, each also `.gz` or `.zst`), read
streaming: a chunk of the (decompressed) file at a time, a row parsed at a time by Python's json
with sources/record.parse_json (exact values, a repeated key refused), never a table schema inferred.

JSON Lines: every line is a row (a line holding a JSON object), the last line's newline optional; a
line that is blank or not a JSON object is a malformed row, named by its line. A `.json` file whose
first character (after whitespace) is `[` is one array of rows, parsed element by element (an
element may span lines); any other `.json` file is JSON Lines, as `datasets` reads it. Decompression
is pyarrow's (gzip, zstd), chosen by the file's name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from ..errors import BuildError
from ..utils import json_depth
from .record import json_decoder, parse_json

JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")
CHUNK = 1 << 20
WHITESPACE = b" \t\r\n"


class Unparsed:
    """A row that is not one: why (the problem names its line)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def is_json(name: str) -> bool:
    return name.endswith(JSON_SUFFIXES)


def _chunks(path: Path) -> Iterator[bytes]:
    with pa.input_stream(str(path), compression="detect") as stream:
        while chunk := stream.read(CHUNK):
            yield chunk


def _is_array(path: Path) -> bool:
    if ".jsonl" in path.name:
        return False
    for chunk in _chunks(path):
        stripped = chunk.lstrip(WHITESPACE)
        if stripped:
            return stripped[:1] == b"["
    return False


def _lines(path: Path) -> Iterator[bytes]:
    """The file's lines without their newline; no line after a final newline."""
    tail = b""
    for chunk in _chunks(path):
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        yield from lines
    if tail:
        yield tail


def _row(line: bytes, number: int) -> Any:
    if not line.strip(WHITESPACE):
        return Unparsed(f"line {number} is blank, not a JSON object")
    try:
        return parse_json(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Unparsed(f"line {number} is not valid UTF-8 (byte {exc.start})")
    except ValueError as exc:  # json.JSONDecodeError included
        return Unparsed(f"line {number} is not JSON ({exc})")


class _Text:
    """A file's text, decoded a chunk at a time: `text[at:]` is what is not yet consumed, `line` the
    line `at` is on."""

    def __init__(self, path: Path, name: str):
        self.chunks, self.name = _chunks(path), name
        self.text, self.at, self.line, self.pending, self.ended = "", 0, 1, b"", False

    def more(self) -> bool:
        """Read the next chunk onto the text (dropping what is consumed); False at the end."""
        chunk = next(self.chunks, None)
        if chunk is None:
            self.ended = True
            return False
        data, self.pending = self.pending + chunk, b""
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(data) - 3:  # not a character cut at the chunk's end
                raise self.fail("not valid UTF-8") from None
            decoded, self.pending = data[:exc.start].decode("utf-8"), data[exc.start:]
        self.text, self.at = self.text[self.at:] + decoded, 0
        return True

    def skip_whitespace(self) -> str:
        """The next character that is not whitespace ('' at the end), not consumed."""
        while True:
            while self.at < len(self.text) and self.text[self.at] in " \t\r\n":
                self.line += self.text[self.at] == "\n"
                self.at += 1
            if self.at < len(self.text) or not self.more():
                return self.text[self.at:self.at + 1]

    def value(self, decoder: json.JSONDecoder) -> tuple[Any, int]:
        """(the value at `at`, where it ends), reading on while it is cut at the text's end."""
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.at)
            except json.JSONDecodeError as exc:
                if self.more():
                    continue
                raise self.fail(f"not JSON ({exc.msg}, line {self.line + self.text.count(chr(10), self.at, exc.pos)})") \
                    from None
            if end < len(self.text) or not self.more():  # a number may go on in the next chunk
                return value, end

    def consume(self, end: int) -> None:
        self.line += self.text.count("\n", self.at, end)
        self.at = end

    def fail(self, what: str) -> BuildError:
        return BuildError(f"{self.name}: line {self.line}: {what}")


def _elements(path: Path, name: str) -> Iterator[tuple[int, Any]]:
    """(line where it starts, value or Unparsed) of each element of the file's top-level array, with
    bounded memory (the element being parsed and a chunk). A syntax error refuses the file (past it,
    where the next element starts is unknown); a value parse_json refuses (a repeated key, NaN, a
    float beyond float64) is a malformed row."""
    decoder, plain, text = json_decoder(), json.JSONDecoder(), _Text(path, name)
    if text.skip_whitespace() != "[":
        raise text.fail("not a JSON array of rows")
    text.consume(text.at + 1)
    if text.skip_whitespace() != "]":
        while True:
            line = text.line
            try:
                value, end = text.value(decoder)
                json_depth.check_depth(value)
            except ValueError as exc:  # parse_json's refusals, not syntax: the element's end from a plain parse
                value, end = Unparsed(f"line {line}: {exc}"), text.value(plain)[1]
            except RecursionError:
                raise text.fail(f"not JSON ({json_depth.TooDeep()})") from None
            text.consume(end)
            yield line, value
            found = text.skip_whitespace()
            if found == "]":
                break
            if found != ",":
                raise text.fail(f"expected ',' or ']' after a row, found {found!r}" if found else "the array does "
                                "not close")
            text.consume(text.at + 1)
            text.skip_whitespace()
    text.consume(text.at + 1)
    if text.skip_whitespace():
        raise text.fail("text after the array's end")


def scan(path: Path, name: str) -> tuple[int, int]:
    """(rows, bytes decompressed) of a JSON file."""
    if _is_array(path):
        size = sum(len(c) for c in _chunks(path))
        return sum(1 for _ in _elements(path, name)), size
    rows = size = 0
    last = b"\n"
    for chunk in _chunks(path):
        rows += chunk.count(b"\n")
        size += len(chunk)
        last = chunk[-1:]
    return rows + (last != b"\n"), size


def rows(path: Path, name: str) -> Iterator[tuple[int, Any]]:
    """(line, value or Unparsed) of each row, in file order."""
    if _is_array(path):
        yield from _elements(path, name)
        return
    for number, line in enumerate(_lines(path), 1):
        yield number, _row(line, number)
