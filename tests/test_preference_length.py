"""The length policy of a preference build: identical completions, a prompt over prompt_tokens (dropped or cut
from the left), a sequence over sequence_tokens, each dropped with its kind; a cut counted with its tokens."""

import numpy as np

from databuild.preference.length import Lengths, kept
from databuild.records.origin import Origin
from databuild.records.pair import TokenizedPair

I32, I8 = np.int32, np.int8


def made(prompt: int, chosen: int, rejected: int, same: bool = False) -> TokenizedPair:
    ids = lambda n, base: np.arange(base, base + n, dtype=I32)
    rejected_ids = ids(chosen, 100) if same else ids(rejected, 200)
    return TokenizedPair(Origin(0, 0, "p", "s"), ids(prompt, 1), (ids(chosen, 100), rejected_ids),
                         (np.ones(chosen, I8), np.ones(len(rejected_ids), I8)))


def test_within_the_lengths_the_pair_is_kept_as_it_is():
    pair = made(4, 3, 2)
    assert kept(pair, Lengths(4, 7, "drop")) is pair


def test_a_long_prompt_is_dropped_or_cut_from_the_left():
    pair = made(6, 3, 2)
    dropped = kept(pair, Lengths(4, 10, "drop"))
    assert dropped.problem.kind == "prompt_too_long" and "6 tokens, over prompt_tokens (4)" in dropped.problem.reason
    cut = kept(pair, Lengths(4, 10, "cut_left"))
    assert cut.problem is None and cut.prompt_ids.tolist() == [3, 4, 5, 6] and cut.prompt_tokens_cut == 2
    assert cut.completion_ids == pair.completion_ids  # a completion is never cut


def test_a_long_sequence_is_dropped_after_the_prompt_is_cut():
    assert kept(made(6, 3, 2), Lengths(4, 7, "cut_left")).problem is None  # 4 + 3 fits once cut
    over = kept(made(6, 3, 5), Lengths(4, 8, "cut_left"))
    assert over.problem.kind == "sequence_too_long" and "rejected (5)" in over.problem.reason
    assert not over.completion_ids and over.prompt_tokens_cut == 0  # a dropped pair counts no cut


def test_identical_completions_are_dropped_first():
    same = kept(made(9, 3, 3, same=True), Lengths(4, 8, "drop"))
    assert same.problem.kind == "identical_completions"
    differs_in_mask = made(2, 3, 3, same=True)
    differs_in_mask = TokenizedPair(differs_in_mask.origin, differs_in_mask.prompt_ids, differs_in_mask.completion_ids,
                                    (np.ones(3, I8), np.array([0, 1, 1], I8)))
    assert kept(differs_in_mask, Lengths(4, 8, "drop")).problem is None


def test_an_unpaired_completion_is_never_identical():
    pair = made(2, 3, 0)
    one = TokenizedPair(pair.origin, pair.prompt_ids, pair.completion_ids[:1], pair.completion_masks[:1], True)
    assert kept(one, Lengths(4, 8, "drop")) is one
