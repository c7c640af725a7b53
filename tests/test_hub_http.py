"""Pinned hub inputs, downloaded: the CLI runs huggingface_hub's real download path over HTTP
against a local stand-in for the hub (tests/support/hub_server.py), with the cache in a temporary folder.
test_hub.py covers a cache laid out on disk; this covers how the bytes get there."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SOURCE_DIR, TINY, TOKENIZER_DIR, write_config
from hub_server import HubServer, Request, is_lfs
from test_hub import SOURCE_COMMIT, SOURCE_REPO, TOKENIZER_COMMIT, TOKENIZER_REPO, assert_one_line_error

GOLDEN = json.loads((REPO / "tests" / "golden" / f"{TINY}.json").read_text())
SHARDS = tuple(f"data/{p.name}" for p in sorted((SOURCE_DIR / "data").glob("*.parquet")))
TOKENIZER_FILES = tuple(sorted(p.name for p in TOKENIZER_DIR.iterdir()))
NEWER_COMMIT = "3" * 40
TOKEN = "hf_databuild_test_token"


def fixture_repos(tokenizer_json: bytes | None = None) -> dict[tuple[str, str, str], dict[str, bytes]]:
    """The fixture dataset and tokenizer at their pinned commits (with another tokenizer.json if
    given), beside files a pinned build must not fetch: another split, the tokenizer repo's README and a
    config.json, a newer commit of the dataset (the dataset's README, its card, is fetched: its configs
    may name the split's files)."""
    source = {path: (SOURCE_DIR / path).read_bytes() for path in SHARDS}
    source |= {"README.md": b"# tulu-tiny\n", ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
               "data/test-00000-of-00001.parquet": source[SHARDS[0]]}
    tokenizer = {name: (TOKENIZER_DIR / name).read_bytes() for name in TOKENIZER_FILES}
    tokenizer |= {"README.md": b"# muse-tiny-tokenizer\n", "config.json": b"{}\n"}
    if tokenizer_json is not None:
        tokenizer["tokenizer.json"] = tokenizer_json
    return {("dataset", SOURCE_REPO, SOURCE_COMMIT): source,
            ("dataset", SOURCE_REPO, NEWER_COMMIT): {SHARDS[0]: source[SHARDS[1]]},
            ("model", TOKENIZER_REPO, TOKENIZER_COMMIT): tokenizer}


def hub_config(tmp_path: Path) -> Path:
    """The tiny config naming its inputs by repo, commit and sha256 pins only (no local dirs)."""
    return write_config(tmp_path / f"{TINY}.yaml", source={"dir": None}, tokenizer={"dir": None})


def run(server: HubServer, home: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess: huggingface_hub reads HF_ENDPOINT at import. Inherited HF_* settings
    and proxies are dropped so that nothing but the arguments decides where it connects and as whom.
    Progress bars are left to databuild, which keeps huggingface_hub's off when stderr is not a terminal."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HF_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env |= {"HF_ENDPOINT": server.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
            "HF_HUB_DISABLE_TELEMETRY": "1"}
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "databuild", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)


def expected_requests(listings: int = 1) -> list[tuple[str, str, str]]:
    """(origin, method, path) of a download of exactly the pinned files, each once: a tree listing per
    repo at its commit (`fetch` lists again to check the snapshot is complete), a HEAD per file, then a
    GET of the file from the hub (git blobs) or the CDN (LFS)."""
    out = listings * [("hub", "GET", f"/api/datasets/{SOURCE_REPO}/tree/{SOURCE_COMMIT}?recursive=true&expand=false"),
                      ("hub", "GET", f"/api/models/{TOKENIZER_REPO}/tree/{TOKENIZER_COMMIT}?recursive=true&expand=false")]
    # the dataset card too (README.md): its configs may name the split's files (data/README.md "Source files")
    card = {"README.md": fixture_repos()[("dataset", SOURCE_REPO, SOURCE_COMMIT)]["README.md"]}
    for prefix, root, names in ((f"/datasets/{SOURCE_REPO}/resolve/{SOURCE_COMMIT}", SOURCE_DIR, (*SHARDS, "README.md")),
                                (f"/{TOKENIZER_REPO}/resolve/{TOKENIZER_COMMIT}", TOKENIZER_DIR, TOKENIZER_FILES)):
        for name in names:
            data = card[name] if name in card else (root / name).read_bytes()
            out.append(("hub", "HEAD", f"{prefix}/{name}"))
            out.append(("cdn", "GET", f"/lfs/{hashlib.sha256(data).hexdigest()}") if is_lfs(name, data)
                       else ("hub", "GET", f"{prefix}/{name}"))
    return sorted(out)


def seen(requests: list[Request]) -> list[tuple[str, str, str]]:
    return sorted((r.origin, r.method, r.path) for r in requests)


def commits(requests: list[Request]) -> set[str]:
    """The revisions named in the hub requests' paths."""
    return {re.search(r"/(?:tree|resolve)/([^/?]+)", r.path).group(1) for r in requests if r.origin == "hub"}


