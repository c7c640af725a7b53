"""A Qwen3-style tokenizer folder for the agentic bench (run.py --agentic): a real 32k BPE (the Phi-3-mini
reference tokenizer's tokenizer.json) with Qwen3's special tokens added after its own ids, Qwen3's chat
template (tests/fixtures/templates/real/qwen3.jinja: tool calls, tool results, reasoning it drops from the
answers before the last user message, so databuild infers the targets and expands the history), and
Qwen3's ends of generation (<|im_end|>, <|endoftext|>) as its EOS and generation config. Tokens per
word are Phi-3's; what the template writes and what the rule must prove are Qwen3's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

QWEN3_TEMPLATE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "templates" / "real" / "qwen3.jinja"
QWEN3_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>")
EOS, STOPS = "<|im_end|>", ("<|im_end|>", "<|endoftext|>")


def qwen3_style(base: Path, directory: Path) -> Path:
    """`base`'s tokenizer in `directory` (made once) as described above."""
    if (directory / "chat_template.jinja").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    data = json.loads((base / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in data["added_tokens"]}
    next_id = max(max(data["model"]["vocab"].values()), max(ids.values())) + 1
    config = json.loads((base / "tokenizer_config.json").read_text())
    for token in QWEN3_TOKENS:
        if token not in ids:
            added = {"content": token, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                     "special": True}
            data["added_tokens"].append({"id": next_id, **added})
            config.setdefault("added_tokens_decoder", {})[str(next_id)] = added  # transformers reads them here
            ids[token], next_id = next_id, next_id + 1
    (directory / "tokenizer.json").write_text(json.dumps(data))
    config.pop("chat_template", None)
    config.update(eos_token=EOS, pad_token=EOS, bos_token=None)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [ids[t] for t in STOPS]}))
    shutil.copyfile(QWEN3_TEMPLATE, directory / "chat_template.jinja")
    return directory
