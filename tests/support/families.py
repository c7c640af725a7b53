"""Real template families (tests/fixtures/templates/real, see its README) paired with the fixture tokenizer:
a copy of muse-tiny-tokenizer with each family's special tokens added, and the family's stop tokens (its
generation_config.json eos_token_id(s) and tokenizer EOS, as the model cards ship them)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from conftest import TEMPLATES, TOKENIZER_DIR

REAL = TEMPLATES / "real"
KWARGS = {"current_date": "2026-10-01"}
PINNED_NOW = dt.datetime(2026, 10, 1)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class Family:
    name: str
    template: str  # file under REAL
    tokens: tuple[str, ...]  # special tokens the template writes
    eos: str
    stops: tuple[str, ...]  # end_of_turn besides EOS: the generation config's eos_token_id(s)
    bos: str | None = None
    tagged: bool = False  # the authors' own {% generation %} tags
    tool_calls: str = "many"  # many, one (at most one per message), none (the template does not write them)
    reasoning: str | None = None  # the message key the template reads reasoning from, if any
    arguments: str = "any"  # a tool call's arguments: any (an object or its JSON text), object (the template
    # iterates them)
    rstrip: tuple[str, ...] = ()  # special tokens that take the whitespace after them (Phi-3's, in its tokenizer.json)
    unbounded: str = ""  # why the family's refusal rate is not held under 5% (empty: it is)


FAMILIES = {f.name: f for f in [
    Family("qwen2_5", "qwen2_5.jinja", ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"),
           "<|im_end|>", ("<|endoftext|>",)),
    Family("qwen3", "qwen3.jinja", ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                                    "<think>", "</think>"), "<|im_end|>", ("<|endoftext|>",),
           reasoning="reasoning_content"),
    Family("llama3_1", "llama3_1.jinja", ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                          "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
           "<|eot_id|>", ("<|end_of_text|>", "<|eom_id|>"), bos="<|begin_of_text|>", tool_calls="one"),
    Family("gptoss", "gptoss.jinja", ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>",
                                      "<|constrain|>", "<|endoftext|>"), "<|return|>", ("<|call|>", "<|endoftext|>"),
           tool_calls="one", reasoning="thinking"),
    Family("smollm3", "smollm3.jinja", ("<|im_start|>", "<|im_end|>", "<|endoftext|>"), "<|im_end|>",
           ("<|endoftext|>",), tagged=True, tool_calls="none"),
    Family("qwen3_5_think", "qwen3_5_think.jinja", ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>",
                                                    "</tool_call>", "<think>", "</think>"), "<|im_end|>",
           ("<|endoftext|>",), reasoning="reasoning_content", arguments="object"),
    Family("qwen3_6", "qwen3_6.jinja", ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                                        "<think>", "</think>"), "<|im_end|>", ("<|endoftext|>",),
           reasoning="reasoning_content", arguments="object"),
    Family("glm4moe", "glm4moe.jinja", ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                                        "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>"),
           "<|endoftext|>", ("<|user|>", "<|observation|>"), reasoning="reasoning_content", arguments="object"),
    Family("nemotron3_nano", "nemotron3_nano.jinja", ("<|im_start|>", "<|im_end|>", "<think>", "</think>",
                                                      "<tool_call>", "</tool_call>"), "<|im_end|>", (),
           reasoning="reasoning_content", arguments="object",
           unbounded="an answer without reasoning renders as <think></think>ANSWER while the generation prompt "
                     "(enable_thinking, the default) ends in <think>\\n: no generation gives that turn, and the rule "
                     "refuses it (mask_error)"),
    Family("cohere2", "cohere2.jinja", ("<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                                        "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|START_RESPONSE|>",
                                        "<|END_RESPONSE|>"), "<|END_OF_TURN_TOKEN|>", (), bos="<BOS_TOKEN>",
           tool_calls="none"),
    Family("phi3", "phi3.jinja", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"),
           "<|endoftext|>", ("<|end|>", "<|assistant|>"), tool_calls="none",
           rstrip=("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")),
]}


def family_tokenizer(family: Family, tmp_path: Path):
    """The fixture tokenizer with the family's special tokens added (ids after its own), its EOS and BOS,
    and the family's template as its chat template."""
    from transformers import AutoTokenizer

    directory = tmp_path / f"tokenizer-{family.name}"
    if not directory.exists():
        shutil.copytree(TOKENIZER_DIR, directory)
        data = json.loads((directory / "tokenizer.json").read_text())
        known = {t["content"] for t in data["added_tokens"]}
        next_id = max(max(data["model"]["vocab"].values()), max(t["id"] for t in data["added_tokens"])) + 1
        for token in family.tokens:
            if token not in known:
                data["added_tokens"].append({"id": next_id, "content": token, "single_word": False, "lstrip": False,
                                             "rstrip": token in family.rstrip, "normalized": False, "special": True})
                next_id += 1
            else:
                next(t for t in data["added_tokens"] if t["content"] == token)["rstrip"] = token in family.rstrip
        # the pre-tokenizer Llama 3 and Qwen2 ship (a newline run is one piece), not the fixture's GPT-2 split
        data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        (directory / "tokenizer.json").write_text(json.dumps(data))
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config.update(eos_token=family.eos, pad_token=family.eos, bos_token=family.bos)
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
        (directory / "chat_template.jinja").write_text((REAL / family.template).read_text())
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


def pin_transformers_clock(monkeypatch) -> None:
    """transformers' strftime_now reads the wall clock: pinned to the configs' current_date for the reference."""
    import transformers.utils.chat_template_utils as utils

    class Pinned(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return PINNED_NOW

    monkeypatch.setattr(utils, "datetime", Pinned)
