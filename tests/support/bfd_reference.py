"""The `bfd` packing rule of data/README.md re-implemented from its text alone: plain Python, no
databuild code, no cleverness (a linear scan for the best row), so that it can be read against the
README line by line. Conversations are (id, token ids, loss mask) in stream order."""

from __future__ import annotations


def reference_bfd(conversations, row_tokens, separator, pad, window, overlong="drop"):
    """(rows, counts): rows as dicts of the four columns, in emission order, rows without a target
    left out; counts of skipped rows, dropped and truncated conversations and padding tokens."""
    counts = {"no_supervised_token": 0, "dropped": 0, "truncated": 0, "padding_tokens": 0}
    rows = []
    conversations = [c for c in conversations if c[1]]  # a conversation rendered to no token is left out
    for low in range(0, len(conversations), window):
        items = []
        for cid, ids, mask in conversations[low:low + window]:
            if ids[-1] != separator:
                ids, mask = ids + [separator], mask + [0]
            if len(ids) > row_tokens:
                if overlong == "error":
                    raise ValueError(cid)
                if overlong == "drop":
                    counts["dropped"] += 1
                    continue
                counts["truncated"] += 1
                ids, mask = ids[:row_tokens], mask[:row_tokens]
            items.append((cid, ids, mask))
        rows += _pack_window(items, row_tokens, pad, counts)
    return rows, counts


def _pack_window(items, row_tokens, pad, counts):
    # longest first; Python's sort is stable, so equal lengths stay in stream order
    ordered = sorted(items, key=lambda item: len(item[1]), reverse=True)
    bins = []  # each: {"items": [...], "free": int, "since": when it got its current free space}
    clock = 0
    for item in ordered:
        fitting = [b for b in bins if b["free"] >= len(item[1])]
        if fitting:
            chosen = min(fitting, key=lambda b: (b["free"], b["since"]))
        else:
            chosen = {"items": [], "free": row_tokens, "since": clock}
            bins.append(chosen)
        chosen["items"].append(item)
        chosen["free"] -= len(item[1])
        clock += 1
        chosen["since"] = clock
    rows = []
    for b in bins:
        ids, mask, starts, owners = [], [], [], []
        for cid, item_ids, item_mask in b["items"]:
            starts.append(len(ids))
            owners.append(cid)
            ids += item_ids
            mask += item_mask
        if b["free"]:
            starts.append(len(ids))
            owners.append("")
            ids += [pad] * b["free"]
            mask += [0] * b["free"]
        if not any(mask):
            counts["no_supervised_token"] += 1
            continue
        counts["padding_tokens"] += b["free"]
        rows.append({"input_ids": ids, "loss_mask": mask, "seq_start_id": starts, "conversation_ids": owners})
    return rows
