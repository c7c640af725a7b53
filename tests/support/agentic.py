"""Generated agentic conversations (tool calls, tool results, a tools list, reasoning) in the schema
transformers and TRL document for tool calling, from a `random.Random`: the same for a seed."""

from __future__ import annotations

import json
import random

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}},
         {"type": "function", "function": {"name": "search", "description": "Search the web",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
PIECES = ["Paris", "the weather", " is ", "18C", "sunny", "é", "你好", "👩‍💻", "\n", "  ", "ok", "{", "}", '"q"',
          "<b>", "x", "Let me check.", "get_weather", "Rome", "\t", "1+1=2", "done"]


def text(rng: random.Random, empty_ok: bool = False) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0 if empty_ok else 1, 6)))


def answer(rng: random.Random, empty_ok: bool = False, leading_space: bool = False) -> str:
    """An assistant's text: as models write it, not starting with whitespace, unless `leading_space`
    (then a tokenizer may join it to the prompt's last token: test_families counts those refusals)."""
    written = text(rng, empty_ok)
    return written if leading_space else written.lstrip()


def call(rng: random.Random, k: int, arguments: str = "any") -> dict:
    name = rng.choice(["get_weather", "search"])
    values = {"city" if name == "get_weather" else "q": text(rng)}
    as_text = arguments == "any" and rng.random() < 0.3
    return {"id": f"call_{k}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(values) if as_text else values}}


def conversation(rng: random.Random, tool_calls: str = "many", reasoning: str | None = "reasoning_content",
                 leading_space: bool = False, arguments: str = "any"):
    """(messages, tools): an optional system message, 1-3 user turns, each answered after 0-2 rounds of
    tool calls (when the family writes them) and results, optionally ending on a user message. `arguments`
    "object" gives every call's arguments as an object (templates that iterate them)."""
    messages = [{"role": "system", "content": text(rng)}] if rng.random() < 0.4 else []
    calls_made = 0
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": text(rng)})
        for _ in range(rng.randint(0, 2) if tool_calls != "none" else 0):
            n = 1 if tool_calls == "one" else rng.randint(1, 2)
            calls = [call(rng, calls_made + k, arguments) for k in range(n)]
            calls_made += n
            step = {"role": "assistant", "content": rng.choice([None, "", answer(rng, False, leading_space)]),
                    "tool_calls": calls}
            if reasoning and rng.random() < 0.5:
                step[reasoning] = answer(rng, False, leading_space)
                if reasoning == "thinking":  # gpt-oss: content and thinking not both beside tool calls
                    step["content"] = None
            messages.append(step)
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                                 "content": text(rng)})
        final = {"role": "assistant", "content": answer(rng, True, leading_space)}
        if reasoning and rng.random() < 0.5:
            final[reasoning] = answer(rng, False, leading_space)
        messages.append(final)
    if rng.random() < 0.2:
        messages.append({"role": "user", "content": text(rng)})
    return messages, (TOOLS if calls_made or rng.random() < 0.3 else None)
