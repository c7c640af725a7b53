"""`databuild init`, then `make`, first try: from local folders only, or from a hub cache only (offline,
revisions resolved through the cache's refs/), a two-source mixture of two formats with a tokenizer
whose template has no generation tags; the rows equal those of a config written here by hand with
the same pins (hashed here with hashlib). And what init cannot decide, it asks for by option."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ruamel.yaml import YAML

from conftest import PHI3, REPO, SOURCE_DIR, TOKENIZER_DIR, databuild_here, databuild_in_a_process, needs_phi3
from test_ends_of_turn import chatml_tokenizer
from test_hub import lay_out_repo

SHAREGPT_FROM = {"user": "human", "assistant": "gpt", "system": "system"}
HUB_COMMITS = {"org/tok": "a" * 40, "org/tulu": "b" * 40, "org/chat": "c" * 40}


def sharegpt_source(tmp_path):
    """Fifty fixture conversations in ShareGPT's schema (conversations of from/value), ids of their own."""
    table = pq.read_table(sorted((SOURCE_DIR / "data").glob("*.parquet"))[1]).slice(0, 50)
    rows = [{"id": f"sg-{row['id']}", "conversations": [{"from": SHAREGPT_FROM[m["role"]], "value": m["content"]}
                                                        for m in row["messages"]]} for row in table.to_pylist()]
    directory = tmp_path / "chat"
    (directory / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), directory / "data" / "train-00000-of-00001.parquet")
    return directory


def sha256s(directory, names):
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in names}