def assert_golden(out: Path) -> None:
    from databuild.rowfile.hashes import hash_parquet

    parquet = out / f"{TINY}.parquet"
    assert hashlib.sha256(parquet.read_bytes()).hexdigest() == GOLDEN["parquet_sha256"]
    assert hash_parquet(parquet).rows_sha256 == GOLDEN["rows_sha256"]
    assert '"origin": "hub"' in (out / f"{TINY}.manifest.json").read_text()


def test_fetch_downloads_the_pinned_files_then_offline_make_is_golden(tmp_path):
    config = hub_config(tmp_path)
    with HubServer(fixture_repos()) as server:
        result = run(server, tmp_path / "hf", "fetch", str(config))
        assert result.returncode == 0, result.stderr
        assert f"snapshots/{SOURCE_COMMIT}" in result.stdout and f"snapshots/{TOKENIZER_COMMIT}" in result.stdout
        assert seen(server.requests) == expected_requests(listings=2)
        assert commits(server.requests) == {SOURCE_COMMIT, TOKENIZER_COMMIT}
        fetched = len(server.requests)

        result = run(server, tmp_path / "hf", "make", str(config), "--offline", "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
        assert server.requests[fetched:] == []  # the fetched cache alone serves the build
    assert_golden(tmp_path / "out")


def test_make_downloads_into_an_empty_cache_and_is_golden(tmp_path):
    with HubServer(fixture_repos()) as server:
        result = run(server, tmp_path / "hf", "make", str(hub_config(tmp_path)), "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
        assert seen(server.requests) == expected_requests()
    assert_golden(tmp_path / "out")


@pytest.mark.parametrize("wrong_token", [None, "hf_not_authorized"])
def test_gated_dataset_needs_the_token(tmp_path, wrong_token):
    config = hub_config(tmp_path)
    with HubServer(fixture_repos(), tokens={("dataset", SOURCE_REPO): TOKEN}) as server:
        refused = run(server, tmp_path / "hf", "fetch", str(config), token=wrong_token)
        status = 401 if wrong_token is None else 403
        assert_one_line_error(refused, f"dataset {SOURCE_REPO}@{SOURCE_COMMIT}: gated on the hub (HTTP {status}): "
                                       "set HF_TOKEN to a token that was granted access")
        assert {r.authorization for r in server.requests} == {wrong_token and f"Bearer {wrong_token}"}
        assert not (tmp_path / "hf" / "hub" / f"datasets--{SOURCE_REPO.replace('/', '--')}" / "snapshots").exists()

        refused_requests = len(server.requests)
        result = run(server, tmp_path / "hf", "fetch", str(config), token=TOKEN)
        assert result.returncode == 0, result.stderr
        accepted = server.requests[refused_requests:]
        assert seen(accepted) == expected_requests(listings=2)
        # The token goes to the hub only; the CDN's urls are their own authorization, as on the real hub.
        assert {r.authorization for r in accepted if r.origin == "hub"} == {f"Bearer {TOKEN}"}
        assert {r.authorization for r in accepted if r.origin == "cdn"} == {None}


def test_a_commit_the_hub_does_not_have_is_named(tmp_path):
    missing = "4" * 40
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": None, "revision": missing},
                          tokenizer={"dir": None})
    with HubServer(fixture_repos()) as server:
        result = run(server, tmp_path / "hf", "fetch", str(config))
    assert_one_line_error(result, f"dataset {SOURCE_REPO}@{missing}: no such commit in the repo (HTTP 404)")


def test_fetch_does_not_vouch_for_a_cache_it_could_not_check(tmp_path):
    """With the hub refusing every request, huggingface_hub hands back the cached snapshot; fetch must
    still fail, as it could not ask the hub what the commit holds."""
    config = hub_config(tmp_path)
    with HubServer(fixture_repos()) as server:
        assert run(server, tmp_path / "hf", "fetch", str(config)).returncode == 0
        server.down = True
        result = run(server, tmp_path / "hf", "fetch", str(config))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        f"error: dataset {SOURCE_REPO}@{SOURCE_COMMIT}: cannot list the files of the commit ("), result.stderr


def test_fetch_refuses_a_cached_snapshot_that_lacks_a_file_of_the_commit(tmp_path):
    """A snapshot missing a shard, with no cached listing of the commit to tell (a cache an older
    huggingface_hub wrote, or an interrupted copy of one), and a hub that fails once: huggingface_hub
    hands back the snapshot as it is; fetch's own listing of the commit names the file it lacks."""
    config = hub_config(tmp_path)
    with HubServer(fixture_repos()) as server:
        assert run(server, tmp_path / "hf", "fetch", str(config)).returncode == 0
        repo_cache = tmp_path / "hf" / "hub" / f"datasets--{SOURCE_REPO.replace('/', '--')}"
        (repo_cache / "snapshots" / SOURCE_COMMIT / SHARDS[1]).unlink()
        (repo_cache / "trees" / f"{SOURCE_COMMIT}.json").unlink()
        server.down_for = 1  # snapshot_download's listing only
        result = run(server, tmp_path / "hf", "fetch", str(config))
    assert_one_line_error(result)
    assert result.stderr == (
        f"error: dataset {SOURCE_REPO}@{SOURCE_COMMIT}: {SHARDS[1]} is not in the cache (1 of the commit's files "
        "missing); check the network, HF_ENDPOINT and any proxy settings, then fetch again\n")


