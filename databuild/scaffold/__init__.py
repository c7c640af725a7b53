"""`databuild init`: a config written from its inputs, that `make` builds as it stands.

`locate` finds each input (a local folder, or a hub repo at a revision resolved to its commit, from
the hub cache when offline) and hashes its files; `detect` reads a source's format off its schema;
`template` inspects the chat template for what a build must pin (the clock, named templates, ends
of turn); `options` holds what init is asked and its checks; `compose` writes the YAML with a comment on
each key; `write` runs them, checks the YAML by loading it into the one schema (databuild/config) before
it is given its name, and says what init decided. Values it cannot decide are asked for,
naming the option to pass; nothing is guessed.
"""

from .write import InitOptions, init_config

__all__ = ["InitOptions", "init_config"]
