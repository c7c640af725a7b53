"""Behaviours that a planted bug showed no test pinned (issue 31): each test here fails on its mutant
(tests/MUTATION.md, "Issue 31")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import messages
from databuild.encode.encoder import Encoder
from databuild.encode.render import Renderer
from databuild.records.conversation import Conversation
from databuild.records.origin import Origin
from test_masks import KWARGS, family

STOP = "<|im_end|>"


# --- a stop token spelled in a reasoning field or in a tool call's arguments, not only in content ---------

@pytest.mark.parametrize("field, value, named", [
    ("reasoning_content", f"I think {STOP} then", "reasoning_content"),
    ("thinking", f"I think {STOP} then", "thinking"),
    ("reasoning", f"I think {STOP} then", "reasoning"),  # each of REASONING_FIELDS, not only the first two
    ("tool_calls", [{"type": "function", "function": {"name": "f", "arguments": json.dumps({"q": f"a {STOP}"})}}],
     "tool_calls"),
    ("tool_calls", [{"type": "function", "function": {"name": "f", "arguments": {"q": {"deep": [f"a {STOP}"]}}}}],
     "tool_calls"),
])
def test_a_stop_token_in_a_field_other_than_content_is_refused(tokenizer, field, value, named):
    msgs = (*messages(("user", "Hi")), {"role": "assistant", "content": "Hello", field: value})
    renderer = Renderer(family("chatml", tagged=False), dict(tokenizer.special_tokens_map), KWARGS)
    [out] = Encoder(tokenizer, renderer, "assistant", (STOP,)).encode_batch([Conversation(Origin(0, 0, "c", "s"), msgs)])
    assert out.problem is not None and out.problem[0] == "stop_token_in_field", out.problem
    assert out.problem[1].startswith(f"assistant message 1: its {named} spells the stop token '{STOP}'")


def test_a_token_generate_stops_on_is_refused_in_a_field_beside_a_declared_end_of_turn(tokenizer):
    """With end_of_turn declared (or a tagged template), the ends of turn do not hold generation_config's stop
    tokens; a field spelling one is refused all the same: `generate` would stop there."""
    msgs = (*messages(("user", "Hi")), {"role": "assistant", "content": "Hello <|eot_id|> there"})
    renderer = Renderer(family("chatml"), dict(tokenizer.special_tokens_map), KWARGS)
    encoder = Encoder(tokenizer, renderer, "assistant", (STOP,), stops=("<|eot_id|>",))
    assert "<|eot_id|>" not in encoder.end_of_turn
    [out] = encoder.encode_batch([Conversation(Origin(0, 0, "c", "s"), msgs)])
    assert out.problem is not None and out.problem[0] == "stop_token_in_field", out.problem
    assert out.problem[1].startswith("assistant message 1: its content spells the stop token '<|eot_id|>'")


# --- the boundary of the id range checks: an id equal to the vocabulary's size is out ----------------------

def test_an_eos_token_id_equal_to_the_vocabulary_size_is_refused(tokenizer, tmp_path):
    from databuild.encode.ends import GENERATION_CONFIG, generation_stops
    from databuild.errors import BuildError

    size = len(tokenizer)
    (tmp_path / GENERATION_CONFIG).write_text(json.dumps({"eos_token_id": [size - 1]}))
    assert generation_stops(tmp_path, tokenizer) == (tokenizer.convert_ids_to_tokens(size - 1),)
    (tmp_path / GENERATION_CONFIG).write_text(json.dumps({"eos_token_id": [size]}))
    with pytest.raises(BuildError, match=f"eos_token_id {size} is not an id of the tokenizer \\({size} ids\\)"):
        generation_stops(tmp_path, tokenizer)
    # verify's own boundary (size - 1 in range, size out): tests/test_token_range.py


# --- init over a source whose files are in different formats ----------------------------------------------

def test_init_refuses_a_source_whose_files_are_in_different_formats(tmp_path):
    from test_init import databuild, sharegpt_source

    from conftest import SOURCE_DIR, TOKENIZER_DIR

    mixed = sharegpt_source(tmp_path)  # data/train-00000-of-00001.parquet: ShareGPT
    shutil.copy(sorted((SOURCE_DIR / "data").glob("*.parquet"))[0], mixed / "data" / "train-00001-of-00001.parquet")
    made = databuild("init", "mixed", "--tokenizer", TOKENIZER_DIR, "--source", mixed, "--rows", 4, "--row-tokens", 256, "--current-date", "2026-10-01",
                     cwd=tmp_path)
    assert made.returncode == 1 and made.stderr.count("\n") == 1, made.stderr
    assert (f"--source {mixed}: data/train-00001-of-00001.parquet has another format than "
            "data/train-00000-of-00001.parquet: one source is one format; split it into two sources") in made.stderr
    assert not list(tmp_path.glob("*.yaml")) and not (tmp_path / "configs").exists()


# --- diff of a row file whose row count differs from its own manifest -------------------------------------

def test_diff_names_a_row_file_shorter_than_its_manifest(tiny_build, tmp_path):
    import databuild

    folder = tmp_path / "short"
    folder.mkdir()
    shutil.copyfile(tiny_build.manifest, folder / tiny_build.manifest.name)
    table = pq.read_table(tiny_build.parquet)
    pq.write_table(table.slice(0, table.num_rows - 1), folder / tiny_build.parquet.name)
    result = databuild.diff(tiny_build.parquet, folder / tiny_build.parquet.name)
    assert result.b.unfaithful == f"from row {table.num_rows - 1}" and result.a.unfaithful is None
    assert result.rows.kinds == ("row count",) and (result.rows.rows_a, result.rows.rows_b) == (
        table.num_rows, table.num_rows - 1)


def test_diff_names_a_row_file_longer_than_its_manifest(tiny_build, tmp_path):
    """A row appended after the manifest was written: the file parts from its manifest where the manifest's
    rows end (a count compared only for a shorter file calls this one faithful)."""
    import databuild

    folder = tmp_path / "long"
    folder.mkdir()
    shutil.copyfile(tiny_build.manifest, folder / tiny_build.manifest.name)
    table = pq.read_table(tiny_build.parquet)
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), folder / tiny_build.parquet.name)
    result = databuild.diff(tiny_build.parquet, folder / tiny_build.parquet.name)
    assert result.b.unfaithful == f"from row {table.num_rows}" and result.a.unfaithful is None
    assert result.rows.kinds == ("row count",) and (result.rows.rows_a, result.rows.rows_b) == (
        table.num_rows, table.num_rows + 1)


# --- a second signal while the first one's clean-up runs ---------------------------------------------------

def test_a_second_signal_during_the_clean_up_is_ignored():
    from databuild.stopping import Stopped, received, stop_signals

    cleaned, again = [], []
    with stop_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except Stopped as first:
            assert first.signum == signal.SIGTERM
            try:
                os.kill(os.getpid(), signal.SIGINT)  # a scheduler's second signal, or Ctrl-C, mid clean-up
                for _ in range(50):
                    time.sleep(0.001)  # the handler runs between these steps: it must not raise
            except Stopped as second:  # the clean-up cut short
                again.append(second.signum)
            cleaned.append(True)
    assert again == [] and cleaned == [True] and received() == signal.SIGTERM


def test_a_stop_handled_in_one_command_leaves_the_next_one_stoppable():
    """A process that runs commands one after another (the API, a notebook, the test suite's CLI runs): a signal
    after a stopped command stops the next one too, and the next command's errors are not taken for a stop."""
    from databuild.stopping import Stopped, received, stop_signals

    with stop_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Stopped:
            pass
    with stop_signals():
        assert received() is None
        with pytest.raises(Stopped):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert received() == signal.SIGINT


# --- the order in which the last in-flight batches come back -----------------------------------------------

@pytest.mark.parametrize("in_flight", [1, 2, 3, 8])
def test_the_last_batches_in_flight_come_back_in_submission_order(in_flight):
    """in_order takes results back in batch order, the batches still in flight when the stream ends
    included: each result is ready at once, so only the order of taking them decides."""
    from databuild.executors.local import in_order

    batches = [[k] for k in range(10)]
    taken = list(in_order(batches, submit=lambda batch: batch, result=lambda batch: [batch[0]], in_flight=in_flight))
    assert taken == list(range(10))
