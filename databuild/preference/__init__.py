"""Preference builds (`task: preference`): pairs for DPO, unpaired labelled completions for KTO, one
per row. What lives here: the length policy and the identical-pair drop (`length`), the build's spine
(`build`: pin, read, encode, keep, write, publish) and its manifest (`manifest`). The encode stage is
encode/preference.py, the row file rowfile/preference.py, its checks verify/preference.py."""
