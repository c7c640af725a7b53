"""Conversations in stream order: source files read and checked, the seeded permutation, the spill to bucket files."""
