"""Local inputs pinned by content alone: a source or tokenizer `dir` with no repo or revision, its
files' sha256 the pins, checked before any row is built; the manifest says it is local."""

from __future__ import annotations

import hashlib
import shutil
import threading

import pytest

from conftest import SOURCE_DIR, TINY, TOKENIZER_DIR, write_config
from databuild.build import make
from databuild.config import load_config
from databuild.errors import BuildError


def digests(directory, pattern):
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob(pattern))}


def content_pinned(tmp_path, source=SOURCE_DIR, tokenizer=TOKENIZER_DIR, **changes):
    """The tiny config with its source and tokenizer pinned by their files' sha256 alone."""
    return write_config(tmp_path / "local.yaml",
                        source={"repo": None, "revision": None, "dir": str(source),
                                "sha256": digests(source, "data/*.parquet")},
                        tokenizer={"repo": None, "revision": None, "dir": str(tokenizer),
                                   "sha256": digests(tokenizer, "*")}, **changes)


def test_content_pinned_build_is_the_tiny_build(tmp_path, tiny_build):
    config = load_config(content_pinned(tmp_path))
    assert config.sources[0].repo is None and config.tokenizer.revision is None
    result = make(config, tmp_path / "out", progress=False)
    # the fixture has id and source columns, so nothing of the repo's name reaches the rows
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    source, tokenizer = result.data["inputs"]["sources"][0], result.data["inputs"]["tokenizer"]
    assert (source["repo"], source["revision"], source["origin"], source["name"]) == (None, None, "local", "tulu-tiny")
    assert (tokenizer["repo"], tokenizer["revision"], tokenizer["origin"]) == (None, None, "local")
    assert result.data["tokenizer_dir"] == str(TOKENIZER_DIR)
    assert "tokenizer_dir" not in tiny_build.data  # a tokenizer with a repo is found by it


@pytest.mark.parametrize("change, message", [
    ("edit", "data/train-00000-of-00002.parquet sha256 is"),
    ("add", "data/train-00002-of-00002.parquet is not among the files the config pins"),
    ("remove", "missing file data/train-00000-of-00002.parquet, which the config pins (2 missing)"),
])
def test_a_source_file_changed_added_or_removed_is_refused(tmp_path, change, message):
    copy = tmp_path / "src"
    shutil.copytree(SOURCE_DIR, copy)
    config = load_config(content_pinned(tmp_path, copy))
    data = copy / "data"
    if change == "edit":
        (data / "train-00000-of-00002.parquet").write_bytes((data / "train-00001-of-00002.parquet").read_bytes())
    elif change == "add":  # a stray shard name: the pins refuse it before the shard check could
        shutil.copyfile(data / "train-00001-of-00002.parquet", data / "train-00002-of-00002.parquet")
    else:
        (data / "train-00001-of-00002.parquet").unlink()
        (data / "train-00000-of-00002.parquet").rename(data / "train-00000-of-00001.parquet")
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    assert message in str(error.value) and f"dataset dir {copy}" in str(error.value)
    # the change may be the user's own data, edited on purpose: the line says how to pin it anew
    assert f"pin the folder as it is now: databuild init {TINY} --force -o {tmp_path / 'local.yaml'} with the " \
           "--tokenizer, --source, --rows and --row-tokens that wrote the config" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_an_unreadable_source_file_is_named_before_its_pin_and_the_hashing_stops(tmp_path):
    """The source's files hash while their footers are read (inputs/resolve.py): a file that is not parquet
    is refused as such, before the pin it no longer matches, as when the hashing came after; and the
    hashing stops with it, leaving no thread behind."""
    copy = tmp_path / "src"
    shutil.copytree(SOURCE_DIR, copy)
    config = load_config(content_pinned(tmp_path, copy))
    (copy / "data" / "train-00000-of-00002.parquet").write_bytes(b"not parquet" * 1000)
    with pytest.raises(BuildError, match=r"data/train-00000-of-00002.parquet: not a readable parquet file"):
        make(config, tmp_path / "out", progress=False)
    assert [thread.name for thread in threading.enumerate() if thread.name.startswith("databuild-hash")] == []
    assert not (tmp_path / "out").exists()


def test_a_changed_local_tokenizer_points_to_init_force(tmp_path):
    copy = tmp_path / "tok"
    shutil.copytree(TOKENIZER_DIR, copy)
    config = load_config(content_pinned(tmp_path, tokenizer=copy))
    (copy / "tokenizer_config.json").write_text((copy / "tokenizer_config.json").read_text() + " ")
    with pytest.raises(BuildError) as error:
        make(config, tmp_path / "out", progress=False)
    assert "tokenizer_config.json sha256 is" in str(error.value)
    assert f"put the pinned file back into {copy}; if you changed it on purpose, pin the folder as it is now: "\
           f"databuild init {TINY} --force -o" \
        in str(error.value)


@pytest.mark.parametrize("changes, message", [
    ({"source": {"repo": None, "revision": None}}, "source: missing key 'sha256': the sha256 of each file it pins"),
    ({"source": {"repo": None}}, "source: key 'revision' = '1111111111111111111111111111111111111111': a revision "
                                 "pins a repo"),
    ({"source": {"dir": None, "repo": None}}, "source: missing key 'repo': a hub repo with its 'revision', or a "
                                              "local 'dir'"),
    ({"tokenizer": {"repo": None, "revision": None, "sha256": None}}, "tokenizer: missing key 'sha256'"),
    ({"source": {"sha256": {"data/x.parquet": "00"}}}, "key 'sha256.data/x.parquet' = '00'"),
])
def test_bad_local_pins_are_named(tmp_path, changes, message):
    with pytest.raises(BuildError) as error:
        load_config(write_config(tmp_path / "c.yaml", **changes))
    assert message in str(error.value)


def test_hub_source_may_pin_its_files_too(tmp_path):
    pins = digests(SOURCE_DIR, "data/*.parquet")
    name = sorted(pins)[0]
    config = load_config(write_config(tmp_path / "c.yaml", source={"sha256": {**pins, name: "0" * 64}}))
    with pytest.raises(BuildError, match=f"{name} sha256 is {pins[name]}, the config pins {'0' * 64}"):
        make(config, tmp_path / "out", progress=False)
