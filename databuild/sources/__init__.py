"""Conversations in stream order: each source's files (parquet, JSON Lines, JSON: layout, json_files,
json_rows) read through its format's adapter (formats/)
into the one record and checked, the mixture of the sources' selected rows, the seeded permutation,
the spill to bucket files and its folder in $TMPDIR."""
