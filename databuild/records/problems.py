"""What can happen to a conversation: the kinds of problem that make one unbuildable, each with its
one-line reason and, when the config is the cause, its fix (`Problem`, carried by the conversation
through the stream); the conversation it is, named by source, file, row and id (`BadConversation`);
and the one place that applies the config's `on_bad_conversation` to them (skip and count, or stop
naming it), and the refusal of one longer than a row (`overlong: error`).

A conversation is found bad up front (malformed, by the spill's check of every row) or where the
stream renders it (refused by the template, or unmaskable); a conversation longer than a row is
found by the packer, and refused in the same words.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, NamedTuple, Protocol, Sequence, TypeVar

from ..errors import BuildError, quoted
from .origin import Origin


# The kinds of problem. Those of SKIPPED_KINDS can be skipped (on_bad_conversation: skip) and are
# counted by kind in the manifest (counts.conversations_skipped, in this order).
MALFORMED = "malformed"  # the up-front check of every row refused it
TEMPLATE_ERROR = "template_error"  # the chat template raised on it
MASK_ERROR = "mask_error"  # the loss-mask strategy cannot place its targets
STOP_TOKEN_IN_FIELD = "stop_token_in_field"  # an assistant field spells a stop token (encode/inference.py)
HISTORY_REWRITTEN = "history_rewritten"  # the template rewrites history and the config says history: refuse
SKIPPED_KINDS = (MALFORMED, TEMPLATE_ERROR, MASK_ERROR, STOP_TOKEN_IN_FIELD, HISTORY_REWRITTEN)
OVERLONG = "overlong"  # longer than a row under overlong: error (the packer's setting, never skipped)
DUPLICATE = "duplicate"  # dedup: exact found an earlier conversation the same (sources/dedup.py): always dropped
NO_TRAINED_TURN = "no_trained_turn"  # train_turns leaves none of its turns (encode/turns.py): always dropped
HELD_OUT = "validation"  # a training conversation the validation split takes (sources/holdout.py): always dropped
# A preference row (issue 34; sources/preference/split.py) whose chosen and rejected are the same messages:
# it teaches no preference, and is dropped and counted whatever on_bad_conversation says (the encode
# stage drops a pair identical after its cut under this kind too)
IDENTICAL_COMPLETIONS = "identical_completions"
DROPPED_KINDS = (DUPLICATE, NO_TRAINED_TURN, HELD_OUT, IDENTICAL_COMPLETIONS)  # dropped and counted whatever on_bad_conversation says
# A preference row whose prompt cannot be told from its completions (sources/preference/split.py):
# skipped under on_bad_conversation: skip like SKIPPED_KINDS, counted in a preference build's manifest
# (kept apart from SKIPPED_KINDS, which an SFT manifest lists whole)
NO_SHARED_PROMPT = "no_shared_prompt"  # an implicit prompt: chosen and rejected differ from their first message
COMPLETION_NOT_ASSISTANT = "completion_not_assistant"  # a completion empty, or not starting with the assistant's
PREFERENCE_SKIPPED_KINDS = (NO_SHARED_PROMPT, COMPLETION_NOT_ASSISTANT)


class Problem(NamedTuple):
    """Why a conversation cannot be built: its kind (one of the above) and reason; `fix`, when the cause
    is the config's (every conversation would fail alike), the change that lets the build go on."""
    kind: str
    reason: str
    fix: str | None = None


@dataclass(frozen=True)
class BadConversation:
    """A conversation the build cannot use: source row `index`, row `row` of file `file` of the source
    `source` (the config's repo), and its problem."""
    index: int
    file: str
    row: int
    id: str
    problem: Problem
    source: str = ""

    @property
    def kind(self) -> str:
        return self.problem.kind

    def message(self) -> str:
        return f"{self.source}: {self.file}: row {self.row} (id {shown_id(self.id)}): {self.problem.reason}"

    def record(self) -> dict[str, Any]:
        """As the manifest lists it (skipped_conversations)."""
        return {"index": self.index, "file": self.file, "row": self.row, "id": self.id,
                "reason": self.problem.reason, "kind": self.problem.kind, "source": self.source}


def shown_id(conversation_id: str, limit: int = 60) -> str:
    """An id as a message quotes it: whole when short, else its start and its length (an id may be any size)."""
    return quoted(conversation_id, limit)


