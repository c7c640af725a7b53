"""A preference build's config (task: preference): its keys checked at load, naming key and value; the
keys of the other task refused in one line, either way."""

import pytest

from databuild.config import load_config
from databuild.errors import BuildError

from conftest import write_config

PREFERENCE = {"task": "preference", "row_tokens": None, "prompt_tokens": 256, "sequence_tokens": 512}


def preference_config(tmp_path, **changes):
    return write_config(tmp_path / "p.yaml", **{**PREFERENCE, **changes})


def test_a_preference_config_loads(tmp_path):
    config = load_config(preference_config(tmp_path, overlong_prompt="cut_left", rows="all"))
    assert (config.task, config.prompt_tokens, config.sequence_tokens, config.overlong_prompt) == (
        "preference", 256, 512, "cut_left")
    assert config.row_tokens is None and config.rows is None
    assert load_config(preference_config(tmp_path)).overlong_prompt == "drop"  # the default


def test_an_sft_config_is_unchanged(tmp_path):
    config = load_config(write_config(tmp_path / "s.yaml"))
    assert (config.task, config.prompt_tokens, config.sequence_tokens, config.overlong_prompt) == (
        "sft", None, None, None)


@pytest.mark.parametrize("changes, message", [
    ({"task": "dpo"}, "key 'task' = 'dpo': expected one of sft, preference"),
    ({"prompt_tokens": None}, "missing key 'prompt_tokens'"),
    ({"sequence_tokens": "512"}, "key 'sequence_tokens' = '512': expected int"),
    ({"prompt_tokens": 0}, "key 'prompt_tokens' = 0: a count of tokens in 1..2147483647"),
    ({"sequence_tokens": 2**31}, f"key 'sequence_tokens' = {2**31}: a count of tokens"),
    ({"prompt_tokens": 512}, "key 'prompt_tokens' = 512: must be below sequence_tokens (512)"),
    ({"overlong_prompt": "truncate"}, "key 'overlong_prompt' = 'truncate': expected one of drop, cut_left"),
    ({"row_tokens": 512}, "key 'row_tokens' = 512: an SFT key: a preference build writes one pair per row"),
    ({"packing": "bfd"}, "key 'packing' = 'bfd': an SFT key"),
    ({"train_turns": "last"}, "key 'train_turns' = 'last': an SFT key"),
    ({"validation": {"share": 0.1}}, "key 'validation' = {'share': 0.1}: an SFT key"),
    ({"rows": 0}, "key 'rows' = 0: must be positive"),
])
def test_bad_preference_values_are_named(tmp_path, changes, message):
    path = preference_config(tmp_path, **changes)
    with pytest.raises(BuildError) as error:
        load_config(path)
    assert message in str(error.value) and str(path) in str(error.value)


@pytest.mark.parametrize("key, value", [("prompt_tokens", 256), ("sequence_tokens", 512),
                                        ("overlong_prompt", "drop")])
def test_an_sft_build_refuses_preference_keys(tmp_path, key, value):
    path = write_config(tmp_path / "s.yaml", **{key: value})
    with pytest.raises(BuildError, match=f"key '{key}' = '?{value}'?: a preference key: set task: preference"):
        load_config(path)