def test_a_repo_the_hub_does_not_have_is_named(tmp_path):
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": None, "repo": "databuild-fixtures/nothing"},
                          tokenizer={"dir": None})
    with HubServer(fixture_repos()) as server:
        result = run(server, tmp_path / "hf", "fetch", str(config))
    assert_one_line_error(result, f"dataset databuild-fixtures/nothing@{SOURCE_COMMIT}: no such repo on the hub "
                                  "(HTTP 404; a private one needs HF_TOKEN)")


def test_a_download_cut_short_is_one_line_and_a_rerun_completes_it(tmp_path):
    config = hub_config(tmp_path)
    with HubServer(fixture_repos()) as server:
        server.cut_lfs_after = 10
        cut = run(server, tmp_path / "hf", "fetch", str(config))
        # huggingface_hub logs each retry first; databuild's own report is the one last line
        assert cut.returncode == 1 and "Traceback" not in cut.stderr
        last = cut.stderr.splitlines()[-1]
        assert last.startswith(f"error: dataset {SOURCE_REPO}@{SOURCE_COMMIT}: download failed (") and \
            last.endswith("run it again: finished files stay in the cache"), cut.stderr
        server.cut_lfs_after = None
        result = run(server, tmp_path / "hf", "make", str(config), "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
    assert_golden(tmp_path / "out")


def test_served_tokenizer_that_is_not_the_pinned_one_is_refused(tmp_path):
    served = (TOKENIZER_DIR / "tokenizer.json").read_bytes() + b"\n"
    pinned = hashlib.sha256((TOKENIZER_DIR / "tokenizer.json").read_bytes()).hexdigest()
    with HubServer(fixture_repos(tokenizer_json=served)) as server:
        result = run(server, tmp_path / "hf", "make", str(hub_config(tmp_path)), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, f"tokenizer {TOKENIZER_REPO}@{TOKENIZER_COMMIT}: tokenizer.json sha256 is "
                                  f"{hashlib.sha256(served).hexdigest()}, the config pins {pinned}")
    assert not (tmp_path / "out").exists()


def test_bytes_corrupted_in_transfer_are_caught_in_the_cache(tmp_path):
    """huggingface_hub does not hash what it downloads over plain HTTP: databuild's check of each
    cached blob against its name is what catches a transfer that went wrong."""
    with HubServer(fixture_repos()) as server:
        sha256 = hashlib.sha256((SOURCE_DIR / SHARDS[0]).read_bytes()).hexdigest()
        data = bytearray(server.lfs[sha256])
        data[len(data) // 2] ^= 0x01
        server.lfs[sha256] = bytes(data)
        result = run(server, tmp_path / "hf", "make", str(hub_config(tmp_path)), "--out", str(tmp_path / "out"))
    assert_one_line_error(result, f"{SHARDS[0]}: cached file is corrupt", f"cache entry {sha256}")
    assert not (tmp_path / "out").exists()


def test_fetch_downloads_every_source_of_a_mixture(tmp_path):
    """Two sources at their own commits (the fixture's two shards): fetch takes both, and the offline
    build from that cache is the golden build."""
    from test_hub import MIXTURE

    repos = fixture_repos()
    source = repos.pop(("dataset", SOURCE_REPO, SOURCE_COMMIT))
    for (repo, commit), shard in zip(MIXTURE, SHARDS):
        repos[("dataset", repo, commit)] = {"data/train-00000-of-00001.parquet": source[shard], "README.md": b"#\n"}
    config = write_config(tmp_path / f"{TINY}.yaml", source=None, tokenizer={"dir": None},
                          sources=[{"repo": repo, "revision": commit} for repo, commit in MIXTURE])
    with HubServer(repos) as server:
        result = run(server, tmp_path / "hf", "fetch", str(config))
        assert result.returncode == 0, result.stderr
        assert all(f"snapshots/{commit}" in result.stdout for _, commit in MIXTURE)
        assert commits(server.requests) == {MIXTURE[0][1], MIXTURE[1][1], TOKENIZER_COMMIT}
        # of the READMEs, the dataset cards alone (their configs may name the split's files)
        assert {r.path for r in server.requests if r.path.endswith("README.md") and r.method == "GET"} == {
            f"/datasets/{repo}/resolve/{commit}/README.md" for repo, commit in MIXTURE}
        fetched = len(server.requests)
        result = run(server, tmp_path / "hf", "make", str(config), "--offline", "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
        assert server.requests[fetched:] == []
    assert_golden(tmp_path / "out")
