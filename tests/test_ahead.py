"""The stream's first positions encoded while the source is read (executors/ahead.py): sent by the source pass
as it takes the rows, as many as the stream is likely to read, given back in stream order, the same rows as a
build without it; where what was sent ahead cannot stand for them, they are encoded again, and the build is
the one it would have been."""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import write_config
from databuild.build import make
from databuild.config import load_config
from databuild.executors import ahead as ahead_module
from databuild.executors.ahead import EncodedAhead
from databuild.executors.local import LocalEncoding
from databuild.records.conversation import TokenizedConversation
from databuild.records.origin import Origin
from databuild.records.problems import DUPLICATE, BadConversation, Problem
from databuild.sources.spill import AHEAD_BATCH, AHEAD_BUCKETS, Spill
from databuild.sources.spilled import open_bucket
from source_folders import OK_ROWS, write_chat_source
from test_render_limit import endless_tokenizer


@pytest.fixture
def noted(monkeypatch):
    """How many batches each build's first pass sent ahead (None: nothing, one process), and how often the
    first positions were encoded again: the pass and the stream as they run, watched, not replaced."""
    seen = {"sent": [], "again": 0}
    check_and_spill, in_order = Spill.check_and_spill, ahead_module.in_order

    def sending(self, prefix, ahead=None, exact=False):
        found = check_and_spill(self, prefix, ahead, exact)
        seen["sent"].append(None if self.ahead is None else len(self.ahead))  # sent by the pass's end
        return found

    def again(*args):
        seen["again"] += 1
        return in_order(*args)

    monkeypatch.setattr(Spill, "check_and_spill", sending)
    monkeypatch.setattr(ahead_module, "in_order", again)
    return seen


@pytest.mark.parametrize("window", [16, 8192])  # several buckets; the whole stream in the first
def test_with_workers_the_first_positions_are_sent_during_the_pass_and_the_rows_are_the_same(
        tmp_path, tiny_config, tiny_build, sixteen_cores, noted, window):
    result = make(tiny_config, tmp_path / "out", workers=2, batch_size=5, window=window, progress=False)
    assert noted["sent"][0] > 1 and noted["again"] == 0, noted
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()
    assert result.manifest.read_bytes() == tiny_build.manifest.read_bytes()


@pytest.fixture
def sent_positions(monkeypatch):
    """The stream positions of each batch the pass sends ahead, read from the batch's file as it is sent."""
    sent = []
    send = LocalEncoding._sent_ahead

    def recording(self, batch):
        (path, rows), = batch.pieces
        sent.append(open_bucket(path).column("position").to_numpy()[rows].tolist())
        return send(self, batch)

    monkeypatch.setattr(LocalEncoding, "_sent_ahead", recording)
    return sent


@pytest.mark.parametrize("window", [8192, 16])  # the whole stream in the first bucket; several buckets
@pytest.mark.parametrize("rows", [40, None])  # the tiny config's 40 rows; rows: all
def test_the_pass_sends_ahead_only_what_the_stream_reads_in_small_batches(
        tmp_path, tiny_config, sixteen_cores, sent_positions, rows, window):
    """Where the stream's length is a guess, the pass sends a share of it ahead (the tiny build reads 76 of
    its 300 conversations, which before went ahead whole, being its first bucket); with rows: all, the whole
    stream, up to AHEAD_BUCKETS buckets' worth. Each position once, from the first on, in batches of at most
    AHEAD_BATCH rows; the rows are those of one process, which sends nothing ahead."""
    config = replace(tiny_config, rows=rows)
    result = make(config, tmp_path / "out", workers=2, batch_size=5, window=window, progress=False)
    positions = sorted(p for batch in sent_positions for p in batch)
    read = result.data["counts"]["conversations_read"]
    assert positions == list(range(len(positions)))
    if rows:
        assert 0 < len(positions) <= read < 300
    else:
        assert len(positions) == min(read, AHEAD_BUCKETS * window) and read == 300
    assert max(map(len, sent_positions)) <= AHEAD_BATCH and len(sent_positions) >= len(positions) / AHEAD_BATCH
    alone = make(config, tmp_path / "alone", workers=1, window=window, progress=False)
    assert result.data["output"]["rows_sha256"] == alone.data["output"]["rows_sha256"]


def test_one_process_sends_nothing_ahead(tmp_path, tiny_config, tiny_build, noted):
    result = make(tiny_config, tmp_path / "out", workers=1, progress=False)
    assert noted["sent"] == [None]
    assert result.parquet.read_bytes() == tiny_build.parquet.read_bytes()


