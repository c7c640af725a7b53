"""Preference sources (issue 34): the rows of the preference formats (sources/formats/preference.py)
read back as PreferenceRecords (`split`: the marks, the implicit prompt and its refusals) in permutation
order through SFT's spill (`stream`: preference_stream, what the encode stage reads)."""

from .split import implicit_split, preference_record
from .stream import PreferenceStream, preference_sources, preference_stream

__all__ = ["PreferenceStream", "implicit_split", "preference_record", "preference_sources", "preference_stream"]
