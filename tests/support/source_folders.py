"""Sources written for a test: parquet files laid out as a source folder (data/train-K-of-N.parquet, as
the hub names a split's files), from Arrow tables or from plain (id, turns) rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Conversations every template builds: (id, [(role, content), ...]), ids ok-7 to ok-39
OK_ROWS = [(f"ok-{i}", [("user", f"question {i} " * 30), ("assistant", f"answer {i} " * 30)]) for i in range(7, 40)]


def write_source(root: Path, tables: list[pa.Table]) -> Path:
    """A source folder at `root`, one parquet file per table; returns `root`."""
    (root / "data").mkdir(parents=True)
    for k, table in enumerate(tables):
        pq.write_table(table, root / "data" / f"train-{k:05d}-of-{len(tables):05d}.parquet")
    return root


def write_chat_source(tmp_path: Path, rows) -> Path:
    """`rows` (id, [(role, content), ...]) as the one file of a source at tmp_path/src, each row's
    source column "bad"; returns the folder. A row may be anything the schema holds (a null content, an
    unknown role, no message), for the checks to find."""
    kind = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    table = pa.table({"id": [r[0] for r in rows],
                      "messages": pa.array([[{"content": c, "role": role} for role, c in r[1]] for r in rows], kind),
                      "source": ["bad"] * len(rows)})
    return write_source(tmp_path / "src", [table])
