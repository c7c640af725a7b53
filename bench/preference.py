#!/usr/bin/env python
"""What a preference pair costs to encode (issue 34), against the tokenizer's floor and against SFT's
encoding of the same two conversations.

    .venv/bin/python bench/preference.py [--pairs 2000] [--batch-size 256]

Pairs from bench/corpus.py's Tulu-shaped conversations: the prompt every message but the last answer, the
chosen completion that answer, the rejected one the last answer of another conversation. Rendered by the
Phi-3-mini reference tokenizer's own template (../shared/reference-tokenizers/phi-3-mini, `assistant`
strategy, `end_of_turn: <|end|>`), or the fixture tokenizer with the ChatML fixture template where that
folder is absent.

CPU seconds (process time: the tokenizer's Rust threads counted) of PairEncoder's three steps: render
(the prompt with its generation prompt and each whole conversation), tokenize (all of them in one call: the
floor a pair cannot go below), finish (the SFT strategy's masks on each whole conversation and the prefix
checks); and of the SFT Encoder on the two whole conversations of each pair (encode_batch), the same work
without the prompt's render and the checks. Printed per pair and per token, and as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from corpus import ConversationMaker
    from turns import encode_timed
    from conftest import PHI3, TEMPLATES, TOKENIZER_DIR
    from databuild.encode.encoder import Encoder
    from databuild.encode.preference import PairEncoder
    from databuild.encode.render import Renderer, load_tokenizer
    from databuild.records.conversation import Conversation
    from databuild.records.origin import Origin
    from databuild.records.preference import PreferenceRecord

    if PHI3 is not None:
        tokenizer, end_of_turn, name = load_tokenizer(PHI3), ("<|end|>",), "phi-3-mini"
        template = tokenizer.chat_template
    else:
        tokenizer, end_of_turn, name = load_tokenizer(TOKENIZER_DIR), ("<|im_end|>",), "fixture chatml"
        template = (TEMPLATES / "chatml.jinja").read_text().replace("{%- generation -%}", "").replace(
            "{%- endgeneration -%}", "")
    maker = ConversationMaker(20261203)
    kinds = ["general", "math", "code", "multilingual", "general"]
    conversations = [maker.messages(kinds[k % len(kinds)]) for k in range(args.pairs + 1)]
    records = [PreferenceRecord(Origin(k, k, f"p-{k}", "bench"), tuple(c[:-1]), ((c[-1],), (conversations[k + 1][-1],)))
               for k, c in enumerate(conversations[:-1])]
    renderer = Renderer(template, dict(tokenizer.special_tokens_map), {})
    pairs = PairEncoder(Encoder(tokenizer, renderer, "assistant", end_of_turn, train_turns="flagged"))
    sft = Encoder(tokenizer, renderer, "assistant", end_of_turn)
    batches = [records[k:k + args.batch_size] for k in range(0, len(records), args.batch_size)]

    cpu, whole = {"render": 0.0, "tokenize": 0.0, "finish": 0.0}, 0.0
    tokens = refused = 0
    for batch in batches:
        encodings, out = encode_timed(pairs, batch, cpu)
        tokens += sum(len(e) for e in encodings)
        refused += sum(o.problem is not None for o in out)
        conversations_of = [Conversation(r.origin, r.prompt + c) for r in batch for c in r.completions]
        t = time.process_time()
        sft.encode_batch(conversations_of)
        whole += time.process_time() - t
    render, tokenize, finish = cpu["render"], cpu["tokenize"], cpu["finish"]
    total = render + tokenize + finish
    figures = {"tokenizer": name, "pairs": len(records), "refused": refused, "tokens_tokenized": tokens,
               "cpu_s": {"render": round(render, 3), "tokenize": round(tokenize, 3), "finish": round(finish, 3),
                         "sft_encode_of_both_conversations": round(whole, 3)},
               "us_per_pair": {"pair_encode": round(total / len(records) * 1e6, 1),
                               "tokenize_floor": round(tokenize / len(records) * 1e6, 1)},
               "ns_per_token": round(total / tokens * 1e9, 1),
               "pair_encode_over_tokenize": round(total / tokenize, 2),
               "pair_encode_over_sft_encode": round(total / whole, 3)}
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
