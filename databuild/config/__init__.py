"""Build configs: one YAML file per build, loaded into a frozen, validated dataclass.

Every check names the key and the bad value, so a typo in a config fails at load time with a
message that points at it, never halfway through a build. What lives here: `schema` (the frozen
dataclasses), `checks` (validation primitives), `sources` (the inputs section: sources and
tokenizer), `load` (one YAML file, top-level keys and bounds), `find` (configs by file name or `name:`).
"""

from .find import available_configs, config_dirs, config_path, resolve_config
from .load import BOUNDS, PADDING_KEYS, TOP_KEYS, load_config, packing_keys
from .schema import (BAD_CONVERSATION_POLICIES, COMMIT_RE, SHA256_RE, BuildConfig, SourceSpec,
                     TokenizerSpec)

__all__ = ["BAD_CONVERSATION_POLICIES", "BOUNDS", "COMMIT_RE", "PADDING_KEYS", "SHA256_RE", "TOP_KEYS",
           "BuildConfig", "SourceSpec", "TokenizerSpec", "available_configs", "config_dirs", "config_path",
           "load_config", "packing_keys", "resolve_config"]
