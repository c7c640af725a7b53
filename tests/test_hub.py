"""Pinned hub inputs, offline: the tests lay out a real huggingface_hub cache in a temporary folder
and drive the CLI through it (huggingface_hub's snapshot resolution, transformers' loading), with
no mock of the loader."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SOURCE_DIR, TINY, TOKENIZER_DIR, write_config

SOURCE_REPO, SOURCE_COMMIT = "databuild-fixtures/tulu-tiny", "1" * 40
TOKENIZER_REPO, TOKENIZER_COMMIT = "databuild-fixtures/muse-tiny-tokenizer", "2" * 40
LFS_FILES = {"tokenizer.json"}  # plus every parquet file: the hub stores them in LFS, blobs named by sha256


def blob_name(path: Path, lfs: bool) -> str:
    data = path.read_bytes()
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id


def lay_out_repo(cache: Path, kind: str, repo: str, commit: str, files: dict[str, Path]) -> Path:
    """cache/{kind}s--ORG--NAME/{blobs,snapshots/COMMIT,refs/main}: the layout huggingface_hub writes."""
    root = cache / f"{kind}s--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    for name, source in files.items():
        blob = blob_name(source, name.endswith(".parquet") or name in LFS_FILES)
        shutil.copyfile(source, root / "blobs" / blob)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(root / "blobs" / blob, link.parent))
    return snapshot


@pytest.fixture
def hub(tmp_path):
    """A hub cache holding the fixture dataset and tokenizer at their pinned commits, and a config
    that names them by repo and commit only (no local dirs)."""
    cache = tmp_path / "hub"
    sources = {f"data/{p.name}": p for p in sorted((SOURCE_DIR / "data").glob("*.parquet"))}
    lay_out_repo(cache, "dataset", SOURCE_REPO, SOURCE_COMMIT, sources)
    tokenizer_files = {p.name: p for p in TOKENIZER_DIR.iterdir()}
    lay_out_repo(cache, "model", TOKENIZER_REPO, TOKENIZER_COMMIT, tokenizer_files)
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": None}, tokenizer={"dir": None})
    return cache, config


def run(cache: Path, *args: str, offline_env: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    if offline_env:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "databuild", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


def assert_one_line_error(result, *needles):
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


@pytest.mark.parametrize("offline_env", [True, False])
def test_build_from_the_hub_cache_matches_the_local_build(hub, tiny_build, tmp_path, offline_env):
    cache, config = hub
    args = ["make", str(config), "--out", str(tmp_path / "out")] + ([] if offline_env else ["--offline"])
    result = run(cache, *args, offline_env=offline_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()
    manifest = (tmp_path / "out" / f"{TINY}.manifest.json").read_text()
    assert '"origin": "hub"' in manifest and SOURCE_COMMIT in manifest and TOKENIZER_COMMIT in manifest


def test_fetch_refuses_offline_mode(hub):
    """fetch vouches for a complete cache by asking the hub what the commit holds: offline it cannot."""
    cache, config = hub
    result = run(cache, "fetch", str(config))
    assert_one_line_error(result, "fetch downloads from the hub, and HF_HUB_OFFLINE is set",
                          f"databuild make {TINY} --offline")


def test_nothing_cached_fails_fast_with_the_fetch_command(hub, tmp_path):
    _, config = hub
    started = time.monotonic()
    result = run(tmp_path / "empty-cache", "make", str(config), "--out", str(tmp_path / "out"))
    assert time.monotonic() - started < 30
    assert_one_line_error(result, f"model {TOKENIZER_REPO}@{TOKENIZER_COMMIT}: not in the hub cache and offline",
                          f"databuild fetch {TINY}")
    assert not (tmp_path / "out").exists()


def test_wrong_tokenizer_hash_names_both(hub, tmp_path):
    cache, _ = hub
    config = write_config(tmp_path / "c.yaml", source={"dir": None},
                          tokenizer={"dir": None, "sha256": {"tokenizer.json": "ab" * 32}})
    actual = hashlib.sha256((TOKENIZER_DIR / "tokenizer.json").read_bytes()).hexdigest()
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, f"tokenizer.json sha256 is {actual}, the config pins {'ab' * 32}")


def test_missing_shard(hub, tmp_path):
    cache, config = hub
    (cache / f"datasets--{SOURCE_REPO.replace('/', '--')}" / "snapshots" / SOURCE_COMMIT / "data" /
     "train-00001-of-00002.parquet").unlink()
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, f"dataset {SOURCE_REPO}@{SOURCE_COMMIT}: missing shard "
                                  "data/train-00001-of-00002.parquet")


def source_snapshot(cache: Path) -> Path:
    return cache / f"datasets--{SOURCE_REPO.replace('/', '--')}" / "snapshots" / SOURCE_COMMIT


@pytest.mark.parametrize("change", ["regular file", "link outside the cache"])
def test_a_snapshot_changed_by_hand_is_refused(hub, tmp_path, change):
    cache, config = hub
    link = source_snapshot(cache) / "data" / "train-00000-of-00002.parquet"
    data = link.read_bytes()
    link.unlink()
    if change == "regular file":
        link.write_bytes(data)
    else:
        (tmp_path / "elsewhere.parquet").write_bytes(data)
        link.symlink_to(tmp_path / "elsewhere.parquet")
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "data/train-00000-of-00002.parquet: not a link to a blob of the hub cache")


def test_regular_files_are_accepted_where_the_cache_cannot_hold_links(hub, monkeypatch):
    """Without symlinks (SMB, exFAT, ...) huggingface_hub stores regular files in the snapshot: those
    are not a cache changed by hand. Where links work, the same file is refused."""
    import huggingface_hub.file_download as file_download

    from databuild.errors import BuildError
    from databuild.inputs.hub import check_cached_blob

    cache, _ = hub
    snapshot = source_snapshot(cache)
    link = snapshot / "data" / "train-00000-of-00002.parquet"
    data = link.read_bytes()
    link.unlink()
    link.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    monkeypatch.setattr(file_download, "are_symlinks_supported", lambda cache_dir=None: False)
    check_cached_blob(link, snapshot, "here", digest)
    monkeypatch.setattr(file_download, "are_symlinks_supported", lambda cache_dir=None: True)
    with pytest.raises(BuildError, match="here: not a link to a blob of the hub cache"):
        check_cached_blob(link, snapshot, "here", digest)


@pytest.mark.parametrize("stray", ["train-extra.parquet", "train-00000-of-00002 (1).parquet",
                                   "train-x-00000-of-00002.parquet"])
def test_a_file_beside_the_shards_is_refused(tmp_path, stray):
    shutil.copytree(SOURCE_DIR, tmp_path / "src")
    shutil.copy(tmp_path / "src" / "data" / "train-00000-of-00002.parquet", tmp_path / "src" / "data" / stray)
    config = write_config(tmp_path / "c.yaml", source={"dir": str(tmp_path / "src")})
    result = run(tmp_path / "hub", "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, f"data/{stray} is not a shard of the split (data/train-NNNNN-of-NNNNN.parquet)")


def test_missing_tokenizer_file(hub, tmp_path):
    cache, config = hub
    (cache / f"models--{TOKENIZER_REPO.replace('/', '--')}" / "snapshots" / TOKENIZER_COMMIT /
     "chat_template.jinja").unlink()
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "missing file chat_template.jinja", f"databuild fetch {TINY}")


def test_corrupt_cached_file(hub, tmp_path):
    cache, config = hub
    link = (cache / f"datasets--{SOURCE_REPO.replace('/', '--')}" / "snapshots" / SOURCE_COMMIT / "data" /
            "train-00000-of-00002.parquet")
    blob = link.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "data/train-00000-of-00002.parquet: cached file is corrupt")


def test_branch_revision_is_refused(hub, tmp_path):
    cache, _ = hub
    config = write_config(tmp_path / "c.yaml", source={"dir": None, "revision": "main"}, tokenizer={"dir": None})
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "key 'revision' = 'main': a pinned build needs a 40-hex commit")


def test_air_gapped_dirs_are_checked_against_the_pins(tmp_path):
    copy = tmp_path / "tok"
    shutil.copytree(TOKENIZER_DIR, copy)
    (copy / "chat_template.jinja").write_text((copy / "chat_template.jinja").read_text() + " ")
    config = write_config(tmp_path / "c.yaml", source={"dir": None}, tokenizer={"dir": None})
    result = run(tmp_path / "no-cache", "make", str(config), "--dataset-dir", str(SOURCE_DIR),
                 "--tokenizer-dir", str(copy), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, "chat_template.jinja sha256 is")


MIXTURE = (("databuild-fixtures/tulu-tiny-first", "4" * 40), ("databuild-fixtures/tulu-tiny-second", "5" * 40))


def test_a_mixture_of_two_pinned_hub_sources_builds_the_whole(tmp_path, tiny_build):
    """The fixture's two shards as two hub repos at their own commits, the second in ShareGPT form:
    built from the cache alone, the same bytes as the one source, each source pinned in the manifest."""
    from test_mixture import copy_in_format, sharegpt

    cache = tmp_path / "hub"
    first, second = sorted((SOURCE_DIR / "data").glob("*.parquet"))
    chats = next((copy_in_format(tmp_path / "chats", sharegpt) / "data").glob("train-00001-*"))
    for (repo, commit), shard in zip(MIXTURE, (first, chats)):
        lay_out_repo(cache, "dataset", repo, commit, {"data/train-00000-of-00001.parquet": shard})
    lay_out_repo(cache, "model", TOKENIZER_REPO, TOKENIZER_COMMIT, {p.name: p for p in TOKENIZER_DIR.iterdir()})
    sources = [{"repo": repo, "revision": commit} for repo, commit in MIXTURE]
    sources[1]["format"] = "sharegpt"
    config = write_config(tmp_path / f"{TINY}.yaml", source=None, sources=sources, tokenizer={"dir": None})
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()
    manifest = json.loads((tmp_path / "out" / f"{TINY}.manifest.json").read_text())
    pinned = manifest["inputs"]["sources"]
    assert [(s["repo"], s["revision"], s["origin"], s["format"]) for s in pinned] == [
        (MIXTURE[0][0], MIXTURE[0][1], "hub", "messages"), (MIXTURE[1][0], MIXTURE[1][1], "hub", "sharegpt")]
    assert [s["files"][0]["sha256"] for s in pinned] == [blob_name(first, True), blob_name(chats, True)]
    assert sum(s["conversations_read"] for s in manifest["counts"]["sources"]) == \
        manifest["counts"]["conversations_read"]

    # the second source missing from the cache: named, with the command that fetches both
    shutil.rmtree(cache / f"datasets--{MIXTURE[1][0].replace('/', '--')}")
    result = run(cache, "make", str(config), "--out", str(tmp_path / "out2"))
    assert_one_line_error(result, f"dataset {MIXTURE[1][0]}@{MIXTURE[1][1]}: not in the hub cache and offline",
                          f"databuild fetch {TINY}")


def test_named_templates_are_tokenizer_files_hashed_and_checked(hub, tiny_build, tmp_path):
    """transformers loads additional_chat_templates/NAME.jinja as the template NAME: in a hub snapshot
    it is a tokenizer file like the others, hashed into the manifest, checked against the cache and its pin."""
    cache, unpinned = hub
    named = "additional_chat_templates/harmony.jinja"  # the default template plus a comment: the same renders
    (tmp_path / "harmony.jinja").write_text((TOKENIZER_DIR / "chat_template.jinja").read_text() + "{# named #}")
    lay_out_repo(cache, "model", TOKENIZER_REPO, TOKENIZER_COMMIT, {named: tmp_path / "harmony.jinja"})
    digest = hashlib.sha256((tmp_path / "harmony.jinja").read_bytes()).hexdigest()
    pinned = write_config(tmp_path / "pinned.yaml", source={"dir": None}, chat_template_name="harmony",
                          tokenizer={"dir": None, "sha256": {"tokenizer.json": blob_name(
                              TOKENIZER_DIR / "tokenizer.json", True), named: digest}})
    result = run(cache, "make", str(pinned), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / f"{TINY}.parquet").read_bytes() == tiny_build.parquet.read_bytes()
    manifest = json.loads((tmp_path / "out" / f"{TINY}.manifest.json").read_text())
    assert manifest["inputs"]["tokenizer"]["sha256"][named] == digest
    assert manifest["build"]["chat_template"] == {"name": "harmony", "sha256": {"harmony": digest}}

    blob = (cache / f"models--{TOKENIZER_REPO.replace('/', '--')}" / "snapshots" / TOKENIZER_COMMIT / named).resolve()
    blob.write_text(blob.read_text() + " ")
    result = run(cache, "make", str(pinned), "--out", str(tmp_path / "out2"))
    assert_one_line_error(result, f"{named} sha256 is", f"the config pins {digest}")
    result = run(cache, "make", str(unpinned), "--out", str(tmp_path / "out3"))  # not used, not pinned: still checked
    assert_one_line_error(result, f"{named}: cached file is corrupt")