def databuild(*args, cwd, cache=None):
    """`databuild ARGS` from `cwd`: on local folders, in this process (conftest.databuild_here); reading the
    hub cache `cache`, offline, in a process of its own, started with the environment that names them."""
    if cache is None:
        return databuild_here(*args, cwd=cwd)
    return subprocess.run([sys.executable, "-m", "databuild", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=hub_environment(cache), timeout=300)


def hub_environment(cache):
    """The environment of a process that reads the hub cache `cache` only (offline)."""
    return {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_CACHE": str(cache),
            "HF_HOME": str(cache.parent / "hf-home"), "HF_HUB_OFFLINE": "1"}


def databuild_each(*commands, cwd, cache=None):
    """databuild's results for each command (a sequence of its arguments), run in turn from `cwd`: in this
    process on local folders, in one process of its own reading the hub cache `cache` (its start and
    imports paid once, not once a command)."""
    if cache is None:
        return [databuild_here(*command, cwd=cwd) for command in commands]
    return databuild_in_a_process(*commands, env=hub_environment(cache), cwd=cwd)


def hand_written(path, tokenizer, sources, end_of_turn, origin):
    """The config a careful user writes for the same inputs and pins."""
    def where(directory, repo):
        if origin == "hub":
            return {"repo": repo, "revision": HUB_COMMITS[repo]}
        return {"dir": str(directory)}

    tok_dir, tok_files = tokenizer
    raw = {"name": "by-hand", "loss_mask": "assistant", "seed": 0, "row_tokens": 256, "rows": 6,
           "end_of_turn": list(end_of_turn),
           "tokenizer": {**where(tok_dir, "org/tok"), "sha256": sha256s(tok_dir, tok_files)},
           "sources": [{**where(d, repo), "format": fmt,
                        "sha256": sha256s(d, [p.relative_to(d).as_posix() for p in sorted(d.glob("data/*"))])}
                       for d, repo, fmt in sources]}
    YAML(typ="safe", pure=True).dump(raw, path)
    return path


def init_then_make(tmp_path, tokenizer, end_of_turn, origin):
    """init and make the mixture (tulu messages + ShareGPT), then make the hand-written config: same rows."""
    tok_dir, tok_files = tokenizer
    chat = sharegpt_source(tmp_path)
    cache = None
    if origin == "hub":
        cache = tmp_path / "hub"
        lay_out_repo(cache, "model", "org/tok", HUB_COMMITS["org/tok"], {f: tok_dir / f for f in tok_files})
        for repo, directory in (("org/tulu", SOURCE_DIR), ("org/chat", chat)):
            lay_out_repo(cache, "dataset", repo, HUB_COMMITS[repo],
                         {p.relative_to(directory).as_posix(): p for p in sorted(directory.glob("data/*"))})
        given = ["--tokenizer", "org/tok", "--source", "org/tulu@main", "--source", "org/chat", "--offline"]
    else:
        given = ["--tokenizer", tok_dir, "--source", SOURCE_DIR, "--source", chat]
    work = tmp_path / "work"
    work.mkdir()
    by_hand = hand_written(tmp_path / "by-hand.yaml", tokenizer,
                           [(SOURCE_DIR, "org/tulu", "messages"), (chat, "org/chat", "sharegpt")], end_of_turn, origin)
    made, built, reference = databuild_each(("init", "mixed", *given, "--rows", 6, "--row-tokens", 256),
                                            ("make", "mixed", "--offline"),
                                            ("make", by_hand, "--out", tmp_path / "by-hand", "--offline"),
                                            cwd=work, cache=cache)
    assert made.returncode == 0, made.stderr
    text = (work / "configs" / "mixed.yaml").read_text()
    assert built.returncode == 0, built.stderr  # first try
    assert "where the source rows went" in built.stdout
    assert reference.returncode == 0, reference.stderr
    rows = [pq.read_table(p) for p in (work / "build" / "mixed.parquet",
                                                        tmp_path / "by-hand" / "by-hand.parquet")]
    assert rows[0].equals(rows[1]) and rows[0].num_rows == 6
    return text


def test_init_then_make_from_local_folders(tmp_path):
    tok = chatml_tokenizer(tmp_path, eos_token_id=[5, 7])
    files = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"]
    text = init_then_make(tmp_path, (tok, files), ["<|endoftext|>", "<|im_end|>"], "local")
    assert "format: messages # detected from the schema" in text and "format: sharegpt # detected" in text
    assert "repo:" not in text and "revision:" not in text  # pinned by content alone
    assert "generation_config.json's eos_token_id" in text
    # a comment on every top-level key
    for line in text.splitlines():
        if line and not line.startswith((" ", "-", "#")) and not line.startswith("description"):
            assert "#" in line or line.endswith(":"), line


def test_init_then_make_from_a_hub_cache_offline(tmp_path):
    tok = chatml_tokenizer(tmp_path, eos_token_id=7)
    files = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"]
    text = init_then_make(tmp_path, (tok, files), ["<|im_end|>"], "hub")
    assert f'revision: "{HUB_COMMITS["org/tulu"]}"  # \'main\' resolved to its commit' in text
    assert f'revision: "{HUB_COMMITS["org/tok"]}"' in text and "dir:" not in text


@needs_phi3
def test_init_then_make_with_phi3(tmp_path):
    files = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]
    text = init_then_make(tmp_path, (PHI3, files), ["<|assistant|>", "<|endoftext|>", "<|end|>"], "local")
    assert "the template has no generation tags" in text


