"""With the hub unreachable (a closed local port: refused at once, as where there is no network or no route),
make and fetch say so in one line naming the repo, the commit and what to do, at once and without
huggingface_hub's retry lines; a make whose inputs are cached still builds from the cache."""

from __future__ import annotations

import socket
import time

from conftest import TINY
from hub_server import HubServer
from test_hub import SOURCE_COMMIT, SOURCE_REPO, TOKENIZER_COMMIT, TOKENIZER_REPO, assert_one_line_error
from test_hub_http import assert_golden, fixture_repos, hub_config, run


class ClosedPort:
    """An endpoint where nothing listens: the port of a socket bound, then closed."""

    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{probe.getsockname()[1]}"


def timed(*args) -> tuple[object, float]:
    started = time.monotonic()
    result = run(*args)
    return result, time.monotonic() - started


def refusing_offline(tmp_path) -> float:
    """The seconds a make takes to start and refuse a build with nothing cached, offline (it reaches for no
    hub at all): what a refusal at once costs on this machine now, loaded or not."""
    result, seconds = timed(ClosedPort(), tmp_path / "hf-offline", "make", str(hub_config(tmp_path)), "--offline",
                            "--out", str(tmp_path / "out-offline"))
    assert result.returncode == 1, result.stderr
    return seconds


# huggingface_hub alone retries for 24 s: a refusal at once takes well under that beyond an offline one's time
RETRIES = 12


def test_make_with_the_hub_unreachable_and_nothing_cached_is_one_line_at_once(tmp_path):
    result, seconds = timed(ClosedPort(), tmp_path / "hf", "make", str(hub_config(tmp_path)), "--out",
                            str(tmp_path / "out"))
    assert_one_line_error(result, f"model {TOKENIZER_REPO}@{TOKENIZER_COMMIT}: the hub is unreachable (",
                          "Connection refused) and it is not in the cache",
                          f"run 'databuild fetch {TINY}' on a machine that reaches the hub",
                          f"'databuild make {TINY} --offline'", "--dataset-dir / --tokenizer-dir")
    assert seconds < refusing_offline(tmp_path) + RETRIES, seconds
    assert not (tmp_path / "out").exists()


def test_fetch_with_the_hub_unreachable_is_one_line_at_once(tmp_path):
    closed = ClosedPort()
    result, seconds = timed(closed, tmp_path / "hf", "fetch", str(hub_config(tmp_path)))
    assert_one_line_error(result, f"dataset {SOURCE_REPO}@{SOURCE_COMMIT}: the hub at {closed.url} is unreachable (",
                          "fetch on a machine that reaches it")
    assert seconds < refusing_offline(tmp_path) + RETRIES, seconds


def test_with_the_hub_unreachable_a_cached_build_still_makes(tmp_path):
    """The advice followed: fetched where the hub answered, then built where it does not, without --offline."""
    config = hub_config(tmp_path)
    with HubServer(fixture_repos()) as server:
        assert run(server, tmp_path / "hf", "fetch", str(config)).returncode == 0
    result, seconds = timed(ClosedPort(), tmp_path / "hf", "make", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert_golden(tmp_path / "out")
    offline = run(ClosedPort(), tmp_path / "hf", "make", str(config), "--offline", "--out", str(tmp_path / "again"))
    assert offline.returncode == 0, offline.stderr
    assert (tmp_path / "again" / f"{TINY}.parquet").read_bytes() == (tmp_path / "out" / f"{TINY}.parquet").read_bytes()
