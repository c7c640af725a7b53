"""The funnel: where every row of every source went, per source and in total (the manifest's
`counts.funnel`, make's summary, `hash` and the report's first chart).

Each source row ends in exactly one box, and so does each repeat an upsampling `take` adds (a take
above the source's rows): not taken (outside its `take`); not reached (taken, but the build had its
rows before the stream got there); dropped, by kind (malformed, template_error,
mask_error, and any kind the stream adds, then overlong and empty_render); or packed, and then
in a kept row, only in rows dropped without a target, or not written (packed after the last row:
the tail of concat's stream, the rest of bfd's last window). So, for each source and the total:

    rows = not_taken + taken          taken + repeats = not_reached + read
    read = sum(dropped) + packed      packed = in_kept_rows + in_rows_without_target + not_written
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..records.problems import OVERLONG, SKIPPED_KINDS

if TYPE_CHECKING:
    from .record import BuildRecord

EMPTY_RENDER = "empty_render"
BOXES = ("rows", "not_taken", "taken", "repeats", "not_reached", "read", "packed", "in_kept_rows",
         "in_rows_without_target", "not_written")  # the counts of an entry, besides `dropped` (by kind)


def _per_source(firsts: list[int], rows, sources: int) -> list[int]:
    """How many of `rows` (source rows, any order) each source holds."""
    from ..sources.mixture import source_of

    found = source_of(firsts, np.fromiter(rows, np.int64, len(rows)))
    return np.bincount(found, minlength=sources).tolist()


def _distinct(rows: np.ndarray) -> int:
    """How many distinct values `rows` holds: sorted, then counted where they change (np.unique took
    ~0.5-1 s for the 960,000 rows of a recipe's source, at every build's end)."""
    ordered = np.sort(rows)
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1 if len(ordered) else 0


def funnel(record: BuildRecord, read: list[int]) -> dict[str, Any]:
    """counts.funnel: {"total": box -> count, "sources": [the same per source, with its name]}; `read`
    is what the stream handed the packer, by source (BuildRecord.read); the rest by source from the rows
    the packer recorded (PackStats: no permutation drawn again)."""
    inputs, stats, skipped = record.inputs, record.stats, record.skipped
    firsts, _ = inputs.selections
    n = len(inputs.sources)
    kinds = list(SKIPPED_KINDS) + sorted({b.kind for b in skipped} - set(SKIPPED_KINDS)) + [OVERLONG, EMPTY_RENDER]
    dropped_rows = {kind: [b.index for b in skipped if b.kind == kind] for kind in kinds}
    # an expanded conversation some of whose samples were dropped as overlong is dropped only if none
    # of its samples reached a row (a conversation is in one box)
    dropped_rows[OVERLONG] = [row for position, row in stats.overlong_dropped_rows.items()
                              if position not in stats.kept_rows and position not in stats.skipped_rows]
    dropped_rows[EMPTY_RENDER] = stats.empty_render_rows
    dropped = {kind: _per_source(firsts, rows, n) for kind, rows in dropped_rows.items()}
    kept = _per_source(firsts, stats.kept_rows.values(), n)
    without_target = _per_source(firsts, [row for position, row in stats.skipped_rows.items()
                                          if position not in stats.kept_rows], n)
    sources = []
    for number, source in enumerate(inputs.sources):
        drops = {kind: dropped[kind][number] for kind in kinds}
        packed = read[number] - sum(drops.values())
        distinct = _distinct(source.selected)
        sources.append({"source": source.spec.name, "rows": source.rows, "not_taken": source.rows - distinct,
                        "taken": distinct, "repeats": len(source.selected) - distinct,
                        "not_reached": len(source.selected) - read[number],
                        "read": read[number], "dropped": drops, "packed": packed, "in_kept_rows": kept[number],
                        "in_rows_without_target": without_target[number],
                        "not_written": packed - kept[number] - without_target[number]})
    total = {key: {kind: sum(s[key][kind] for s in sources) for kind in kinds} if key == "dropped"
             else sum(s[key] for s in sources) for key in sources[0] if key != "source"}
    return {"total": total, "sources": sources}


def funnel_lines(found: dict[str, Any]) -> list[str]:
    """The funnel as text: one line per box, the total then each source's share when there are several."""
    total, sources = found["total"], found["sources"]
    shares = len(sources) > 1

    def line(label: str, key: str, value=None) -> str:
        figures = value if value is not None else total[key]
        text = f"  {label:<34}{figures:>10,}"
        if shares:
            parts = [(s["dropped"][key] if value is not None else s[key]) for s in sources]
            text += "  (" + " + ".join(f"{p:,}" for p in parts) + ")"
        return text

    lines = [line("rows in the sources", "rows"), line("not taken (take)", "not_taken"),
             line("taken", "taken")]
    if total.get("repeats"):
        lines.append(line("repeats added (take above 1)", "repeats"))
    lines += [line("not reached (enough rows before)", "not_reached"),
             line("read by the stream", "read")]
    lines += [line(f"dropped: {kind.replace('_', ' ')}", kind, n) for kind, n in total["dropped"].items() if n]
    lines += [line("packed", "packed"), line("  in kept rows", "in_kept_rows"),
              line("  only in rows without a target", "in_rows_without_target"),
              line("  packed, not written", "not_written")]
    return lines


# The record counts a user should hear of: what was built that the data did not say plainly.
DATA_NOTES = {
    "conversations_with_undeclared_tools": "conversations call tools and have no tools list (the prompt shows no "
                                           "tool; many datasets describe them in the system text)",
    "tool_calls_invalid_arguments": "tool calls kept with arguments that are not valid JSON "
                                    "(invalid_tool_arguments: keep)",
    "tool_calls_undeclared": "tool calls kept that call a function their tools list does not declare "
                             "(undeclared_tool_calls: keep)",
    "struct_null_keys_dropped": "keys whose value was null left out of parquet structs (a tool call's frame; "
                                "with struct_nulls: drop, its JSON values too)",
}


def data_notes(manifest: dict | None) -> list[str]:
    """One line per DATA_NOTES count that is not zero, summed over the sources (counts.sources[i].messages)."""
    sources = ((manifest or {}).get("counts") or {}).get("sources") or []
    totals = {key: sum((s.get("messages") or {}).get(key, 0) for s in sources) for key in DATA_NOTES}
    return [f"{totals[key]:,} {what} ({key})" for key, what in DATA_NOTES.items() if totals[key]]