def untagged_harmony(tmp_path):
    """The fixture's harmony template without its generation tags: the assistant rule cannot close its
    turns (<|end|>, <|return|>), and muse_spark is the strategy for it."""
    directory = tmp_path / "harmony"
    shutil.copytree(TOKENIZER_DIR, directory)
    template = directory / "chat_template.jinja"
    template.write_text(re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", template.read_text()))
    return directory


@pytest.mark.parametrize("change, message", [
    ({"rows": None}, "init cannot decide rows: pass --rows N"),
    ({"tokenizer": "no_eot"}, "pass --end-of-turn '<|im_end|>'"),
    ({"tokenizer": "muse"}, "the chat template reads the clock (strftime_now): pass --current-date YYYY-MM-DD"),
    ({"tokenizer": "untagged_harmony", "date": True}, "it writes harmony turns: pass --loss-mask muse_spark"),
    ({"source": "ambiguous"}, "the schema fits the formats messages, sharegpt: pass --format NAME"),
    ({"source": "nothing"}, "no known format fits the schema (id: string, text: string)"),
    ({"source": "org/absent"}, "dataset org/absent@main: not in the hub cache and offline"),
    ({"exists": True}, "exists: pass --force to replace it"),
    ({"format": ["sharegpt", "auto"]}, "--format is given 2 times for 1 sources"),
])
def test_what_init_cannot_decide_it_asks_for(tmp_path, change, message):
    tokenizers = {"no_eot": chatml_tokenizer(tmp_path), "muse": TOKENIZER_DIR,
                  "untagged_harmony": untagged_harmony(tmp_path),
                  None: chatml_tokenizer(tmp_path / "ok", eos_token_id=7)}
    tables = {"ambiguous": pa.table({"messages": [[{"role": "user", "content": "a"}]],
                                     "conversations": [[{"from": "human", "value": "a"}]]}),
              "nothing": pa.table({"id": ["x"], "text": ["y"]})}
    source = change.get("source", SOURCE_DIR)
    if source in tables:
        (tmp_path / source / "data").mkdir(parents=True)
        pq.write_table(tables[source], tmp_path / source / "data" / "train-00000-of-00001.parquet")
        source = tmp_path / source
    if change.get("exists"):
        (tmp_path / "configs").mkdir()
        (tmp_path / "configs" / "x.yaml").write_text("name: x\n")
    args = ["init", "x", "--tokenizer", tokenizers[change.get("tokenizer")], "--source", source, "--row-tokens", 64,
            *([] if "rows" in change else ["--rows", 2]), "--offline",
            *(["--current-date", "2026-10-01"] if change.get("date") else [])]
    for fmt in change.get("format", []):
        args += ["--format", fmt]
    # a repo to look up in an empty hub cache; every other case is refused before init reads the hub
    result = databuild(*args, cwd=tmp_path, cache=tmp_path / "empty-cache" if source == "org/absent" else None)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "configs" / "x.yaml").exists() or change.get("exists")
    assert not list(tmp_path.glob("configs/.*partial"))


