"""Conversations in stream order: each source's files read through its format's adapter (formats/)
and checked, the mixture of the sources' selected rows, the seeded permutation, the spill to bucket files."""
