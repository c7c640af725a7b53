"""A tokenizer repo's named chat templates (additional_chat_templates/NAME.jinja, the hub's layout)
are fetched with its other files, over HTTP from the local stand-in for the hub (tests/support/hub_server.py)."""

from __future__ import annotations

from conftest import TINY, TOKENIZER_DIR, write_config
from hub_server import HubServer
from test_hub import TOKENIZER_COMMIT, TOKENIZER_REPO
from test_hub_http import assert_golden, fixture_repos, run

NAMED = "additional_chat_templates/harmony.jinja"


def test_fetch_downloads_the_named_templates_and_an_offline_make_uses_one(tmp_path):
    repos = fixture_repos()
    # the default template plus a comment: the same renders, so the golden rows
    repos[("model", TOKENIZER_REPO, TOKENIZER_COMMIT)][NAMED] = (TOKENIZER_DIR / "chat_template.jinja").read_bytes() \
        + b"{# named #}"
    config = write_config(tmp_path / f"{TINY}.yaml", source={"dir": None}, tokenizer={"dir": None},
                          chat_template_name="harmony")
    with HubServer(repos) as server:
        result = run(server, tmp_path / "hf", "fetch", str(config))
        assert result.returncode == 0, result.stderr
        assert any(r.path.endswith(f"/{NAMED}") for r in server.requests)
        fetched = len(server.requests)
        result = run(server, tmp_path / "hf", "make", str(config), "--offline", "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
        assert server.requests[fetched:] == []
    assert_golden(tmp_path / "out")
    assert NAMED in (tmp_path / "out" / f"{TINY}.manifest.json").read_text()