def test_a_conversation_sent_ahead_that_the_stream_never_reaches_changes_nothing(tmp_path, sixteen_cores, noted):
    """The conversations the stream does not reach, sent ahead anyway (a guess of the stream's length far too
    long: the spilled prefix set to four times the source, so that its share sent ahead is all of it), never
    end their render: the batches holding them raise (render_timeout), those positions are encoded again as
    the stream goes, and the build is the one without them; as with one process, whose stream never renders
    them either."""
    source = {"dir": str(write_chat_source(tmp_path, OK_ROWS))}
    plain = make(load_config(write_config(tmp_path / "plain.yaml", source=source, rows=3)), tmp_path / "plain",
                 workers=1, batch_size=1, progress=False)
    reached = {i for ids in pq.read_table(plain.parquet).column("conversation_ids").to_pylist() for i in ids}
    unreached = [name.removeprefix("ok-") for name, _ in OK_ROWS if name not in reached]
    assert len(unreached) > 20, reached
    when = f'message.content.split(" ")[1] in {json.dumps(unreached)}'
    config = write_config(tmp_path / "c.yaml", source=source, rows=3, render_timeout=1,
                          tokenizer=endless_tokenizer(tmp_path, when))
    result = make(load_config(config), tmp_path / "out", workers=2, batch_size=1, spill_prefix=4 * len(OK_ROWS),
                  progress=False)
    assert noted["sent"][-1] >= 1 and noted["again"] == 1, noted
    assert result.data["output"]["rows_sha256"] == plain.data["output"]["rows_sha256"]


def tokenized(position: int, index: int, tokens: int = 2, part: int = 0, parts: int = 1) -> TokenizedConversation:
    return TokenizedConversation(Origin(position, index, f"id-{index}", "org/src"), np.arange(tokens, dtype=np.int32),
                                 np.ones(tokens, dtype=np.int8), part=part, parts=parts)


def done(value=None, error: BaseException | None = None) -> Future:
    future = Future()
    future.set_result(value) if error is None else future.set_exception(error)
    return future


def results(ahead: EncodedAhead, again_results=()) -> list:
    """`ahead`'s results, the batches encoded again being `again_results` (one list a batch)."""
    sent = []

    def submit(batch):
        sent.append(batch)
        return done(again_results[len(sent) - 1])

    return [(r.origin.position, r.part, r.problem and r.problem.kind) for r in
            ahead.results(submit, lambda future: future.result(), 4)], len(sent)


def test_what_was_sent_ahead_comes_back_in_stream_order_the_dropped_marked():
    """Batches in the order the pass's threads took their rows; an expanded conversation's samples stay
    together and in order; a conversation dropped once the pass had seen the whole source (a duplicate)
    comes back marked as the stream marks it, its tokens not given."""
    batches = (done([tokenized(2, 20), tokenized(0, 7, part=0, parts=2), tokenized(0, 7, part=1, parts=2)]),
               done([tokenized(3, 5), tokenized(1, 11, tokens=5)]))
    duplicate = BadConversation(11, "data/train.parquet", 11, "id-11", Problem(DUPLICATE, "the same as row 3\nof the source"))
    ahead = EncodedAhead(batches, 4, {11: duplicate}, lambda: pytest.fail("encoded again"))
    assert results(ahead) == ([(0, 0, None), (0, 1, None), (1, 0, DUPLICATE), (2, 0, None), (3, 0, None)], 0)
    marked = list(ahead.results(None, lambda future: future.result(), 4))[2]
    assert (len(marked.input_ids), marked.input_ids.dtype, marked.loss_mask.dtype) == (0, np.int32, np.int8)
    assert marked.problem.reason == "the same as row 3 of the source"  # on one line, as the encoder gives it


@pytest.mark.parametrize("batches", [
    (done([tokenized(1, 1)]), done(error=RuntimeError("a worker's render raised"))),  # a batch raised
    (done([tokenized(1, 1)]), done([])),  # a position missing: a batch stopped by an earlier stream's end
])
def test_what_cannot_stand_for_the_positions_is_encoded_again(batches):
    again = [[tokenized(0, 0)], [tokenized(1, 1)]]
    ahead = EncodedAhead(batches, 2, {}, lambda: ["batch 0", "batch 1"])
    assert results(ahead, again) == ([(0, 0, None), (1, 0, None)], 2)


def test_a_batch_sent_ahead_never_holds_the_source_pass_up(tiny_config, monkeypatch):
    """The pool's own submit can wait for seconds: while the pool starts its processes, each start waits for
    the fork server's imports, and every submit waits for the pool's lock meanwhile. A pass thread hands its
    batch on and goes on (executors/local.py `_sent_ahead`): the batches reach the pool from a thread of their
    own, in the order sent, once it takes them, and each future sent ahead is its batch's result."""
    import threading
    import time
    from itertools import islice

    from databuild.executors.local import LocalEncoding
    from databuild.prepare import prepare

    monkeypatch.setenv("DATABUILD_CORES", "8")
    opened, order = threading.Event(), []
    with prepare(tiny_config) as prepared, LocalEncoding(prepared.encoder, 2) as local:
        batches = list(islice(prepared.batches(2, by_reference=True), 3))
        submit = local._submit

        def held(batch):  # a pool that takes nothing for a while, as one whose processes are starting
            opened.wait(timeout=5)
            order.append(batch)
            return submit(batch)

        monkeypatch.setattr(local, "_submit", held)
        send = local.ahead()
        started = time.monotonic()
        futures = [send(batch) for batch in batches]
        handed_on = time.monotonic() - started
        waiting = [future.done() for future in futures]
        opened.set()
        results = [local._taken(future) for future in futures]  # as the stream takes them
        expected = [prepared.encoder.encode_batch(batch.read()) for batch in batches]
    assert handed_on < 1 and waiting == [False] * 3
    assert order == batches
    assert [[(t.input_ids.tolist(), t.loss_mask.tolist()) for t in r] for r in results] == \
        [[(t.input_ids.tolist(), t.loss_mask.tolist()) for t in e] for e in expected]
