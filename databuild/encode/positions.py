"""Encode stage, where a text's tokens sit: the answers the masks ask (masks.spans_to_mask,
targets.turn_spans), from one of two encodings of the same ids.

`Offsets` asks the tokenizer's own encoding with character offsets (`encode_batch`). `Split` answers from
an encoding without them (`encode_batch_fast`: the same ids for ~25% less of the tokenizer's CPU, which
for its offsets maps every byte of a text to its character), placed by the tokenizer's own first cut:
the added tokens (the special tokens and the like) are found in the text before anything else, each is one
token whose characters are its match with the whitespace its lstrip/rstrip takes, and each piece of text
between two of them is tokenized alone. So a character of an added token, or the first of a piece, has its
token from the ids alone; one inside a piece, from the piece tokenized up to it, whose tokens must be the
piece's first (then the next token starts there). Whatever cannot be placed so (the ids' added tokens not
those the text's matches predict, a prefix whose tokens differ, a token that starts before the character
asked) is answered from the text's offsets, asked of the tokenizer then: the answers are Offsets' always.

`AddedTokens.reason` names what keeps a tokenizer from being placed so (a normalizer, pre-tokenizer or model
that may leave a character without a token, added tokens matched as single words or after a normalizer):
its texts are encoded with offsets.
"""

from __future__ import annotations

import json
import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel

# Rust regex's \s, which tokenizers' lstrip/rstrip take: Unicode White_Space (Python's str.isspace also
# counts U+001C-U+001F)
WHITE_SPACE = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*")
# What may run before the model without leaving a character of a piece without a token, or making a
# piece's tokens up to a character depend on what follows it: normalizers of one character at a time,
# pre-tokenizers that split without removing
_NORMALIZERS = {"Prepend", "Replace", "Lowercase", "Sequence"}
_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Split", "Digits", "Punctuation", "Sequence"}
_POST_PROCESSORS = {"TemplateProcessing", "ByteLevel", "Sequence"}


@dataclass(frozen=True)
class AddedTokens:
    """A tokenizer's added tokens as its first cut finds them (tokenizers' AddedVocabulary.find_matches,
    huggingface/tokenizers, tokenizers/src/tokenizer/added_vocabulary.rs): leftmost-longest matches of
    their contents in the text, an lstrip token taking the whitespace before it (back to the previous
    match) and an rstrip one the whitespace after it."""
    pattern: re.Pattern | None
    ids: dict[str, int]
    lstrip: frozenset[str]
    rstrip: frozenset[str]
    is_added: np.ndarray  # by token id
    reason: str | None  # why texts of this tokenizer are encoded with offsets; None: they need not be

    @classmethod
    def of(cls, backend) -> AddedTokens:
        tokens = {i: t for i, t in backend.get_added_tokens_decoder().items() if t.content}
        is_added = np.zeros(max([backend.get_vocab_size(with_added_tokens=True), *(i + 1 for i in tokens)]), bool)
        is_added[list(tokens)] = True
        contents = sorted({t.content for t in tokens.values()}, key=lambda c: (-len(c), c))  # longest first
        return cls(re.compile("|".join(map(re.escape, contents))) if contents else None,
                   {t.content: i for i, t in tokens.items()}, frozenset(t.content for t in tokens.values() if t.lstrip),
                   frozenset(t.content for t in tokens.values() if t.rstrip), is_added, _unplaceable(backend, tokens))

    def matches(self, text: str) -> list[tuple[int, int, int]] | None:
        """(start, end, id) of each added token in `text`, in order; None where an rstrip token's
        whitespace runs into the next match (tokenizers' cut then overlaps itself)."""
        out, taken = [], 0
        for match in self.pattern.finditer(text) if self.pattern else ():
            start, end = match.span()
            if start < taken:
                return None
            content = match.group()
            if content in self.lstrip:
                while start > taken and WHITE_SPACE.fullmatch(text, start - 1, start):
                    start -= 1
            if content in self.rstrip:
                end = WHITE_SPACE.match(text, end).end()
            out.append((start, end, self.ids[content]))
            taken = end
        return out


