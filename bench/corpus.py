"""A deterministic synthetic corpus in the Tulu 3 SFT schema, shaped like the mixture.

Nothing here is copied from Tulu: the text is drawn from a Zipf-distributed vocabulary (a few
hundred common English words, then synthetic syllable words for the long tail) so that the
tokenizer sees realistic tokens per word and realistic rare-word merges. The shape follows the
Tulu 3 SFT mixture:

- turns: ~80% one user+assistant exchange, the rest 2-4 exchanges (up to 8 messages);
- ~15% of conversations start with a system prompt;
- user messages: lognormal, median ~60 words, a long tail to a few thousand;
- assistant answers: lognormal, median ~250 words (mostly 100-600), a long tail to ~4,000;
- five synthetic sources (general chat, math, code, multilingual, long-form) whose text differs
  in the ways that change tokenization: digits and LaTeX, code with indentation, accented and CJK
  text.

The same (conversations, seed, format) always gives the same parquet bytes (single writer, fixed
options). `format` writes the same conversations in another source format databuild reads
(databuild/sources/formats): `sharegpt` (conversations of from/value, human/gpt/system) or
`prompt_completion` (conversational: all but the last message, then the last), to measure the
format adapters against the messages form; `agentic` writes them with tool rounds and reasoning added
(`agentic`), for the agentic bench (run.py --agentic).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from databuild.sources.record_arrow import SOURCE_SCHEMA

GENERATOR_VERSION = 1  # bump when the text or shape changes: it keys the on-disk cache
SHARD_ROWS = 16_384
MESSAGES = SOURCE_SCHEMA.field("messages").type
FROM = {"system": "system", "user": "human", "assistant": "gpt"}
SEARCH_TOOL = {"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def agentic(messages: list[dict], rng: random.Random, reasoning: str | None) -> list[dict]:
    """The conversation with 0-3 tool rounds before each answer, and reasoning (under the key the
    template reads, none for a template that writes none) on the answers and calls."""
    out = []
    for message in messages:
        if message["role"] == "assistant":
            for k in range(rng.choice([0, 1, 1, 2, 3])):
                calls = [{"id": f"c{k}{j}", "type": "function",
                          "function": {"name": "search", "arguments": {"q": message["content"][:40 + 10 * j]}}}
                         for j in range(rng.choice([1, 1, 2]))]
                out.append({"role": "assistant", "content": None, "tool_calls": calls,
                            **({reasoning: message["content"][:200]} if reasoning else {})})
                out += [{"role": "tool", "tool_call_id": c["id"], "name": "search",
                         "content": message["content"][-400:]} for c in calls]
            message = {**message, **({reasoning: message["content"][:300]} if reasoning else {})}
        out.append(message)
    return out


def _agentic_columns(messages: list[dict]) -> dict:
    """The `agentic` format: the messages form in TRL's documented tool-calling schema (tool_calls with
    their arguments as JSON text, tool results, reasoning_content), tool rounds and reasoning added by
    `agentic` from a generator seeded by the conversation's last text (the same conversation, the same
    rounds), the search tool listed as JSON text."""
    chat = agentic(messages, random.Random(messages[-1]["content"]), "reasoning_content")
    for message in chat:
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    return {"messages": chat, "tools": json.dumps([SEARCH_TOOL])}


AGENTIC_MESSAGE = pa.struct([
    ("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
    ("tool_calls", pa.list_(pa.struct([("id", pa.string()), ("type", pa.string()), ("function", pa.struct(
        [("name", pa.string()), ("arguments", pa.string())]))]))),
    ("tool_call_id", pa.string()), ("name", pa.string())])


SCHEMAS = {  # format: (schema, the columns of one conversation from its messages)
    "messages": (SOURCE_SCHEMA, lambda messages: {"messages": messages}),
    "agentic": (pa.schema([("id", pa.string()), ("messages", pa.list_(AGENTIC_MESSAGE)), ("source", pa.string()),
                           ("tools", pa.string())]), _agentic_columns),
    "sharegpt": (pa.schema([("id", pa.string()), ("conversations", pa.list_(pa.struct([
        ("from", pa.string()), ("value", pa.string())]))), ("source", pa.string())]),
        lambda messages: {"conversations": [{"from": FROM[m["role"]], "value": m["content"]} for m in messages]}),
    "prompt_completion": (pa.schema([("id", pa.string()), ("prompt", MESSAGES), ("completion", MESSAGES),
                                     ("source", pa.string())]),
                          lambda messages: {"prompt": messages[:-1], "completion": messages[-1:]}),
}

COMMON = (
    "the of and to a in is it you that he was for on are with as I his they be at one have this from "
    "or had by not word but what some we can out other were all there when up use your how said an each "
    "she which do their time if will way about many then them write would like so these her long make "
    "thing see him two has look more day could go come did number sound no most people my over know "
    "water than call first who may down side been now find any new work part take get place made live "
    "where after back little only round man year came show every good me give our under name very through "
    "just form sentence great think say help low line differ turn cause much mean before move right boy "
    "old too same tell does set three want air well also play small end put home read hand port large "
    "spell add even land here must big high such follow act why ask men change went light kind off need "
    "house picture try us again animal point mother world near build self earth father head stand own page "
    "should country found answer school grow study still learn plant cover food sun four between state keep "
    "eye never last let thought city tree cross farm hard start might story saw far sea draw left late run "
    "while press close night real life few north open seem together next white children begin got walk "
    "example ease paper group always music those both mark often letter until mile river car feet care "
    "second book carry took science eat room friend began idea fish mountain stop once base hear horse cut "
    "sure watch color face wood main enough plain girl usual young ready above ever red list though feel "
    "talk bird soon body dog family direct pose leave song measure door product black short numeral class "
    "wind question happen complete ship area half rock order fire south problem piece told knew pass since "
    "top whole king space heard best hour better true during hundred five remember step early hold west "
    "ground interest reach fast verb sing listen six table travel less morning ten simple several vowel "
    "toward war lay against pattern slow center love person money serve appear road map rain rule govern "
    "pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan "
    "figure star box noun field rest correct able pound done beauty drive stood contain front teach week "
    "final gave green oh quick develop ocean warm free minute strong special mind behind clear tail produce "
    "fact street inch multiply nothing course stay wheel full force blue object decide surface deep moon "
    "island foot system busy test record boat common gold possible plane stead dry wonder laugh thousand "
    "ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill east paint "
    "language among however therefore function variable approach analysis provide specific consider "
    "important following algorithm response user data model result value process method information"
).split()
SYLLABLES = ("ka ri to mu sen vel dor ith an qu ex pro tra mon bel ul zor fi gen lo nar pri sta ver "
             "com de ple tion ment ous ive able ize ish ful ness ary ent ity cal tic ism").split()
ACCENTED = ("él está también educación más niño corazón über grün straße fähig déjà café"
            " naïve façade été très garçon année ação coração são não").split()
CJK = ("数据 模型 训练 学习 问题 答案 世界 时间 天气 城市 朋友 计算 语言 系统 方法 结果 "
       "データ モデル 学習 質問 回答 世界 時間 言語 데이터 모델 학습 질문 답변 세계 언어").split()
FOREIGN = ACCENTED + CJK
CODE_LINES = (
    "def {w}(x, y):", "    return x + y * {n}", "for i in range({n}):", "    total += values[i]",
    "if {w} is None:", "    raise ValueError(\"{w} must be set\")", "class {W}:", "    def __init__(self):",
    "        self.{w} = []", "import numpy as np", "result = np.array([{n}, {n}, {n}])",
    "print(f\"{{{w}}} = {{result}}\")", "const {w} = await fetch(`/api/{w}/${{id}}`);",
    "    }} else {{", "SELECT {w}, COUNT(*) FROM {w}s GROUP BY {w};", "# {w}: {n} items",
)
SOURCES = (  # (name, share, kind); shares loosely follow the mixture's chat/math/code/multilingual split
    ("bench/general-chat", 0.38, "general"), ("bench/math", 0.25, "math"), ("bench/code", 0.17, "code"),
    ("bench/multilingual", 0.12, "multilingual"), ("bench/long-form", 0.08, "long"),
)


@dataclass(frozen=True)
class CorpusInfo:
    root: Path
    conversations: int
    shards: int
    characters: int
    bytes: int


class TextBank:
    """Draws words Zipf-distributed over a fixed vocabulary; punctuation and breaks as word variants."""

    TAIL_SHARE = 0.12  # running text outside the ~700 most common words (English: roughly this much)
    # A drawn word becomes: plain, "word.", "word,", "Word" or "word.\n\n" (paragraph break).
    VARIANT_P = (0.82, 0.07, 0.06, 0.03, 0.02)

    def __init__(self, rng: np.random.Generator, tail_words: int = 20_000):
        tail = {"".join(rng.choice(SYLLABLES, size=int(rng.integers(1, 4)))) for _ in range(tail_words)}
        # Sorted for determinism, then shuffled so the most frequent tail words are not all "able...".
        base = list(COMMON) + rng.permutation(sorted(tail - set(COMMON))).tolist()
        head = np.arange(1, len(COMMON) + 1, dtype=np.float64) ** -1.0
        rest = np.arange(1, len(base) - len(COMMON) + 1, dtype=np.float64) ** -1.0
        p = np.concatenate([head / head.sum() * (1 - self.TAIL_SHARE), rest / rest.sum() * self.TAIL_SHARE])
        # Inverse-CDF sampling: rng.choice(p=...) re-validates p on every call, 100x slower here.
        self.cdf = np.cumsum(p)
        self.cdf[-1] = 1.0
        self.variant_cdf = np.cumsum(self.VARIANT_P)
        self.variant_cdf[-1] = 1.0
        self.words = (base + [w + "." for w in base] + [w + "," for w in base]
                      + [w.capitalize() for w in base] + [w + ".\n\n" for w in base])
        self.size = len(base)
        self.rng = rng

    def prose(self, n: int) -> str:
        ids = np.searchsorted(self.cdf, self.rng.random(n), side="right")
        ids += self.size * np.searchsorted(self.variant_cdf, self.rng.random(n), side="right")
        text = " ".join(map(self.words.__getitem__, ids.tolist()))
        return text.replace("\n\n ", "\n\n").rstrip("\n") + "."

    def common(self, n: int) -> list[str]:
        return [COMMON[i] for i in self.rng.integers(0, len(COMMON), size=n).tolist()]


class ConversationMaker:
    def __init__(self, seed, shard: int | None = None):
        """One generator from `seed`; with `shard`, the vocabulary still from `seed` (the same in
        every shard) and the draws from a generator of the shard's own, seeded (seed, shard)."""
        self.rng = np.random.default_rng(seed)
        self.bank = TextBank(self.rng)
        if shard is not None:
            self.rng = self.bank.rng = np.random.default_rng([seed, shard])

    def _words(self, median: float, sigma: float, low: int, high: int) -> int:
        return int(np.clip(self.rng.lognormal(math.log(median), sigma), low, high))

    def _text(self, kind: str, words: int) -> str:
        rng = self.rng
        if kind == "math" and words > 20:
            a, b = rng.integers(2, 10_000, size=2)
            return (f"{self.bank.prose(words // 2)} Let $x = {a}$ and $y = {b}$, so "
                    f"$\\frac{{x}}{{y}} \\approx {a / b:.4f}$ and $x^2 + y^2 = {a * a + b * b}$. "
                    f"{self.bank.prose(words - words // 2)}")
        if kind == "code" and words > 20:
            count = max(3, words // 8)
            names, numbers = self.bank.common(count), rng.integers(0, 1000, size=count).tolist()
            lines = [CODE_LINES[i].format(w=w, W=w.capitalize(), n=n)
                     for i, w, n in zip(rng.integers(0, len(CODE_LINES), size=count).tolist(), names, numbers)]
            return f"{self.bank.prose(words // 3)}\n\n```python\n" + "\n".join(lines) + \
                f"\n```\n\n{self.bank.prose(max(1, words // 3))}"
        if kind == "multilingual" and words > 10:
            foreign = [FOREIGN[i] for i in rng.integers(0, len(FOREIGN), size=words // 3).tolist()]
            return f"{' '.join(foreign)} {self.bank.prose(words - words // 3)}"
        return self.bank.prose(words)

    def messages(self, kind: str) -> list[dict[str, str]]:
        rng, out = self.rng, []
        if rng.random() < 0.15:
            out.append({"role": "system", "content": self._text("general", self._words(40, 0.8, 5, 400))})
        exchanges = int(rng.choice([1, 2, 3, 4], p=[0.80, 0.10, 0.05, 0.05]))
        long_form = kind == "long"
        for _ in range(exchanges):
            user = self._words(300 if long_form else 60, 1.0, 3, 6000)
            answer = self._words(900 if long_form else 250, 0.6, 5, 4000)
            out.append({"role": "user", "content": self._text(kind, user)})
            out.append({"role": "assistant", "content": self._text(kind, answer)})
        return out


def _kinds(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    shares = np.array([s for _, s, _ in SOURCES])
    picks = rng.choice(len(SOURCES), size=n, p=shares / shares.sum())
    return [(SOURCES[i][0], SOURCES[i][2]) for i in picks.tolist()]


def _shard_count(conversations: int) -> int:
    return max(2, math.ceil(conversations / SHARD_ROWS))


def _write_shard(schema: pa.Schema, columns_of, maker: ConversationMaker,
                 kinds: list[tuple[str, str]], first: int, path: Path) -> tuple[int, int]:
    """Conversations first, first+1, ... (one per kind) to `path`; returns (characters, bytes)."""
    rows, chars = [], 0
    for i, (source, kind) in enumerate(kinds, first):
        messages = maker.messages(kind)
        rows.append({"id": f"bench-{i:08d}", **columns_of(messages), "source": source})
        chars += sum(len(m["content"]) for m in messages)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="snappy", row_group_size=1000)
    return chars, path.stat().st_size


def _seeded_shard(job: tuple) -> tuple[int, int]:
    """One shard of a per-shard-seeded corpus, from its own generator (seed, shard): in a process pool."""
    format, seed, shard, first, count, path = job
    schema, columns_of = SCHEMAS[format]
    maker = ConversationMaker(seed, shard)
    return _write_shard(schema, columns_of, maker, _kinds(maker.rng, count), first, path)


def write_corpus(root: Path, conversations: int, seed: int, format: str = "messages",
                 jobs: int | None = None) -> CorpusInfo:
    """Write root/data/train-0000K-of-0000N.parquet; reuse them if a finished copy is there.

    `jobs`: generate the shards in that many processes, each shard from a generator of its own,
    seeded (seed, shard). That is another corpus than the serial one (one generator for all shards)
    of the same shape, the same whatever `jobs` is; corpus_dir(..., per_shard=True) keys it apart."""
    schema, columns_of = SCHEMAS[format]
    done = root / "corpus.json"
    if done.exists():
        info = json.loads(done.read_text())
        return CorpusInfo(root, info["conversations"], info["shards"], info["characters"], info["bytes"])
    shards = _shard_count(conversations)
    bounds = np.linspace(0, conversations, shards + 1).astype(int)
    (root / "data").mkdir(parents=True, exist_ok=True)
    paths = [root / "data" / f"train-{k:05d}-of-{shards:05d}.parquet" for k in range(shards)]
    if jobs:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            jobs_ = [(format, seed, k, int(bounds[k]), int(bounds[k + 1] - bounds[k]), paths[k])
                     for k in range(shards)]
            written = list(pool.map(_seeded_shard, jobs_))
    else:
        maker = ConversationMaker(seed)
        kinds = _kinds(maker.rng, conversations)
        written = [_write_shard(schema, columns_of, maker, kinds[bounds[k]:bounds[k + 1]], int(bounds[k]),
                                paths[k]) for k in range(shards)]
    chars, size = sum(c for c, _ in written), sum(b for _, b in written)
    done.write_text(json.dumps({"conversations": conversations, "shards": shards, "characters": chars,
                                "bytes": size, "seed": seed, "generator": GENERATOR_VERSION, "format": format,
                                "per_shard_seeds": bool(jobs)}))
    return CorpusInfo(root, conversations, shards, chars, size)


def corpus_dir(cache: Path, conversations: int, seed: int, format: str = "messages", per_shard: bool = False) -> Path:
    key = hashlib.sha256(f"{GENERATOR_VERSION}:{conversations}:{seed}{':per-shard' if per_shard else ''}".encode()
                         ).hexdigest()[:12]
    name = f"corpus-{conversations}-s{seed}{'-p' if per_shard else ''}-{key}"
    return cache / name / ("" if format == "messages" else format)


def write_jsonl_copy(corpus: Path, root: Path, compression: str | None = None) -> Path:
    """The corpus' parquet shards as JSON Lines under root/data (the same rows, one per line, keys in
    the parquet's column order; each shard to a file of the same stem), `compression` "gzip" or "zstd"
    (pyarrow's streams) or None; reused when a finished copy is there."""
    suffix = {None: "", "gzip": ".gz", "zstd": ".zst"}[compression]
    done = root / "copied.json"
    if done.exists():
        return root
    (root / "data").mkdir(parents=True, exist_ok=True)
    for shard in sorted((corpus / "data").glob("*.parquet")):
        target = root / "data" / f"{shard.stem}.jsonl{suffix}"
        with (pa.CompressedOutputStream(str(target), compression) if compression else open(target, "wb")) as out:
            for batch in pq.ParquetFile(shard).iter_batches(batch_size=4096):
                out.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in batch.to_pylist()).encode())
    done.write_text(json.dumps({"from": str(corpus), "compression": compression}))
    return root
