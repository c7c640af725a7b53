"""The native row file, one owner: its schema and checks (`schema`), the one way to read it back
(`read`: the row-group iterator, RowBlock, StoredRow), its hashes (`hashes`) and per-row digests
(`row_digests`), its writer (`write`). compare, views, export and verify read through it.
The preference row file (task: preference) likewise: its schema and hashes (`preference`), its writer
(`preference_write`), its reading and checks (`preference_read`)."""