def _unplaceable(backend, tokens: dict) -> str | None:
    if any(t.single_word or t.normalized for t in tokens.values()):
        return "added tokens matched as single words or after the normalizer"
    # Each part as the tokenizer's JSON writes it (its pickled state), and the model's settings and vocabulary
    # asked one by one: not the whole JSON, whose vocabulary and merges took 0.1-0.15 s to write and parse (Phi-3),
    # on the way to every worker's first batch (the tokenizer's loader, executors/loader.py)
    parts = {part: getattr(backend, part) for part in ("normalizer", "pre_tokenizer", "post_processor")}
    parts = {part: None if found is None else json.loads(found.__getstate__()) for part, found in parts.items()}
    for part, allowed in (("normalizer", _NORMALIZERS), ("pre_tokenizer", _PRE_TOKENIZERS),
                          ("post_processor", _POST_PROCESSORS)):
        for step in _steps(parts[part]):
            if step["type"] not in allowed or step.get("behavior") == "Removed" or (
                    step["type"] == "Replace" and (len(step["pattern"].get("String", "")) != 1 or not step["content"])) \
                    or (part == "post_processor" and step.get("trim_offsets")):
                return f"its {part} {step['type']}"
    model = backend.model

    def in_vocab(token) -> bool:
        return token is not None and backend.token_to_id(token) is not None

    byte_level = any(s["type"] == "ByteLevel" for s in _steps(parts["pre_tokenizer"]))
    if not isinstance(model, BPE) or not (
            byte_level and all(in_vocab(c) for c in ByteLevel.alphabet())
            or model.byte_fallback and all(in_vocab(f"<0x{b:02X}>") for b in range(256))
            or in_vocab(model.unk_token)):
        return "its model may leave a character without a token"
    return None


def _steps(part: dict | None) -> list[dict]:
    if part is None:
        return []
    nested = part.get("normalizers") or part.get("pretokenizers") or part.get("processors")
    return [s for p in nested for s in _steps(p)] if part["type"] == "Sequence" else [part]


def token_ids(encoding) -> np.ndarray:
    """The encoding's ids as int32, through a C unsigned int array: tokenizers' ids are unsigned 32-bit,
    below 2**31 for any vocabulary (verify checks every id against the tokenizer's size, and one of 2**31 or
    more would read negative), and an unsigned array takes a list of ints 1.7x faster than a signed one,
    which checks each value's range (18 against 30 us for a 1,100-token conversation here; 2.5x faster than
    np.fromiter)."""
    return np.frombuffer(array("I", encoding.ids), dtype=np.int32)


def alone(backend, text: str) -> list[int]:
    """The ids of `text` tokenized by itself."""
    return backend.encode_batch_fast([text], add_special_tokens=False)[0].ids


class Offsets:
    """An encoding of `text` with the tokenizer's character offsets, asked directly."""
    __slots__ = ("encoding", "text", "backend")

    def __init__(self, encoding, text: str, backend):
        self.encoding, self.text, self.backend = encoding, text, backend

    @property
    def ids(self) -> list[int]:
        return self.encoding.ids

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return self.encoding.offsets

    def id_array(self) -> np.ndarray:
        return token_ids(self.encoding)

    def alone(self, start: int, end: int) -> list[int]:
        """The ids of the text's characters [start, end) tokenized by themselves."""
        return alone(self.backend, self.text[start:end])

    def holding(self, char: int) -> tuple[int, int, int | None] | None:
        """(the token holding character `char`, its first character, its end), or None."""
        token = self.encoding.char_to_token(char)
        return None if token is None else (token, *self.encoding.token_to_chars(token))

    def token_end(self, token: int) -> int:
        return self.encoding.token_to_chars(token)[1]

    def run(self, start: int, end: int) -> tuple[int, int] | None:
        """The first and last token of a span's targets (masks.spans_to_mask says which), or None.

        From the first token holding a character of the span, to the last that starts before `end` (a
        character that byte fallback splits into several tokens maps to the first of them, so the run is
        extended over the rest); an empty span: the token strictly around it. Asking the tokenizer's own
        char/token maps at the span's edges costs O(1) a span, where every token's offsets read back into
        Python would cost O(tokens)."""
        char_to_token, token_to_chars = self.encoding.char_to_token, self.encoding.token_to_chars
        if start == end:
            around = char_to_token(start)
            first = around if around is not None and token_to_chars(around)[0] < start else None
            last = first
        else:
            first = next((t for c in range(start, end) if (t := char_to_token(c)) is not None), None)
            last = None if first is None else \
                next(t for c in range(end - 1, start - 1, -1) if (t := char_to_token(c)) is not None)
        if first is None:
            return None
        n_tokens = len(self.encoding)
        while last + 1 < n_tokens and (chars := token_to_chars(last + 1)) is not None and chars[0] < end:
            last += 1
        return first, last


