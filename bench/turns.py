#!/usr/bin/env python
"""What the `assistant` strategy's inference costs per assistant turn (issue 18), beside the render and the
tokenizer, on plain chat and on an agentic corpus.

    .venv/bin/python bench/turns.py [--conversations 2000] [--batch-size 256]

Plain chat: bench/corpus.py's conversations (Tulu-shaped), rendered by the Phi-3-mini reference tokenizer's
own template (../shared/reference-tokenizers/phi-3-mini, `end_of_turn: <|end|>`), or the fixture tokenizer
with the ChatML fixture template where that folder is absent. Agentic: the same text, each exchange preceded
by 0-3 rounds of tool calls (reasoning where the template writes it, one or two calls, their results) in the
transformers schema, on the
fixture tokenizer with the real Qwen2.5 template (prefix-stable: one sample per conversation) and Qwen3
(rewrites history: expanded, one sample per turn), tests/fixtures/templates/real.

For each: CPU seconds of the whole render (Encoder.render_texts), of the choice of its targets
(Encoder.choose: the inference renders and proofs), of the tokenizer (Encoder.tokenize, its Rust threads
counted: the render, or an expanded conversation's samples), and of Encoder.finish (the ids and the
masks), per token tokenized and per assistant turn. `(choose + finish) / (render + tokenize)` is what
the strategy adds to rendering and tokenizing what is written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]


def encode_timed(encoder, batch, cpu: dict[str, float]) -> tuple[list, list]:
    """One batch through an encoder's three steps, each one's CPU seconds added to cpu["render"],
    cpu["tokenize"] and cpu["finish"] (with a "choose" key in cpu, render's two halves apart, the second
    there): (encodings, encoded)."""
    t = time.process_time()
    if "choose" in cpu:
        texts = encoder.render_texts(batch)
        cpu["render"] += time.process_time() - t
        t = time.process_time()
        rendered = encoder.choose(batch, texts)
        cpu["choose"] += time.process_time() - t
    else:
        rendered = encoder.render(batch)
        cpu["render"] += time.process_time() - t
    t = time.process_time()
    encodings = encoder.tokenize(rendered)
    cpu["tokenize"] += time.process_time() - t
    t = time.process_time()
    out = encoder.finish(batch, rendered, encodings)
    cpu["finish"] += time.process_time() - t
    return encodings, out


def measure(encoder, batches) -> dict:
    cpu = {"render": 0.0, "choose": 0.0, "tokenize": 0.0, "finish": 0.0}
    tokens = turns = samples = sample_tokens = 0
    for batch in batches:
        encodings, out = encode_timed(encoder, batch, cpu)
        tokens += sum(len(e) for item in encodings for e in (item if isinstance(item, list) else [item]))
        turns += sum(1 for c in batch for m in c.messages if m["role"] == "assistant")
        samples += len(out)
        sample_tokens += sum(len(o.input_ids) for o in out)
        problems = [o.problem for o in out if o.problem is not None]
        assert not problems, problems[:3]
    strategy = cpu["choose"] + cpu["finish"]
    return {"conversations": sum(len(b) for b in batches), "samples": samples, "assistant_turns": turns,
            "tokens": tokens, "sample_tokens": sample_tokens, "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
            "choose_and_finish_us_per_assistant_turn": round(strategy / turns * 1e6, 1),
            "ns_per_token": {k: round(v / tokens * 1e9, 1) for k, v in cpu.items()},
            "choose_and_finish_over_render_plus_tokenize": round(strategy / (cpu["render"] + cpu["tokenize"]), 3)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from corpus import ConversationMaker, agentic
    from conftest import PHI3, TEMPLATES, TOKENIZER_DIR
    from databuild.encode.encoder import Encoder
    from databuild.encode.render import Renderer, load_tokenizer
    from databuild.records.conversation import Conversation
    from databuild.records.origin import Origin
    from families import FAMILIES, KWARGS, family_tokenizer

    maker = ConversationMaker(20261001)
    kinds = ["general", "math", "code", "multilingual", "general"]
    plain = [maker.messages(kinds[k % len(kinds)]) for k in range(args.conversations)]

    def batches(conversations):
        records = [Conversation(Origin(k, k, f"c-{k}", "s"), tuple(m), tools=tools)
                   for k, (m, tools) in enumerate(conversations)]
        return [records[k:k + args.batch_size] for k in range(0, len(records), args.batch_size)]

    results = {}
    if PHI3 is not None:
        tokenizer, end_of_turn, name = load_tokenizer(PHI3), ("<|end|>",), "plain chat, phi-3-mini"
        template = tokenizer.chat_template
    else:
        tokenizer, end_of_turn, name = load_tokenizer(TOKENIZER_DIR), ("<|im_end|>",), "plain chat, fixture chatml"
        template = (TEMPLATES / "chatml.jinja").read_text().replace("{%- generation -%}", "").replace(
            "{%- endgeneration -%}", "")
    encoder = Encoder(tokenizer, Renderer(template, dict(tokenizer.special_tokens_map), KWARGS), "assistant",
                      end_of_turn)
    results[name] = measure(encoder, batches([(m, None) for m in plain]))
    from agentic import TOOLS
    with tempfile.TemporaryDirectory() as root:
        for family in ("qwen2_5", "qwen3"):
            spec = FAMILIES[family]
            rng = random.Random(18)
            tools_corpus = [(agentic(m, rng, spec.reasoning), TOOLS) for m in plain]
            tokenizer = family_tokenizer(spec, Path(root))
            encoder = Encoder(tokenizer, Renderer.for_tokenizer(tokenizer, KWARGS), "assistant", spec.stops)
            results[f"agentic, {family}"] = measure(encoder, batches(tools_corpus))
    for name, figures in results.items():
        print(f"{name}: {json.dumps(figures)}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
