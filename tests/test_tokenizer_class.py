"""load_tokenizer chooses the class AutoTokenizer chooses, without AutoTokenizer's imports (torch where it
is installed: databuild/encode/tokenizer_class.py), and the tokenizer it loads encodes as AutoTokenizer's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, PHI3, TOKENIZER_DIR

from databuild.encode.render import load_tokenizer
from databuild.encode.tokenizer_class import _from_name, tokenizer_class

REFERENCE = PHI3.parent if PHI3 is not None else None
FOLDERS = [TOKENIZER_DIR, FIXTURES / "chatml-bos-tokenizer",
           *(sorted(d for d in REFERENCE.iterdir() if (d / "tokenizer.json").is_file()) if REFERENCE else [])]
TEXTS = ["Hello, world!", "  two  spaces\tand a tab\n\nnewlines", "numbers 12345 and 3.14159",
         "ünïcödé — “quotes” 日本語のテキスト 🙂", "<|end|><|user|> special-looking text </s><s>", "",
         "def f(x):\n    return x ** 2  # code"]
MESSAGES = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4, as ever."},
            {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6."}]


def auto_tokenizer(directory: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


def outcome(call, *args, **kwargs):
    """What a call returns, or the error it raises (a tokenizer loaded as a class that does not fit it
    fails alike both ways)."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def assert_same_tokenizer(ours, theirs) -> None:
    assert type(ours) is type(theirs)
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    assert ours.init_kwargs == theirs.init_kwargs
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.chat_template == theirs.chat_template
    for text in TEXTS:
        for special in (True, False):
            assert outcome(ours, text, add_special_tokens=special, return_offsets_mapping=True) == \
                outcome(theirs, text, add_special_tokens=special, return_offsets_mapping=True), (text, special)
    ids = list(range(min(200, len(theirs))))
    assert outcome(ours.decode, ids) == outcome(theirs.decode, ids)
    for tokenize in (False, True):
        assert outcome(ours.apply_chat_template, MESSAGES, tokenize=tokenize) == \
            outcome(theirs.apply_chat_template, MESSAGES, tokenize=tokenize)


@pytest.mark.parametrize("directory", FOLDERS, ids=lambda d: d.name)
def test_class_and_encodings_equal_autotokenizer(directory):
    assert tokenizer_class(directory) is not None  # the folders a build pins take the quick way
    assert_same_tokenizer(load_tokenizer(directory), auto_tokenizer(directory))


def test_tools_template_folder(tools_tokenizer):
    assert_same_tokenizer(load_tokenizer(tools_tokenizer), auto_tokenizer(tools_tokenizer))


def _with_config(tmp_path: Path, source: Path, **changes) -> Path:
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.update(changes)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


# Class names as tokenizer_config.json may give them: with and without Fast, a model's own, a byte-level
# tokenizer.json declared LlamaTokenizer (AutoTokenizer loads it as TokenizersBackend), Bloom's removed
# classes, a PythonBackend, an unknown name.
@pytest.mark.parametrize("name", ["PreTrainedTokenizerFast", "TokenizersBackend", "LlamaTokenizer",
                                  "LlamaTokenizerFast", "GPT2Tokenizer", "Qwen2TokenizerFast", "BloomTokenizerFast",
                                  "PreTrainedTokenizer", "NoSuchTokenizer", "GemmaTokenizerFast"])
@pytest.mark.parametrize("source", [TOKENIZER_DIR, FIXTURES / "chatml-bos-tokenizer", PHI3],
                         ids=["muse-tiny", "chatml-bos", "phi-3-mini"])
def test_declared_class_resolved_as_autotokenizer(tmp_path, name, source):
    if source is None:
        pytest.skip("the Phi-3 reference tokenizer is not here")
    directory = _with_config(tmp_path, source, tokenizer_class=name)
    try:
        theirs = auto_tokenizer(directory)
    except Exception as exc:  # not loadable as that class: it must fail our way too
        with pytest.raises(Exception):
            load_tokenizer(directory)
        return exc
    ours = load_tokenizer(directory)
    assert type(ours) is type(theirs)
    assert_same_tokenizer(ours, theirs)


def test_every_mapped_class_name_is_transformers_own():
    """For each class of transformers' tokenizer table, the quick lookup returns AutoTokenizer's class, or
    a placeholder (a missing dependency) that sends the folder to AutoTokenizer."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES, tokenizer_class_from_name

    from databuild.encode.tokenizer_class import _is_tokenizer_class

    names = sorted({name for name in TOKENIZER_MAPPING_NAMES.values() if name})
    assert len(names) > 50
    for name in names:
        ours = _from_name(name)
        assert ours is tokenizer_class_from_name(name) or not _is_tokenizer_class(ours), name


def test_what_autotokenizer_decides_otherwise_goes_to_autotokenizer(tmp_path):
    """A config.json (the model type's rules), remote code, no class named, another transformers."""
    with_model = _with_config(tmp_path / "a", TOKENIZER_DIR)
    (with_model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert tokenizer_class(with_model) is None
    assert tokenizer_class(_with_config(tmp_path / "b", TOKENIZER_DIR,
                                        auto_map={"AutoTokenizer": [None, "x.Y"]})) is None
    assert tokenizer_class(_with_config(tmp_path / "c", TOKENIZER_DIR, tokenizer_class=None)) is None
    # the AutoTokenizer path still loads what it did
    assert type(load_tokenizer(with_model)) is type(auto_tokenizer(with_model))


def test_empty_config_matches_no_backend_hub_id():
    """Without config.json AutoTokenizer's config has name_or_path "": no hub id pattern may match it, and
    its model type "" names no class and no exception."""
    import fnmatch

    from transformers.models.auto.tokenization_auto import (MODEL_IDS_TO_TOKENIZERS_BACKEND,
                                                            MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
                                                            TOKENIZER_MAPPING_NAMES)

    assert not any(fnmatch.fnmatch("", pattern) for pattern in MODEL_IDS_TO_TOKENIZERS_BACKEND)
    assert "" not in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS and None not in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
    assert TOKENIZER_MAPPING_NAMES.get("") is None


def test_a_build_imports_no_model_configuration():
    """The module that imports torch where it is installed (transformers.modeling_rope_utils, through
    configuration_utils) is not imported by loading a tokenizer and preparing a build."""
    code = ("import sys; from pathlib import Path; from databuild.encode.render import load_tokenizer; "
            f"load_tokenizer(Path({str(TOKENIZER_DIR)!r})); import databuild.build, databuild.executors.local; "
            "print(sorted(m for m in sys.modules if m in ('torch', 'transformers.configuration_utils', "
            "'transformers.modeling_rope_utils', 'transformers.models.auto.tokenization_auto')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