class Split:
    """An encoding without offsets, placed at its added tokens (the module says how); the Offsets of its
    text where that cannot answer. Answers as Offsets does, for the same text."""
    __slots__ = ("encoding", "text", "added", "backend", "_ids", "_starts", "_ends", "_at", "_full", "_prefix")

    def __init__(self, encoding, text: str, added: AddedTokens, backend):
        self.encoding, self.text, self.added, self.backend = encoding, text, added, backend
        self._ids = self._starts = self._full = None
        self._prefix = (0, 0, [])  # the last piece's prefix tokenized by holding: (start, end, ids)

    @property
    def ids(self) -> list[int]:
        return self.encoding.ids

    def id_array(self) -> np.ndarray:
        if self._ids is None:
            self._ids = token_ids(self.encoding)
        return self._ids

    @property
    def offsets(self) -> list[tuple[int, int]]:
        return self.full().offsets

    def alone(self, start: int, end: int) -> list[int]:
        """As Offsets.alone; a prefix holding tokenized already is not tokenized again (turn_spans' proof
        asks for the one its `holding` placed the turn's start by)."""
        cached_start, cached_end, ids = self._prefix
        return ids if (cached_start, cached_end) == (start, end) else alone(self.backend, self.text[start:end])

    def full(self) -> Offsets:
        """The text's encoding with offsets (its ids are this one's: tokenizers encodes both alike)."""
        if self._full is None:
            self._full = Offsets(self.backend.encode(self.text, add_special_tokens=False), self.text, self.backend)
        return self._full

    def _placed(self) -> bool:
        """Whether the added tokens the text's matches predict are the ids' own, in order (else: full)."""
        if self._starts is None and self._full is None:
            matches, ids = self.added.matches(self.text), self.id_array()
            at = np.flatnonzero(self.added.is_added[ids])
            if matches is None or len(matches) != len(at) or any(ids[k] != m[2] for k, m in zip(at.tolist(), matches)):
                self.full()
            else:
                self._starts, self._ends, self._at = [m[0] for m in matches], [m[1] for m in matches], at.tolist()
        return self._full is None

    def holding(self, char: int) -> tuple[int, int, int | None] | None:
        """As Offsets.holding; its end is None where the token starts at `char` (not known then, never asked)."""
        if not self._placed():
            return self._full.holding(char)
        if not 0 <= char < len(self.text):
            return None
        k = bisect_right(self._starts, char) - 1  # the last added token starting at or before char
        if k >= 0 and char < self._ends[k]:
            return self._at[k], self._starts[k], self._ends[k]
        piece_start, first = (self._ends[k], self._at[k] + 1) if k >= 0 else (0, 0)
        after = self._at[k + 1] if k + 1 < len(self._at) else len(self._ids)  # the piece's tokens: first..after-1
        if char > piece_start and first < after:
            prefix = alone(self.backend, self.text[piece_start:char])
            first += len(prefix)
            if not prefix or first >= after or self._ids[first - len(prefix):first].tolist() != prefix:
                return self.full().holding(char)
            self._prefix = (piece_start, char, prefix)
        elif first == after:  # a piece without a token: not under _unplaceable's tokenizers
            return self.full().holding(char)
        return first, char, None

    def token_end(self, token: int) -> int:
        if self._placed():
            k = bisect_right(self._at, token) - 1
            if k >= 0 and self._at[k] == token:
                return self._ends[k]
        return self.full().token_end(token)

    def run(self, start: int, end: int) -> tuple[int, int] | None:
        first = self.holding(start)
        if self._full is not None:
            return self._full.run(start, end)
        if first is None:  # past the text
            return None
        if start == end:  # the token strictly around it: only an added one, whole (the next starts after it)
            return (first[0], first[0]) if first[1] < start else None
        if end >= len(self.text):
            last = len(self._ids) - 1
        else:
            after = self.holding(end)
            if self._full is not None:
                return self._full.run(start, end)
            # the token holding `end` starts there (no token but an added one starts before a character it
            # holds, here) or is an added token around it, the run's last
            last = after[0] - 1 if after[1] == end else after[0]
        return (first[0], last) if last >= first[0] else None
