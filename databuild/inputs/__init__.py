"""Pinned inputs, by role: `hub` (huggingface_hub snapshots and the cache's own checks), `local`
(folders given by `dir`), `pins` (files hashed on threads, the tokenizer files and their pins, shard sets, the
source unchanged at the end), `resolve` (a config's inputs located and checked; `fetch`), and
`tokenizer` (the tokenizer of a row file, for show and report)."""
