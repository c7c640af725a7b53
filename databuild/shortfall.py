"""When a build's stream ends before its rows: where its conversations went, by what happened to
them, and the change that addresses the largest loss, in the one line that stops the build."""

from __future__ import annotations

from collections import Counter

from .errors import BuildError
from .pack.rows import PackStats
from .records.problems import DUPLICATE, NO_TRAINED_TURN, SKIPPED_KINDS, BadConversation, template_wide


def ran_out(written: int, rows: int | None, stats: PackStats, skipped: list[BadConversation]) -> BuildError:
    """The stream ended before `rows` rows (None, `rows: all`: before its first row): where its
    conversations went, by what happened to them, and the change that addresses the largest loss."""
    dropped = stats.overlong["dropped"]
    packed = stats.conversations_read - dropped
    kinds = Counter(bad.kind for bad in skipped)
    fates = [f"{packed} packed"] + [f"{n} {what}" for n, what in (
        (stats.overlong["truncated"], "of those cut to a row (overlong: truncate)"),
        (dropped, "dropped as longer than a row (overlong: drop)"),
        (stats.empty_renders, "rendered to no token")) if n]
    fates += [f"{kinds[kind]} skipped as {kind}" for kind in SKIPPED_KINDS if kinds[kind]]
    fates += [f"{kinds[DUPLICATE]} dropped as duplicates (dedup: exact)"] if kinds[DUPLICATE] else []
    fates += [f"{kinds[NO_TRAINED_TURN]} dropped with no turn to train (train_turns)"] if kinds[
        NO_TRAINED_TURN] else []
    total = stats.conversations_read + stats.empty_renders + len(skipped)
    wide = template_wide(skipped, written)
    if wide:
        fix = wide.removeprefix("; ")
    elif len(skipped) > max(packed, dropped):
        first = skipped[0]
        fix = f"most were skipped; the first, {first.message()}" + (f"; {first.problem.fix}" if first.problem.fix else "")
    elif dropped > packed:
        fix = "most were longer than a row: raise row_tokens, or set overlong: truncate to keep their first row"
    else:
        fix = ("give it more source (a larger take, another source)" if rows is None else
               "ask for fewer rows (rows in the config; rows: all keeps every row the sources give), or give it "
               "more source (a larger take, another source)")
    asked = "rows: all, and no row could be built" if rows is None else \
        f"{written} rows kept of the {rows} the config asks for"
    return BuildError(f"the source ran out: {asked}; of its {total} "
                      f"conversations, {', '.join(fates)}; {stats.rows_skipped_unsupervised} rows skipped without "
                      f"targets; {fix}")
