"""Config validation: every bad value is refused at load, with the key and the value named."""

import datetime as dt

import pytest

from databuild.config import load_config, resolve_config
from databuild.errors import BuildError

from conftest import write_config


@pytest.mark.parametrize("changes, message", [
    ({"source": {"revision": "main"}}, "source: key 'revision' = 'main': a pinned build needs a 40-hex commit"),
    ({"tokenizer": {"revision": "v1.0"}}, "tokenizer: key 'revision' = 'v1.0'"),
    ({"loss_mask": "everything"}, "key 'loss_mask' = 'everything': known strategies: assistant, muse_spark"),
    ({"rows": 0}, "key 'rows' = 0: must be positive"),
    ({"row_tokens": "8192"}, "key 'row_tokens' = '8192': expected int"),
    ({"seed": True}, "key 'seed' = True: expected int"),
    ({"tokenizer": {"sha256": {"tokenizer.json": "abc"}}}, "key 'sha256.tokenizer.json' = 'abc'"),
    ({"template_kwargs": {"current_date": "1 Oct 2026"}}, "key 'template_kwargs.current_date' = '1 Oct 2026'"),
    ({"template_kwargs": {"current_date": "2026-02-30"}}, "'2026-02-30': not a date of the calendar"),
    ({"template_kwargs": {"current_date": dt.date(2026, 10, 1)}}, "'2026-10-01': quote it, as a string"),
    ({"separator": ""}, "key 'separator' = '': name a token"),
    ({"on_bad_conversation": "ignore"}, "key 'on_bad_conversation' = 'ignore'"),
    ({"rowz": 5}, "unknown key 'rowz'"),
    ({"row_tokens": 2**31}, f"key 'row_tokens' = {2**31}: must be at most {2**31 - 1}"),
    ({"rows": 2**63}, f"key 'rows' = {2**63}: must be at most {2**63 - 1}"),
    ({"rows": 2**40, "row_tokens": 2**30}, "key 'rows' = 1099511627776: rows x row_tokens must be at most"),
    ({"seed": 2**64}, f"key 'seed' = {2**64}: must be at most {2**63 - 1}"),
    ({"end_of_turn": [""]}, "key 'end_of_turn' = ['']: expected a token, or a list of tokens"),
    ({"chat_template_name": 3}, "key 'chat_template_name' = 3: expected str"),
    ({"template_kwargs": {"tools": "x"}}, "key 'template_kwargs.tools' = 'x': apply_chat_template sets this"),
    ({"name": None}, "missing key 'name'"),
    ({"history": "keep"}, "key 'history' = 'keep': expected one of expand, refuse"),
])
def test_bad_values_are_named(tmp_path, changes, message):
    path = write_config(tmp_path / "c.yaml", **changes)
    with pytest.raises(BuildError, match=None) as error:
        load_config(path)
    assert message in str(error.value)
    assert str(path) in str(error.value)


def test_shipped_configs_load():
    real = resolve_config("muse-spark-tulu3-fixed8192-v1")
    assert (real.sources[0].repo, real.sources[0].revision) == ("allenai/tulu-3-sft-mixture",
                                                        "b14afda60f1bbebe55d5d2fa1e4df5042f97f8be")
    assert (real.seed, real.row_tokens, real.rows, real.loss_mask) == (42, 8192, 6400, "muse_spark")
    assert real.template_kwargs_dict == {"current_date": "2026-10-01", "reasoning_effort": "xhigh"}
    assert real.tokenizer_sha256["chat_template.jinja"].startswith("2341a2d3")
    tiny = resolve_config("muse-spark-tiny-fixed512-v1")
    assert "tiny" in tiny.name and tiny.sources[0].dir.is_dir() and tiny.tokenizer.dir.is_dir()


def test_unknown_name_lists_known():
    with pytest.raises(BuildError, match="no config named 'nope'.*muse-spark-tiny-fixed512-v1"):
        resolve_config("nope")


