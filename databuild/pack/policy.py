"""Packing policies behind one interface, and the tokens they place between and after conversations.

A policy is a function `(conversations, packing, stats) -> rows`: it takes the tokenized stream in
permutation order, yields the kept rows in their final order (the caller stops when it has enough)
and tallies what it did in `stats`. `POLICIES` is the registry the config's `packing` key is
validated against when the config loads.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ..records.conversation import TokenizedConversation
from ..errors import BuildError
from . import bfd, concat
from .rows import Packing, PackStats
from ..records.row import Row

Policy = Callable[[Iterable[TokenizedConversation], Packing, PackStats], Iterator[Row]]

POLICIES: dict[str, Policy] = {
    "concat": concat.pack_rows,
    "bfd": bfd.pack_rows,
}
DEFAULT_POLICY = "concat"
OVERLONG_POLICIES = ("drop", "truncate", "error")
# bfd's window, in conversations: TRL's pack_dataset packs each `datasets.map` batch (1,000 examples by
# default) on its own, so the same window gives a TRL user the rows they know. On the bench corpus
# (8,192-token rows) it pads 0.52% of the tokens, against 0.22% for 4,000 and 0.10% for the whole
# stream at once, holding ~5 MiB of tokens (bench/README.md, "Packing policies").
DEFAULT_PACKING_WINDOW = 1000


def _token_id(tokenizer, token: str, where, key: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        raise BuildError(f"{where}: key '{key}' = {token!r}: not a single token of the tokenizer")
    return int(token_id)


def packing_for(tokenizer, config) -> Packing:
    """The config's policy with its tokens resolved against the tokenizer. The separator: the config's
    `separator`, else the tokenizer's EOS. The pad token (padding policies only): the config's
    `pad_token`, else the tokenizer's pad token, else the separator."""
    separator = config.separator or tokenizer.eos_token
    if separator is None:
        raise BuildError(f"{config.path}: the tokenizer has no EOS token; set 'separator' in the config")
    separator_id = _token_id(tokenizer, separator, config.path, "separator")
    packing = Packing(config.packing, config.row_tokens, separator, separator_id)
    if config.packing == "concat":
        return packing
    if config.pad_token is not None:
        pad, origin = config.pad_token, "config"
    elif tokenizer.pad_token is not None:
        pad, origin = tokenizer.pad_token, "tokenizer"
    else:
        pad, origin = separator, "separator"
    return Packing(config.packing, config.row_tokens, separator, separator_id, pad,
                   _token_id(tokenizer, pad, config.path, "pad_token"), origin, config.packing_window, config.overlong)


def _rendered(conversations: Iterable[TokenizedConversation], stats: PackStats) -> Iterator[TokenizedConversation]:
    """The stream without the conversations the template rendered to no token (a policy would give
    them a separator and a segment of their own), counted; and the empty assistant turns of the rest."""
    for conversation in conversations:
        if not len(conversation.input_ids):
            stats.empty_render_rows.append(conversation.origin.index)
            continue
        stats.conversations_read += conversation.part == 0
        stats.empty_assistant_turns += conversation.empty_assistant_turns
        stats.unclosed_turns += conversation.unclosed_turns
        stats.prompt_tokens_differ += conversation.prompt_tokens_differ
        stats.turns_not_trained += conversation.turns_not_trained
        stats.samples_not_written += conversation.samples_not_written
        if conversation.parts > 1 and conversation.part == 0:
            stats.history_expanded[conversation.origin.source] += 1
            stats.expanded_samples[conversation.origin.source] += conversation.parts
        yield conversation


def pack(conversations: Iterable[TokenizedConversation], packing: Packing, stats: PackStats) -> Iterator[Row]:
    return POLICIES[packing.policy](_rendered(conversations, stats), packing, stats)