class FileRows(Protocol):
    """Where a source file's rows sit in the stream (sources.reader.SourceFile is one)."""
    name: str  # relative to its source's root
    source: str  # the config's repo of its source
    first_index: int  # the source row of its first row


class Carried(Protocol):
    """A conversation as the stream carries it, before or after the tokenizer (records.conversation)."""
    origin: Origin
    problem: Problem | None


C = TypeVar("C", bound=Carried)


def bad_conversation(files: Sequence[FileRows], index: int, id: str, problem: Problem) -> BadConversation:
    """Source row `index`, named by its source, file and row within the file."""
    file = files[bisect.bisect_right([f.first_index for f in files], index) - 1]
    return BadConversation(index, file.name, index - file.first_index, id, problem, file.source)


def refusal(bad: BadConversation, more: int = 0) -> BuildError:
    """The one line that stops a build at `bad` (`more`: others found with it), naming the config key
    that would let the build go on."""
    others = f" (and {more} more)" if more else ""
    if bad.kind == MALFORMED:
        return BuildError(f"malformed conversation: {bad.message()}{others}; "
                          "set on_bad_conversation: skip in the config to skip and count them")
    if bad.kind == OVERLONG:
        return BuildError(f"conversation longer than a row: {bad.message()}{others}; set overlong: drop or "
                          "truncate in the config to drop or cut such conversations")
    fix = bad.problem.fix or "set on_bad_conversation: skip in the config to skip and count such conversations"
    return BuildError(f"conversation cannot be built ({bad.kind}): {bad.message()}{others}; {fix}")


def on_bad_conversation(policy: str, found: list[BadConversation]) -> list[BadConversation]:
    """The config's policy, applied here only: under `skip`, `found` to be skipped and counted; under
    `error`, the build stops at the first, naming it."""
    if found and policy == "error":
        raise refusal(found[0], len(found) - 1)
    return found


def marked(conversations: Iterable[C], malformed: dict[int, BadConversation]) -> Iterator[C]:
    """The stream with each malformed conversation marked as such, so that it is skipped and counted
    where the packer meets it, like any other it cannot build (the count then never depends on how
    far the tokenizer ran ahead)."""
    for conversation in conversations:
        bad = malformed.get(conversation.origin.index)
        yield conversation if bad is None else replace(conversation, messages=(), problem=bad.problem)


def buildable(tokenized: Iterable[C], policy: str, files: Sequence[FileRows],
              skipped: list[BadConversation]) -> Iterator[C]:
    """The stream without the conversations that cannot be built (malformed, refused by the template,
    or unmaskable), each skipped into `skipped` or stopping the build, as `policy` says; and without
    the duplicates dedup: exact marked and the conversations train_turns leaves without a trained
    turn, each into `skipped` whatever the policy."""
    for conversation in tokenized:
        if conversation.problem is None:
            yield conversation
            continue
        bad = bad_conversation(files, conversation.origin.index, conversation.origin.id, conversation.problem)
        skipped += [bad] if bad.kind in DROPPED_KINDS else on_bad_conversation(policy, [bad])


# What a user changes when every conversation is refused the same way: the config, not the data.
TEMPLATE_WIDE_FIX = {
    MALFORMED: "the rows do not fit the source's format: check its 'format' (databuild init detects it)",
    TEMPLATE_ERROR: "the chat template refuses them all: check chat_template_name and template_kwargs",
    MASK_ERROR: "on a template without generation tags, set end_of_turn in the config to the token after each "
                "answer in its render",
}


def template_wide(skipped: list[BadConversation], rows_kept: int) -> str:
    """When no row was kept and every conversation refused was refused with one kind, that said with
    the fix (the first one's own, else the kind's; for the line that stops the build); else ''. The
    only template-wide refusal: one that every conversation met, never one guessed before the first."""
    kinds = {bad.kind for bad in skipped}
    if rows_kept or len(kinds) != 1:
        return ""
    kind = kinds.pop()
    fix = skipped[0].problem.fix or TEMPLATE_WIDE_FIX.get(kind, "see the first one")
    return (f"; no row kept, and all {len(skipped)} conversations refused were refused the same way ({kind}, e.g. "
            f"{skipped[0].message()}): {fix}")
