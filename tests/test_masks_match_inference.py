"""Property check (issues 11, 18): over many generated conversations and four template families, the
`assistant` rows of the untagged template either equal the inference rule recomputed from transformers'
renders (tests/support/inference_reference.py), or the conversation is refused with a reason (mask_error,
stop_token_in_field). Never a third outcome. On tagged templates the mask always equals transformers'
generation mask, unless an assistant content spells a stop token (refused under every strategy, issue 29).
The counts print with `pytest -s`."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import PHI3, needs_phi3
from test_masks import END_OF_TURN, agrees_or_refuses

OUTCOMES: Counter = Counter()
# Pieces that make placement hard: echoes of other turns, whitespace a template may trim, special-token
# text, template words, the sentinels' private-use characters, empty strings.
PIECES = ["OK", " OK", "yes", "\n", "  ", "\t", "Sure", "assistant", "user", "<|end|>", "<|im_end|>", "<|eot_id|>",
          "<|return|>", "<|start|>", "\ue000", "\ue001", "é", "你好", "👩‍💻", "0", "1", "Repeat after me:", ""]
TEXT = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)
MESSAGE = st.tuples(st.sampled_from(["user", "assistant", "assistant", "system"]), TEXT)
CONVERSATION = st.lists(MESSAGE, min_size=1, max_size=6).map(
    lambda pairs: tuple({"content": content, "role": role} for role, content in pairs))
FAMILIES = ["chatml", "llama3_trim", "harmony", "phi3"]
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def spells_a_stop(tokenizer, msgs, name) -> bool:
    """Whether an assistant content spells EOS or one of the family's declared ends of turn."""
    stops = {tokenizer.eos_token, *END_OF_TURN[name]}
    return any(stop in m["content"] for m in msgs if m["role"] == "assistant" for stop in stops)


@pytest.mark.parametrize("name", FAMILIES)
@SETTINGS
@given(msgs=CONVERSATION)
def test_untagged_assistant_mask_equals_transformers_or_is_refused(tokenizer, name, msgs):
    for tagged in (False, True):
        outcome = agrees_or_refuses(tokenizer, msgs, name, tagged=tagged)
        assert tagged is False or outcome == "equal" or outcome == "stop_token_in_field" and spells_a_stop(
            tokenizer, msgs, name)
        OUTCOMES[(name, "tagged" if tagged else "untagged", outcome)] += 1


@needs_phi3
@SETTINGS
@given(msgs=CONVERSATION.filter(lambda m: all(x["role"] != "system" or i == 0 for i, x in enumerate(m))))
def test_on_the_real_phi3(msgs):
    from databuild.encode.render import load_tokenizer

    global _phi3
    _phi3 = globals().get("_phi3") or load_tokenizer(PHI3)
    for tagged in (False, True):
        outcome = agrees_or_refuses(_phi3, msgs, "phi3", tagged=tagged)
        assert tagged is False or outcome == "equal" or outcome == "stop_token_in_field" and spells_a_stop(
            _phi3, msgs, "phi3")
        OUTCOMES[("phi3 (real)", "tagged" if tagged else "untagged", outcome)] += 1


def test_report_counts():
    """Runs last in this file: prints what the two checks above saw (pytest -s shows it)."""
    for key in sorted(OUTCOMES):
        print(*key, OUTCOMES[key])
    assert not OUTCOMES or all(outcome in ("equal", "mask_error", "stop_token_in_field") for _, _, outcome in OUTCOMES)
