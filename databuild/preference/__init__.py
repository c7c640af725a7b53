"""Preference builds (`task: preference`): pairs for DPO, unpaired labelled completions for KTO, one
per row. What lives here: the length policy and the identical-pair drop (`length`) and the build's spine
(`build`: pin, read, encode, keep, write, publish). The other stages have their rooms' modules:
records/pair.py, encode/preference.py, executors/pairs.py, rowfile/preference.py, publish/preference.py
(the manifest), verification/preference.py."""