def test_init_help_has_examples():
    result = subprocess.run([sys.executable, "-m", "databuild", "init", "--help"], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == 0 and "databuild init my-sft --tokenizer" in result.stdout


def test_init_resolves_a_branch_over_http_then_make_builds_offline(tmp_path):
    """Online, through huggingface_hub's real download path against the stand-in hub: `main` is asked
    of the revision API and written as its commit; the files init downloaded are what make builds from."""
    from hub_server import HubServer
    from test_hub import SOURCE_COMMIT, SOURCE_REPO, TOKENIZER_COMMIT, TOKENIZER_REPO
    from test_hub_http import fixture_repos
    from test_hub_http import run as run_against

    branches = {("dataset", SOURCE_REPO, "main"): SOURCE_COMMIT, ("model", TOKENIZER_REPO, "v1"): TOKENIZER_COMMIT}
    with HubServer(fixture_repos(), branches=branches) as server:
        made = run_against(server, tmp_path / "home", "init", "online", "--tokenizer", f"{TOKENIZER_REPO}@v1",
                           "--source", SOURCE_REPO, "--rows", "4", "--row-tokens", "512", "--loss-mask", "muse_spark",
                           "--current-date", "2026-10-01", "-o", str(tmp_path / "online.yaml"))
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "online.yaml").read_text()
    assert f'revision: "{SOURCE_COMMIT}"  # \'main\' resolved to its commit' in text
    assert f'revision: "{TOKENIZER_COMMIT}"  # \'v1\' resolved to its commit' in text
    env = {"HF_HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "home" / "hub")}
    built = subprocess.run([sys.executable, "-m", "databuild", "make", str(tmp_path / "online.yaml"), "--offline",
                            "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, **env}, timeout=300)
    assert built.returncode == 0, built.stderr


def own_data_with_bad_conversations(tmp_path):
    """Forty fixture conversations with a column no format reads and four that cannot be built: an
    answer spelling the tokenizer's EOS, one spelling the end of turn, an unknown role, no messages."""
    rows = [{"id": r["id"], "messages": r["messages"], "note": "kept aside"}
            for r in pq.read_table(sorted((SOURCE_DIR / "data").glob("*.parquet"))[0]).slice(0, 40).to_pylist()]
    next(m for m in rows[3]["messages"] if m["role"] == "assistant")["content"] += " then <|endoftext|> more"
    next(m for m in rows[5]["messages"] if m["role"] == "assistant")["content"] += " <|im_end|>"
    rows[7]["messages"][0]["role"] = "usr"
    rows[9]["messages"] = []
    directory = tmp_path / "my-data"
    (directory / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), directory / "data" / "train-00000-of-00001.parquet")
    return directory


def test_inits_config_for_ones_own_data_builds_as_it_stands(tmp_path):
    """Ordinary data holds a few conversations that cannot be built: init's config skips and counts
    them (the recipe configs stop at the first instead), and init says on the console what it decided."""
    tok = chatml_tokenizer(tmp_path, eos_token_id=[5, 7])
    data = own_data_with_bad_conversations(tmp_path)
    made = databuild("init", "mine", "--tokenizer", tok, "--source", data, "--rows", "all", "--row-tokens", 256,
                     cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    decided = made.stdout.split("decided (each with a comment in the config):\n")[1].splitlines()
    assert decided[:5] == [
        "  source 0 format: messages (detected from the schema (columns messages))",
        "  source 0 ignore_fields: note (columns the format does not read, left out on purpose; each is named in the "
        "config)",
        "  loss_mask: assistant (the template has no generation tags: each turn's target found by rendering it as "
        "inference does)",
        "  end_of_turn: <|endoftext|>, <|im_end|> (generation_config.json's eos_token_id: the tokens generate stops "
        "on; EOS <|endoftext|>)",
        "  on_bad_conversation: skip (a conversation that cannot be built is left out and counted by kind in make's "
        "summary and the manifest)"]
    text = (tmp_path / "configs" / "mine.yaml").read_text()
    assert "on_bad_conversation: skip # skip: a conversation that cannot be built is left out and counted" in text
    assert "rows: all #" in text
    built = databuild("make", "mine", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert re.search(r"dropped: malformed +2\n", built.stdout) and re.search(
        r"dropped: stop token in field +2\n", built.stdout)
    manifest = json.loads((tmp_path / "build" / "mine.manifest.json").read_text())
    assert manifest["counts"]["conversations_skipped"]["stop_token_in_field"] == 2
    assert sorted(s["id"] for s in manifest["skipped_conversations"]) == ["tiny-0003", "tiny-0005", "tiny-0007",
                                                                          "tiny-0009"]


@pytest.mark.parametrize("bad, reason", [
    (lambda messages: [{k: v for k, v in m.items() if k != "role"} if n == 0 else m for n, m in enumerate(messages)],
     "message 0: no role (missing or null; expected one of system, developer, user, assistant, tool)"),
    (lambda messages: "hello", "a string in place of a list of messages"),
    (lambda messages: ["hello", *messages[1:]], "message 0 is a string, not an object"),
])
def test_json_lines_with_a_bad_row_in_the_sample_are_detected_and_the_row_skipped(tmp_path, bad, reason):
    """A message without its role key (or a string in place of the messages, or of one message) in a JSON Lines
    source made the whole messages column Json, and init refused the source ("no known format fits the
    schema"): the format is detected, and make skips and counts that row."""
    tok = chatml_tokenizer(tmp_path, eos_token_id=[5, 7])
    rows = pq.read_table(sorted((SOURCE_DIR / "data").glob("*.parquet"))[0]).slice(0, 20).to_pylist()
    rows[4]["messages"] = bad(rows[4]["messages"])
    directory = tmp_path / "my-data"
    (directory / "data").mkdir(parents=True)
    (directory / "data" / "train-00000-of-00001.jsonl").write_text(
        "".join(json.dumps({"id": r["id"], "messages": r["messages"]}) + "\n" for r in rows))
    made = databuild("init", "mine", "--tokenizer", tok, "--source", directory, "--rows", "all", "--row-tokens", 256,
                     cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "  source 0 format: messages (detected from the schema (columns messages))" in made.stdout
    built = databuild("make", "mine", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert re.search(r"dropped: malformed +1\n", built.stdout), built.stdout
    assert ("  which ones, and why: skipped_conversations (1) in the manifest, each with its id, file, row and "
            "reason\n") in built.stdout  # the funnel counts it; where to find which one
    manifest = json.loads((tmp_path / "build" / "mine.manifest.json").read_text())
    [skipped] = manifest["skipped_conversations"]
    assert skipped["id"] == rows[4]["id"] and skipped["reason"].endswith(reason), skipped


def test_a_folder_of_jsonl_files_of_other_names_is_told_the_card_that_names_them(tmp_path):
    """`part-0.jsonl` in a folder is no layout databuild knows: the refusal names the layouts and the dataset
    card that can name any files (it named the layouts only), and the card it names then works."""
    tok = chatml_tokenizer(tmp_path, eos_token_id=[5, 7])
    rows = pq.read_table(sorted((SOURCE_DIR / "data").glob("*.parquet"))[0]).slice(0, 10).to_pylist()
    directory = tmp_path / "my-data"
    directory.mkdir()
    (directory / "part-0.jsonl").write_text("".join(json.dumps({"id": r["id"], "messages": r["messages"]}) + "\n"
                                                    for r in rows))
    args = ("init", "mine", "--tokenizer", tok, "--source", directory, "--rows", "all", "--row-tokens", 256)
    made = databuild(*args, cwd=tmp_path)
    assert made.returncode == 1 and made.stderr.count("\n") == 1, made.stderr
    assert "no files data/train-*.EXT, data/train.EXT or train.EXT" in made.stderr and \
        "and no README.md naming the split's files (its YAML header's configs: data_files" in made.stderr
    (directory / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                         "    path: part-*.jsonl\n---\n")
    made = databuild(*args, cwd=tmp_path)
    assert made.returncode == 0, made.stderr


def test_the_recipe_configs_stop_at_a_bad_conversation():
    from databuild.config import load_config

    # The preference fixture plants pairs to refuse and count (a template error, no shared prompt: issue 34);
    # its config skips them, as a build of one's own data does.
    counting = {"muse-spark-tiny-preference-v1"}
    for path in sorted((REPO / "configs").glob("*.yaml")):
        expected = "skip" if path.stem in counting else "error"
        assert load_config(path).on_bad_conversation == expected, path


@pytest.mark.parametrize("template, variables", [
    ("qwen3", ("enable_thinking",)),  # content and reasoning_content are its copies of message fields
    ("glm4moe", ("enable_thinking",)),
    ("qwen3_5_think", ("add_vision_id", "enable_thinking")),  # content is a macro's parameter there
    ("llama3_1", ("builtin_tools", "custom_tools", "date_string", "tools_in_user_message")),  # defaults if undefined
    ("gptoss", ("builtin_tools", "model_identity", "reasoning_effort")),
    ("smollm3", ("enable_thinking", "python_tools")),
    ("qwen2_5", ()),
])
def test_init_names_only_real_template_variables(template, variables):
    """The template_kwargs a template reads, from its AST: not the locals it copies message fields into,
    nor a macro's parameters, nor loop variables; a variable it gives a default when undefined is one."""
    from databuild.scaffold.template import _variables

    text = (REPO / "tests" / "fixtures" / "templates" / "real" / f"{template}.jinja").read_text()
    assert _variables({"default": text}) == variables


def test_init_asks_about_validation_and_writes_the_split(tmp_path):
    """Without --validation init says no data is held out and how to hold some out; with it, the config
    holds the split and make writes the validation file beside the training file."""
    tok = chatml_tokenizer(tmp_path, eos_token_id=[5, 7])
    made = databuild("init", "plain", "--tokenizer", tok, "--source", SOURCE_DIR, "--rows", "all", "--row-tokens", 256,
                     cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "  validation: none (nothing held out; --validation 0.05 or --validation 500 holds out" in made.stdout
    made = databuild("init", "held", "--tokenizer", tok, "--source", SOURCE_DIR, "--rows", "all", "--row-tokens", 256,
                     "--validation", "0.1", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "  validation: share 0.1 of each source" in made.stdout
    text = (tmp_path / "configs" / "held.yaml").read_text()
    assert "validation: # held out of each source by sha256(seed:id)" in text and "share: 0.1" in text
    built = databuild("make", "held", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "build" / "held.validation.parquet").is_file() and "validation " in built.stdout
    refused = databuild("init", "bad", "--tokenizer", tok, "--source", SOURCE_DIR, "--rows", "all", "--row-tokens",
                        256, "--validation", "1.5", cwd=tmp_path)
    assert refused.returncode == 2 and "a share in (0, 1)" in refused.stderr
