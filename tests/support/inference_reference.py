"""The `assistant` rule on untagged templates, recomputed independently of databuild: from
transformers' own renders (apply_chat_template, tokenize=False) and the tokenizer's own ids, in token
space, as data/README ("Assistant targets by inference") states it. databuild works on characters and
proves prefixes on text; this works on token ids and compares id lists.

Returns the rows (ids, mask) per sample, or the string "unbuildable: WHY" where the rule itself has
no answer (no stop token closes a turn, no generation prompt before it)."""

from __future__ import annotations


def render(tokenizer, messages, tools, kwargs, generation_prompt=False) -> str:
    return tokenizer.apply_chat_template(list(messages), tools=tools, tokenize=False,
                                         add_generation_prompt=generation_prompt, **kwargs)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def reference_rows(tokenizer, messages, tools, kwargs, stops: set[str]):
    stop_ids = {tokenizer.convert_tokens_to_ids(s) for s in stops}
    full = render(tokenizer, messages, tools, kwargs)
    full_ids = ids(tokenizer, full)
    turns = []  # [prompt text, render through its last message, its last message]
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(tokenizer, messages[:i], tools, kwargs, generation_prompt=True)
        with_it = render(tokenizer, messages[:i + 1], tools, kwargs)
        if with_it.startswith(prompt):
            turns.append([prompt, with_it, i])
        elif turns and messages[i - 1]["role"] == "assistant":
            turns[-1][1:] = [with_it, i]
        else:  # the prompt is rewritten once message i follows: the turn is what follows the generation prompt
            plain = render(tokenizer, messages[:i], tools, kwargs)
            generation = prompt[len(plain):]
            empty = render(tokenizer, [*messages[:i], {"role": "assistant", "content": ""}], tools, kwargs)
            agree = next((k for k, (a, b) in enumerate(zip(with_it, empty)) if a != b), min(len(with_it), len(empty)))
            start = with_it.rfind(generation, 0, agree)
            if not prompt.startswith(plain) or not generation or start < 0:
                return "unbuildable: no generation prompt before it"
            turns.append([prompt, prompt + with_it[start + len(generation):], i])
    rows, spans, all_in_full = [], [], True
    for prompt, with_it, last in turns:
        prompt_ids, turn_ids = ids(tokenizer, prompt), ids(tokenizer, with_it)
        stop = next((k for k in range(len(prompt_ids), len(turn_ids)) if turn_ids[k] in stop_ids), None)
        if stop is None and last + 1 < len(messages):  # the next message's first token, if a stop, closes it
            bare = [{k: v for k, v in m.items() if m["role"] != "assistant" or k not in
                     ("reasoning_content", "thinking", "reasoning")} for m in messages[:last + 1]]
            pairs = [(turn_ids, full), (turn_ids, render(tokenizer, messages[:last + 2], tools, kwargs)),
                     (ids(tokenizer, render(tokenizer, bare, tools, kwargs)),
                      render(tokenizer, [*bare, messages[last + 1]], tools, kwargs))]
            for before, text in pairs:
                text_ids = ids(tokenizer, text)
                if text_ids[:len(before)] == before and text_ids[len(before):len(before) + 1] and \
                        text_ids[len(before)] in stop_ids:
                    stop, turn_ids = len(turn_ids), turn_ids + [text_ids[len(before)]]
                    with_it += tokenizer.convert_ids_to_tokens(text_ids[len(before)])
                    break
        if stop is None and with_it == full:  # the render ends in the turn: to its end
            stop = len(turn_ids) - 1
        if stop is None:
            return "unbuildable: no stop token"
        if turn_ids[:len(prompt_ids)] == prompt_ids:
            first = len(prompt_ids)
        else:  # the prompt's last token merges with the answer: the tokens overlapping the answer's characters
            offsets = tokenizer(with_it, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            first = next(k for k, (a, b) in enumerate(offsets) if b > len(prompt))
        mask = [0] * len(turn_ids)
        mask[first:stop + 1] = [1] * (stop + 1 - first)
        rows.append((turn_ids, mask))
        spans.append((first, stop + 1))
        all_in_full &= full_ids[:stop + 1] == turn_ids[:stop + 1]
    if all_in_full:
        mask = [0] * len(full_ids)
        for start, end in spans:
            mask[start:end] = [1] * (end - start)
        return [(full_ids, mask)]
    return rows
