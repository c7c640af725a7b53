"""A spilled preference row read back into its record: the conversation the preference formats wrote
(formats/preference.py: each column's messages in turn, each column's first message marked) cut at its
marks into a PreferenceRecord, and the implicit prompt found.

The implicit prompt is the longest common prefix of chosen and rejected, messages compared as whole
JSON values (their JSON text: keys, their order and every value as the source wrote them), as TRL's
`extract_prompt` compares them (trl/data_utils.py, huggingface/trl@f2cd5771) but without its guesses:
where TRL silently cuts anyway, the record gets a problem (records/problems.py) and is counted:
- chosen and rejected the same messages (TRL would cut before their last message): IDENTICAL_COMPLETIONS;
- no first message in common (TRL: an empty prompt): NO_SHARED_PROMPT;
- a completion empty (one conversation a prefix of the other) or not starting with an assistant message
  (the two differ inside the context, not in the answer): COMPLETION_NOT_ASSISTANT.
An explicit prompt is taken as written; its completions are checked by the same two rules, and so is an
unpaired completion.
"""

from __future__ import annotations

import json
from typing import Sequence

from ...errors import BuildError
from ...records.conversation import Conversation
from ...records.preference import PreferenceRecord
from ...records.problems import COMPLETION_NOT_ASSISTANT, IDENTICAL_COMPLETIONS, NO_SHARED_PROMPT, Problem
from ..formats.preference import LABELS, PART

LABEL_OF = {mark: label for label, mark in LABELS.items()}


def _text(message: dict) -> str:
    return json.dumps(message, ensure_ascii=False)


def same(a: dict, b: dict) -> bool:
    """Whether two messages are the same JSON value: their JSON texts equal. Python's == first, as the cheap
    test: values it finds unequal have different texts; it finds equal some that are not (1 and 1.0 and
    true, two orders of the same keys), so equal ones are compared as texts."""
    return a == b and _text(a) == _text(b)


def same_messages(a: Sequence[dict], b: Sequence[dict]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def common_prefix(chosen: Sequence[dict], rejected: Sequence[dict]) -> int:
    """How many first messages chosen and rejected share, each compared as a JSON value (same)."""
    count = 0
    for a, b in zip(chosen, rejected):
        if not same(a, b):
            break
        count += 1
    return count


def completion_problem(name: str, completion: Sequence[dict], first: int) -> Problem | None:
    """Why `completion` (its first message numbered `first` in its column) cannot be a completion, or None."""
    if not completion:
        return Problem(COMPLETION_NOT_ASSISTANT, f"{name} has no message after the prompt (its first {first} messages "
                                                 "are the other's)")
    if completion[0].get("role") != "assistant":
        return Problem(COMPLETION_NOT_ASSISTANT, f"{name} message {first}, the first after the prompt, is a "
                                                 f"{completion[0].get('role')!r} message, not the assistant's")
    return None


def implicit_split(chosen: Sequence[dict], rejected: Sequence[dict]) -> tuple[tuple, tuple, tuple, Problem | None]:
    """(prompt, chosen completion, rejected completion, the problem or None) of two whole conversations."""
    chosen, rejected = tuple(chosen), tuple(rejected)
    shared = common_prefix(chosen, rejected)
    if shared == len(chosen) == len(rejected):
        return (), (), (), Problem(IDENTICAL_COMPLETIONS, f"chosen and rejected are the same {len(chosen)} messages")
    if shared == 0:
        return (), (), (), Problem(NO_SHARED_PROMPT, "chosen and rejected differ from their first message: "
                                                     "no shared prompt")
    problem = (completion_problem("chosen", chosen[shared:], shared)
               or completion_problem("rejected", rejected[shared:], shared))
    if problem is not None:
        return (), (), (), problem
    return chosen[:shared], chosen[shared:], rejected[shared:], None


def _parts(messages: Sequence[dict]) -> list[tuple[str, list[dict]]]:
    """The marked columns of a spilled row, in order: (mark, its messages, the mark taken off)."""
    parts: list[tuple[str, list[dict]]] = []
    for message in messages:
        if PART in message:
            message = dict(message)
            parts.append((message.pop(PART), []))
        elif not parts:
            raise BuildError("a preference row spilled without its marks (formats/preference.py): a bug")
        parts[-1][1].append(message)
    return parts


def column_message(messages: Sequence[dict], number: int) -> str | None:
    """Message `number` of a spilled row (its columns' messages in turn) as its column numbers it, in the
    words of the format's own refusals ("rejected: message 0"); None where the row has no marks (the
    format refused it before marking)."""
    if not messages or PART not in messages[0]:
        return None
    column, first = "", 0
    for k, message in enumerate(messages[:number + 1]):
        if PART in message:
            column, first = message[PART], k
    return f"{'completion' if column in LABEL_OF else column}: message {number - first}"


def preference_record(conversation: Conversation) -> PreferenceRecord:
    """The record of a spilled preference row (its problem carried, none found: the row's problem)."""
    origin = conversation.origin
    if conversation.problem is not None:
        return PreferenceRecord(origin, (), (), tools=conversation.tools, problem=conversation.problem)
    parts = _parts(conversation.messages)
    marks = [mark for mark, _ in parts]
    columns = [tuple(messages) for _, messages in parts]
    label, problem = None, None
    if marks == ["chosen", "rejected"]:
        prompt, chosen, rejected, problem = implicit_split(*columns)
        completions = (chosen, rejected)
    elif marks == ["prompt", "chosen", "rejected"]:
        prompt, completions = columns[0], tuple(columns[1:])
        if same_messages(*completions):
            problem = Problem(IDENTICAL_COMPLETIONS, f"chosen and rejected are the same {len(completions[0])} messages")
        else:
            problem = (completion_problem("chosen", completions[0], 0)
                       or completion_problem("rejected", completions[1], 0))
    elif len(marks) == 2 and marks[0] == "prompt" and marks[1] in LABEL_OF:
        prompt, completions, label = columns[0], tuple(columns[1:]), LABEL_OF[marks[1]]
        problem = completion_problem("completion", completions[0], 0)
    else:
        raise BuildError(f"a preference row spilled with marks {marks} (formats/preference.py): a bug")
    if problem is not None:
        return PreferenceRecord(origin, (), (), label=label, tools=conversation.tools, problem=problem)
    return PreferenceRecord(origin, prompt, completions, label=label, tools=conversation.tools)
