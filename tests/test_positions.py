"""encode/positions.py: a text's tokens placed without the tokenizer's character offsets (Split) answer
every question the masks ask exactly as the tokenizer's own offsets do (Offsets), character by
character and span by span, on texts made of added tokens (with lstrip/rstrip), whitespace that Python
and Rust count differently, characters byte fallback splits, and plain words; and a tokenizer whose
pieces may lose characters is never placed so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from databuild.encode.positions import AddedTokens, Offsets, Split

FIXTURES = Path(__file__).parent / "fixtures"


def legacy_llama() -> Tokenizer:
    """Phi-3's and Llama 2's kind: '▁' prepended to each piece and for each space, BPE with byte fallback,
    added tokens that take the whitespace after them (rstrip) or before them (lstrip)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for token in ["▁", "a", "b", "e", "n", "d", "▁a", "ab", "▁ab", "▁▁", "en", "end", "▁end"]:
        vocab[token] = len(vocab)
    merges = [("▁", "a"), ("a", "b"), ("▁", "ab"), ("▁", "▁"), ("e", "n"), ("en", "d"), ("▁", "end")]
    tokenizer = Tokenizer(models.BPE(vocab, merges, byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.add_special_tokens([AddedToken("<|end|>", rstrip=True, normalized=False),
                                  AddedToken("<|user|>", rstrip=True, normalized=False),
                                  AddedToken("<|left|>", lstrip=True, normalized=False),
                                  AddedToken("<|both|>", lstrip=True, rstrip=True, normalized=False),
                                  AddedToken("<|end|>x", normalized=False)])  # a longer match than <|end|>
    return tokenizer


def byte_level() -> Tokenizer:
    return Tokenizer.from_file(str(FIXTURES / "muse-tiny-tokenizer" / "tokenizer.json"))


PIECES = {
    "legacy": ["<|end|>", "<|user|>", "<|left|>", "<|both|>", "<|end|>x", " ", "  ", "\n", "\t", "a", "b", "ab",
               "end", "\u00e9", "\U0001F600", "\x1c", "\u00a0", "\u3000", "<|", "|>", "x"],
    "byte_level": ["<|im_start|>", "<|im_end|>", " ", "  ", "\n", "a", "b", "assistant", "Hello", "\u00e9",
                   "\U0001F600", "\x1c", "\u00a0", "<|", "|>"],
}
TOKENIZERS = {"legacy": legacy_llama, "byte_level": byte_level}


def both(tokenizer: Tokenizer, text: str) -> tuple[Offsets, callable]:
    encoding = tokenizer.encode(text, add_special_tokens=False)
    fast = tokenizer.encode_batch_fast([text], add_special_tokens=False)[0]
    assert fast.ids == encoding.ids
    added = AddedTokens.of(tokenizer)
    assert added.reason is None
    return Offsets(encoding, text, tokenizer), lambda: Split(fast, text, added, tokenizer)  # a fresh one a question: none answers from an earlier fall-back


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_split_answers_as_the_offsets_do(kind, data):
    tokenizer = TOKENIZERS[kind]()
    text = "".join(data.draw(st.lists(st.sampled_from(PIECES[kind]), max_size=9)))
    offsets, split = both(tokenizer, text)
    for char in range(len(text) + 1):
        want, got = offsets.holding(char), split().holding(char)
        assert (got is None) == (want is None), (text, char)
        if got is not None:  # its end is not known (None) only where the token starts at the character
            assert got[:2] == want[:2] and (got[2] == want[2] if got[2] is not None else want[1] == char), (text, char)
    for start in range(len(text) + 1):
        for end in range(start, len(text) + 1):
            assert split().run(start, end) == offsets.run(start, end), (text, start, end)
    for token, token_id in enumerate(offsets.ids):
        if AddedTokens.of(tokenizer).is_added[token_id]:
            assert split().token_end(token) == offsets.token_end(token), (text, token)


@pytest.mark.parametrize("text, placed", [
    ("<|user|>\nab<|end|>\n", True),  # every position from the ids alone, or a prefix of a piece
    ("ab<|left|>", True),
    ("<|end|> \x1c ab", True),  # \x1c is no whitespace to Rust: rstrip stops before it
])
def test_texts_placed_without_their_offsets(text, placed):
    """Where the added tokens place the tokens, no question asks the tokenizer for the text's offsets."""
    tokenizer = legacy_llama()
    offsets, split = both(tokenizer, text)
    answered = split()
    for char in range(len(text)):
        if char not in {o[0] for o in offsets.offsets} | {o[1] for o in offsets.offsets}:
            continue  # inside a token: a question answered from the offsets
        answered.holding(char)
    assert (answered._full is None) == placed


def test_matches_follow_tokenizers_strip_rules():
    """lstrip takes the whitespace back to the previous match, rstrip all the whitespace after it (Rust's
    \\s, not Python's), the longest content wins where two start at one place."""
    added = AddedTokens.of(legacy_llama())
    ids = added.ids
    assert added.matches("a <|end|> \t\x1cb") == [(2, 11, ids["<|end|>"])]
    assert added.matches("<|end|>  <|left|>") == [(0, 9, ids["<|end|>"]), (9, 17, ids["<|left|>"])]
    assert added.matches("a  <|left|>") == [(1, 11, ids["<|left|>"])]
    assert added.matches("<|end|>x") == [(0, 8, ids["<|end|>x"])]


@pytest.mark.parametrize("change, reason", [
    (lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Whitespace()), "pre_tokenizer Whitespace"),
    (lambda t: t.add_tokens([AddedToken("word", single_word=True)]), "single words"),
    (lambda t: t.add_tokens([AddedToken("norm", normalized=True)]), "after the normalizer"),
    (lambda t: setattr(t, "normalizer", normalizers.NFKC()), "normalizer NFKC"),
])
def test_tokenizers_that_may_lose_characters_are_encoded_with_offsets(change, reason):
    tokenizer = legacy_llama()
    assert AddedTokens.of(tokenizer).reason is None
    change(tokenizer)
    assert reason in AddedTokens.of(tokenizer).reason


def test_a_byte_level_vocabulary_missing_a_byte_is_encoded_with_offsets(tmp_path):
    """BPE drops a character it has no token for (no byte fallback, no unknown token)."""
    spec = json.loads(byte_level().to_str())
    spec["model"]["vocab"].pop("Ā")  # the byte 0x00's character
    assert "without a token" in AddedTokens.of(Tokenizer.from_str(json.dumps(spec))).reason