def test_a_config_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(write_config(tmp_path / "good.yaml").read_bytes() + "# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(BuildError, match="cannot read config: 'utf-8' codec can't decode"):
        load_config(path)


def test_bounds_are_one_line_on_the_command_line(tmp_path):
    import subprocess
    import sys

    path = write_config(tmp_path / "c.yaml", rows=10**30)
    result = subprocess.run([sys.executable, "-m", "databuild", "make", str(path), "--out", str(tmp_path / "o")],
                            capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"key 'rows' = {10**30}: must be at most" in result.stderr


def _aliases(levels: int) -> str:
    """YAML of `levels` anchors, each a list of ten aliases of the one before: 10^(levels+1) values expanded,
    in a few hundred bytes (a "billion laughs")."""
    items = ['&a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


def _with_lines(tmp_path, **lines: str):
    """The tiny config with top-level keys given as YAML text of their own, first and in that order (so that
    their anchors come before the aliases to them)."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    raw = yaml.load(write_config(tmp_path / "base.yaml").read_text())
    rest = io.StringIO()
    yaml.dump({key: value for key, value in raw.items() if key not in lines}, rest)
    path = tmp_path / "c.yaml"
    path.write_text("".join(f"{key}: {value}\n" for key, value in lines.items()) + rest.getvalue())
    return path


def _make_cli(path, out, *options, timeout=60):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "databuild", "make", str(path), "--out", str(out), *options],
                          capture_output=True, text=True, timeout=timeout)


def test_aliases_that_expand_past_the_limit_are_one_line(tmp_path):
    # Nine levels quoted in a message took hours (still running after 120 s); now refused at load, in one line.
    from databuild.config.load import MOST_CONFIG_NODES

    path = _with_lines(tmp_path, description="free text", template_kwargs=f"{{a: {_aliases(9)}}}", seed="*a9")
    result = _make_cli(path, tmp_path / "o", timeout=120)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr[:300]
    assert f"its aliases (*name) expand to more than {MOST_CONFIG_NODES:,} values" in result.stderr


def test_aliases_within_the_limit_load(tmp_path):
    path = _with_lines(tmp_path, template_kwargs="{current_date: '2026-10-01', a: &e xhigh, b: *e}")
    assert load_config(path).template_kwargs_dict == {"current_date": "2026-10-01", "a": "xhigh", "b": "xhigh"}


def test_a_quoted_value_is_cut_to_a_fixed_length(tmp_path):
    # Six levels (10^6 values; at 3, under the node limit) gave a 4.3 MB line: a message quotes at most
    # QUOTED_CHARACTERS of a value.
    from databuild.errors import QUOTED_CHARACTERS

    path = _with_lines(tmp_path, seed=_aliases(3))
    with pytest.raises(BuildError) as error:
        load_config(path)
    assert "key 'seed' = [['x', 'x'" in str(error.value) and "...: expected int" in str(error.value)
    assert len(str(error.value)) < len(str(path)) + QUOTED_CHARACTERS + 100
    long_name = write_config(tmp_path / "n.yaml", name="x" * 10**6 + "/")
    with pytest.raises(BuildError, match=r"key 'name' = 'x+'\.\.\. \(1,000,001 characters\): use letters") as error:
        load_config(long_name)
    assert len(str(error.value)) < 500


def test_deep_nesting_is_one_line(tmp_path):
    # 100,000 levels of [ were a RecursionError in the YAML parser; 100 levels load as a value nothing reads.
    from databuild.config.load import MOST_CONFIG_DEPTH

    for depth in (MOST_CONFIG_DEPTH + 2, 100_000):
        path = _with_lines(tmp_path, description="[" * depth + "]" * depth)
        with pytest.raises(BuildError, match=f"nested deeper than {MOST_CONFIG_DEPTH} levels"):
            load_config(path)


def test_the_documented_depth_bound_is_exact():
    """data/README: a config nests "at most 64 levels deep" below its top mapping: 64 lists load, 65 are refused
    (checked on the loaded value, as load_config checks it: no key takes nested lists that deep as valid)."""
    from databuild.config.load import MOST_CONFIG_DEPTH, _check_size

    def value(lists: int):
        inner = []
        for _ in range(lists - 1):
            inner = [inner]
        return {"description": inner}

    assert MOST_CONFIG_DEPTH == 64
    _check_size(value(64), "c.yaml")
    with pytest.raises(BuildError, match="c.yaml: nested deeper than 64 levels"):
        _check_size(value(65), "c.yaml")


def test_description_must_be_text(tmp_path):
    for bad in ([1, 2], {"a": 1}, 3):
        with pytest.raises(BuildError, match="key 'description' = .*: expected str"):
            load_config(write_config(tmp_path / "c.yaml", description=bad))
    assert load_config(write_config(tmp_path / "c.yaml", description="text")).name
