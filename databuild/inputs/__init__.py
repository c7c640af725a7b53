"""Pinned inputs: the hub and its cache, local copies, and the tokenizer a build pins."""
