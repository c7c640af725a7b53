"""The `bfd` packing policy on hand-made token streams: written-out rows, the invariants the issue
asks for, and agreement with tests/support/bfd_reference.py (the README's rule, re-implemented without databuild)."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bfd_reference import reference_bfd
from databuild.records.conversation import TokenizedConversation
from databuild.records.origin import Origin
from databuild.errors import BuildError
from databuild.pack.bfd import OverlongConversation, best_fit_decreasing
from databuild.pack.rows import Packing, PackStats
from databuild.pack.policy import pack

SEP, PAD = 99, 98


def conv(position: int, ids: list[int], mask: list[int] | None = None, source: str = "s") -> TokenizedConversation:
    mask = [1] * len(ids) if mask is None else mask
    return TokenizedConversation(Origin(position, position, f"c{position}", source), np.array(ids, np.int32),
                                 np.array(mask, np.int8))


def bfd(row_tokens: int, window: int = 1000, overlong: str = "drop") -> Packing:
    return Packing("bfd", row_tokens, "</s>", SEP, "<pad>", PAD, "config", window, overlong)


def packed(conversations, packing, limit=None):
    stats = PackStats()
    rows = list(islice(pack(conversations, packing, stats), limit))
    return [{"input_ids": r.input_ids.tolist(), "loss_mask": r.loss_mask.tolist(),
             "seq_start_id": r.seq_start_id.tolist(), "conversation_ids": list(r.conversation_ids)} for r in rows], stats


def test_trl_docstring_example():
    """TRL's pack_dataset docstring (strategy="bfd", seq_length=4) packs lengths 5, 2, 3, 1 into rows
    [c0 cut to 4], [c2, c3], [c1]; here each item carries its separator, so lengths 4, 1, 2 (+1) and a
    conversation that ends with the separator itself (1) give the same."""
    rows, stats = packed([conv(0, [1, 2, 3, 4]), conv(1, [6]), conv(2, [8, 9]), conv(3, [SEP], [0])],
                         bfd(4, overlong="truncate"))
    assert [r["input_ids"] for r in rows] == [[1, 2, 3, 4], [8, 9, SEP, SEP], [6, SEP, PAD, PAD]]
    assert [r["conversation_ids"] for r in rows] == [["c0"], ["c2", "c3"], ["c1", ""]]
    assert [r["seq_start_id"] for r in rows] == [[0], [0, 3], [0, 2]]
    assert [r["loss_mask"] for r in rows] == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]]
    assert stats.overlong == {"truncated": 1} and stats.padding_tokens == 2 and stats.separators_inserted == 3


def test_best_fit_prefers_the_tightest_row_then_the_one_that_had_that_space_longest():
    # Rows of 9. Item 2 (6) opens row 0, free 3; item 0 (4) opens row 1, free 5; item 3 (4) goes to row 1
    # (free 5 is the only fit), free 1; item 4 (2) goes to row 0 (free 3), free 1. Item 1 (1): both rows
    # have free 1, row 1 since before row 0, so row 1 (TRL's order; "lowest row first" would say row 0).
    assert best_fit_decreasing([4, 1, 6, 4, 2], 9) == [[2, 4], [0, 3, 1]]
    # Rows of 7: 5 opens row 0 (free 2), 3 and 3 fill row 1 to free 1; item 0 (1) goes to the tightest,
    # row 1, where first-fit would put it in row 0.
    assert best_fit_decreasing([1, 3, 5, 3], 7) == [[2], [1, 3, 0]]


def test_a_render_ending_with_the_separator_supplies_it_and_keeps_its_mask():
    rows, stats = packed([conv(0, [1, SEP], [1, 1]), conv(1, [2, 3], [0, 1])], bfd(8))
    assert rows[0]["input_ids"] == [2, 3, SEP, 1, SEP, PAD, PAD, PAD]
    assert rows[0]["loss_mask"] == [0, 1, 0, 1, 1, 0, 0, 0]
    assert stats.separators_inserted == 1


@pytest.mark.parametrize("overlong, ids, counted", [("drop", [["c1"]], {"dropped": 1}),
                                                     ("truncate", [["c0"], ["c1"]], {"truncated": 1})])
def test_overlong_conversations_are_dropped_or_truncated_and_counted(overlong, ids, counted):
    rows, stats = packed([conv(0, list(range(10))), conv(1, [1, 2])], bfd(4, overlong=overlong))
    assert [[i for i in r["conversation_ids"] if i] for r in rows] == ids
    assert stats.overlong == counted
    if overlong == "truncate":
        assert rows[0]["input_ids"] == [0, 1, 2, 3]  # the beginning; the rest and the separator are lost


def test_a_conversation_that_exactly_fills_a_row_with_its_separator_is_not_overlong():
    rows, stats = packed([conv(0, [1, 2, 3])], bfd(4))
    assert rows[0]["input_ids"] == [1, 2, 3, SEP] and rows[0]["conversation_ids"] == ["c0"] and not stats.overlong


def test_overlong_error_names_the_conversation():
    with pytest.raises(OverlongConversation) as caught:
        packed([conv(0, [1]), conv(1, list(range(9)))], bfd(4, overlong="error"))
    assert caught.value.conversation.origin.id == "c1" and isinstance(caught.value, BuildError)
    assert "10 tokens with its separator, longer than a row (4)" in str(caught.value)


def test_rows_without_a_target_are_skipped_and_counted():
    rows, stats = packed([conv(0, [1, 2, 3], [0, 0, 0]), conv(1, [4], [1])], bfd(4))
    assert [r["conversation_ids"] for r in rows] == [["c1", ""]]
    assert stats.rows_skipped_unsupervised == 1 and stats.rows_kept == 1 and stats.padding_tokens == 2


def test_windows_are_packed_apart_in_stream_order():
    conversations = [conv(i, [i] * (i % 3 + 1)) for i in range(6)]
    rows, _ = packed(conversations, bfd(8, window=3))  # items of 2, 3, 4 tokens in each window
    assert [r["conversation_ids"] for r in rows] == [["c2", "c1", ""], ["c0", ""], ["c5", "c4", ""], ["c3", ""]]
    one_window, _ = packed(conversations, bfd(8, window=6))
    assert [r["conversation_ids"] for r in one_window] == [["c2", "c5"], ["c1", "c4", "c0"], ["c3", ""]]


def test_counts_add_up():
    conversations = [conv(i, list(range(i % 7 + 1)), [i % 2] * (i % 7 + 1), source=f"s{i % 3}") for i in range(60)]
    rows, stats = packed(conversations, bfd(8, window=16), limit=10)
    assert stats.rows_kept == len(rows) == 10
    assert stats.tokens_kept == 80 == sum(stats.tokens_by_source.values()) + stats.padding_tokens
    assert stats.padding_tokens == sum(r["conversation_ids"].count("") and 8 - r["seq_start_id"][-1] for r in rows)
    assert sum(stats.conversations_by_source.values()) == len({c for r in rows for c in r["conversation_ids"]} - {""})
    assert stats.continued_rows == []


lengths = st.lists(st.integers(0, 20), min_size=0, max_size=60)


@settings(max_examples=300, deadline=None)
@given(lengths=lengths, row_tokens=st.integers(1, 24), window=st.integers(1, 70),
       overlong=st.sampled_from(["drop", "truncate"]), seed=st.integers(0, 2**16))
def test_same_rows_as_the_reference_and_the_issue_invariants(lengths, row_tokens, window, overlong, seed):
    rng = np.random.default_rng(seed)
    conversations = []
    for i, n in enumerate(lengths):
        ids = rng.integers(0, 5, n).tolist()
        if n and rng.random() < 0.2:
            ids[-1] = SEP  # a render that brings its own separator
        conversations.append(conv(i, ids, rng.integers(0, 2, n).tolist()))
    rows, stats = packed(conversations, bfd(row_tokens, window, overlong))
    plain = [(c.origin.id, c.input_ids.tolist(), c.loss_mask.tolist()) for c in conversations]
    expected, counts = reference_bfd(plain, row_tokens, SEP, PAD, window, overlong)
    assert rows == expected
    assert (stats.rows_skipped_unsupervised, stats.overlong["dropped"], stats.overlong["truncated"],
            stats.padding_tokens) == (counts["no_supervised_token"], counts["dropped"], counts["truncated"],
                                      counts["padding_tokens"])
    owners = [c for r in rows for c in r["conversation_ids"] if c]
    assert len(owners) == len(set(owners))  # no conversation in two rows
    for r in rows:
        assert len(r["input_ids"]) == len(r["loss_mask"]) == row_tokens
        if r["conversation_ids"][-1] == "":
            start = r["seq_start_id"][-1]
            assert set(r["input_ids"][start:]) == {PAD} and not any(r["loss_mask"][start:])
        assert "" not in r["conversation_ids"][:-1]
