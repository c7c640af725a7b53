"""The tokenizer class `AutoTokenizer.from_pretrained` would load from a tokenizer folder, chosen without
importing what AutoTokenizer imports: its module imports transformers' model configuration
(`configuration_utils` -> `modeling_rope_utils`), which imports torch wherever torch is installed, as on
every training node (3.7 s of a build's start measured there, bench/README.md "The parallel floor").

The choice follows AutoTokenizer.from_pretrained of transformers 5.24.0 (the lock's;
models/auto/tokenization_auto.py) for the folders databuild pins, read step by step:
- no config.json in the folder (databuild fetches none: inputs/pins.py TOKENIZER_FILES): AutoConfig
  fails, and AutoTokenizer goes on with an empty `PreTrainedConfig` (model_type "", name_or_path ""),
  so none of the model-type rules apply and no hub id of MODEL_IDS_TO_TOKENIZERS_BACKEND matches;
- tokenizer_config.json names `tokenizer_class`, and has no `auto_map` (no remote code);
- a LlamaTokenizer(Fast) whose tokenizer.json is ByteLevel loads as TokenizersBackend;
- otherwise the class name, "Fast" taken off, looked up (`tokenizer_class_from_name`): a Bloom name and
  TokenizersBackend are TokenizersBackend; any other is the class transformers exports under that name
  (for each class in TOKENIZER_MAPPING_NAMES, the class of its model's module: tests/test_tokenizer_class.py
  checks every one), then the name with "Fast"; PythonBackend, or no class, is TokenizersBackend; a
  placeholder transformers exports for a class whose dependency is missing goes to AutoTokenizer.
Classes registered at run time (`AutoTokenizer.register`) are not looked up: a build registers none.
Any other folder, or another transformers, is loaded through AutoTokenizer itself (`None` here).
"""

from __future__ import annotations

import json
from pathlib import Path

RESOLVED_FOR = "5.24.0"  # the transformers whose AutoTokenizer resolution this follows
_BLOOM = ("BloomTokenizer", "BloomTokenizerFast")


def tokenizer_class(directory: Path):
    """The class AutoTokenizer.from_pretrained(directory) loads, with the keyword arguments it passes to
    that class's from_pretrained; None where this module does not follow AutoTokenizer (above)."""
    import transformers

    if transformers.__version__ != RESOLVED_FOR or (directory / "config.json").exists():
        return None
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing or unreadable: AutoTokenizer's own rules, and its own error
        return None
    name = config.get("tokenizer_class") if isinstance(config, dict) else None
    if not isinstance(name, str) or not name or "auto_map" in config:
        return None
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    # _from_auto and revision (a local folder's is kept as given: None) as AutoTokenizer passes them
    kwargs = {"_from_auto": True, "revision": None, "_commit_hash": config.get("_commit_hash")}
    if name.removesuffix("Fast") == "LlamaTokenizer" and \
            TokenizersBackend._tokenizer_json_has_byte_level(str(directory), local_files_only=True):
        return TokenizersBackend, kwargs
    name = name.removesuffix("Fast")
    found = _from_name(name)
    if found is None and not name.endswith("Fast"):
        found = _from_name(name + "Fast")
    if found is None or found.__name__ == "PythonBackend":
        found = TokenizersBackend
    if not _is_tokenizer_class(found):  # a placeholder for a missing dependency: AutoTokenizer says what
        return None
    return found, kwargs


def _is_tokenizer_class(found) -> bool:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    return isinstance(found, type) and issubclass(found, PreTrainedTokenizerBase)


def _from_name(name: str):
    """tokenizer_class_from_name(name) for a process that registered no class (above)."""
    import transformers
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    if name in _BLOOM or name == "TokenizersBackend":
        return TokenizersBackend
    found = getattr(transformers, name, None)
    if found is None and name.endswith("Fast"):
        return _from_name(name[:-4])
    return found
