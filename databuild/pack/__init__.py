"""Packing: tokenized conversations into fixed-length rows."""
