"""Conversation ids held by more than one conversation: built (a published source may repeat an id, and a
mixture's sources may share one), counted in the manifest (counts.repeated_ids), and told apart in diff's
per-id comparison (`ID (#2)`), so that two conversations under one id are never compared as one."""

from __future__ import annotations

from databuild.build import make
from databuild.config import load_config
from databuild.rowfile.row_digests import Occurrences

from conftest import write_config
from source_folders import OK_ROWS, write_chat_source


def test_occurrences_tell_a_repeat_from_a_conversation_cut_across_rows():
    occurrences = Occurrences()
    rows = [["a", "b"], ["b", "c", "a"], ["a", ""], ["a"], ["b", ""]]
    assert [occurrences.keys(row) for row in rows] == [
        ["a", "b"], ["b", "c", "a (#2)"],  # b continues; a again, not at a row's start: the second a
        ["a (#2)", ""],  # the second a, cut across rows
        ["a (#3)"],  # after padding: a new conversation
        ["b (#2)", ""]]


def test_an_id_again_later_in_the_row_that_continues_it_is_a_repeat():
    """Only a row's first segment continues the conversation the row before ended with: the same id later in
    that row (an upsampling take's repeat, packed close by) is the next conversation under it."""
    occurrences = Occurrences()
    assert [occurrences.keys(row) for row in [["x", "a"], ["a", "b", "a"], ["a"]]] == [
        ["x", "a"], ["a", "b", "a (#2)"], ["a (#2)"]]


def repeated_source(tmp_path, changed: str = ""):
    """OK_ROWS with the ids of rows 1 and 2 set to row 0's, and row 2's answer changed by `changed`."""
    rows = [(OK_ROWS[0][0] if k in (1, 2) else cid, [(role, text + (changed if k == 2 and role == "assistant" else ""))
                                                      for role, text in turns]) for k, (cid, turns) in enumerate(OK_ROWS)]
    return write_chat_source(tmp_path, rows)


def test_repeated_ids_are_counted_and_diff_compares_each_conversation(tmp_path):
    import databuild

    builds = []
    for name, changed in (("a", ""), ("b", " and more")):
        config = load_config(write_config(tmp_path / f"{name}.yaml", source={"dir": str(repeated_source(
            tmp_path / name, changed))}, rows="all", on_bad_conversation="skip"))
        builds.append(make(config, tmp_path / f"out-{name}", progress=False))
    counts = builds[0].data["counts"]
    assert counts["repeated_ids"] == 2  # three conversations under one id: two after the first
    result = databuild.diff(builds[0].parquet, builds[1].parquet)
    changed = result.rows.conversations.changed
    first = OK_ROWS[0][0]
    # the one changed conversation under that id, told from the other two (which occurrence it is depends on
    # the permutation); compared as one, all three would have differed under the bare id
    assert len([c for c in changed if c.split(" (#")[0] == first]) == 1, changed
    in_rows = sum(entry["conversations"] for entry in counts["by_source"].values())  # each conversation once
    assert result.rows.conversations.total == in_rows, result.rows.conversations
