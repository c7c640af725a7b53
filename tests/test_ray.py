"""The Ray executor: the same bytes as the local build, for any workers and batch size, streamed."""

from __future__ import annotations

import sys
from itertools import islice

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from databuild.build import make, prepare  # noqa: E402
from databuild.config import resolve_config  # noqa: E402
from databuild.executors.stream import batches
from databuild.executors.local import encode_stream  # noqa: E402
from databuild.errors import BuildError  # noqa: E402
from databuild.executors.ray import _connect, ray_encode_batches  # noqa: E402
from databuild.encode.render import Renderer  # noqa: E402

TINY = "muse-spark-tiny-fixed512-v1"
RAY_CPUS = 2


def _tiny_stream():
    """The tiny config's Encoder and a fresh generator of its conversations, as `make` builds them."""
    prepared = prepare(resolve_config(TINY), offline=True)

    def conversations():
        return prepared.conversations()

    return prepared.encoder, conversations


def test_starts_and_shuts_down_its_own_ray():
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    encoder, conversations = _tiny_stream()
    stream = ray_encode_batches(batches(islice(conversations(), 20), 8), encoder, 1, None)
    assert len(list(stream)) == 20
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray for the module's builds; ray_encode_batches reuses it and leaves it running."""
    started = _connect(ray, None, RAY_CPUS)
    yield
    if started:
        ray.shutdown()


@pytest.mark.parametrize("workers, batch_size", [(1, 256), (2, 7), (2, 33)])
def test_ray_build_is_byte_identical_to_local(ray_instance, tiny_build, tmp_path, workers, batch_size):
    local_build = tiny_build  # conftest: the tiny config built by the local executor, default settings
    result = make(resolve_config(TINY), tmp_path, progress=False, executor="ray", workers=workers,
                  batch_size=batch_size)
    ours, theirs = result.data["output"], local_build.data["output"]
    assert ours["rows_sha256"] == theirs["rows_sha256"]
    assert ours["parquet_sha256"] == theirs["parquet_sha256"]
    assert result.parquet.read_bytes() == local_build.parquet.read_bytes()
    # The manifest records nothing about where the tokenizer ran: the same bytes too.
    assert result.manifest.read_bytes() == local_build.manifest.read_bytes()
    assert ray.is_initialized(), "ray_encode_batches shut down a Ray it did not start"


def test_a_bfd_build_on_ray_is_byte_identical_to_local(ray_instance, tmp_path):
    """bfd packs on the driver from the stream in order: Ray's workers and batches change nothing."""
    from conftest import write_config
    from databuild.config import load_config

    config = load_config(write_config(tmp_path / "bfd.yaml", packing="bfd", packing_window=64))
    local = make(config, tmp_path / "local", progress=False)
    on_ray = make(config, tmp_path / "ray", progress=False, executor="ray", workers=2, batch_size=7)
    assert on_ray.parquet.read_bytes() == local.parquet.read_bytes()
    assert on_ray.manifest.read_bytes() == local.manifest.read_bytes()


@pytest.mark.parametrize("workers, batch_size", [(1, 5), (2, 3)])
def test_driver_holds_a_bounded_window(ray_instance, workers, batch_size):
    encoder, conversations = _tiny_stream()
    pulled = 0

    def counted():
        nonlocal pulled
        for conversation in conversations():
            pulled += 1
            yield conversation

    expected = list(encode_stream(conversations(), encoder, 64))
    got, lead = [], 0
    for item in ray_encode_batches(batches(counted(), batch_size), encoder, workers, None):
        lead = max(lead, pulled - len(got))
        got.append(item)
    assert lead <= (2 * workers + 1) * batch_size
    assert pulled == len(got) == len(expected) > 10 * (2 * workers + 1) * batch_size
    for a, b in zip(got, expected):
        assert a.origin == b.origin
        assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.loss_mask, b.loss_mask)
        assert a.input_ids.dtype == b.input_ids.dtype and a.loss_mask.dtype == b.loss_mask.dtype


def test_a_worker_build_error_is_one_line(ray_instance):
    encoder, conversations = _tiny_stream()
    # A template that reads the clock, with no date pinned: a BuildError in the worker, not a bad conversation.
    encoder.renderer = Renderer("{{ strftime_now('%Y') }}{% for m in messages %}{{ m.content }}{% endfor %}", {}, {})
    with pytest.raises(BuildError, match="reads the clock") as caught:
        list(ray_encode_batches(batches(conversations(), 16), encoder, 2, None))
    assert "\n" not in str(caught.value)


def test_any_other_worker_error_is_one_line_too(ray_instance):
    encoder, conversations = _tiny_stream()
    # A bug inside the worker (the stop tokens' pattern every strategy checks an answer's fields with,
    # lost: an AttributeError), still not a remote traceback. (The strategy is looked up when the encoder
    # is made, since the registry of strategies: setting loss_mask afterwards plants nothing.)
    encoder.field_stops = None
    with pytest.raises(BuildError, match="^a Ray worker failed: AttributeError: 'NoneType' object has no attribute "
                                         r"'\w+'$"):
        list(ray_encode_batches(batches(conversations(), 16), encoder, 2, None))


def _missing_on_the_workers():
    raise ImportError("No module named 'only_on_the_driver'")


class _UnloadableOnWorkers:
    def __reduce__(self):
        return _missing_on_the_workers, ()


def test_a_worker_that_dies_starting_is_one_line(ray_instance):
    """A node whose environment cannot load the encoder: its actor dies in its constructor."""
    encoder, conversations = _tiny_stream()
    encoder.extra = _UnloadableOnWorkers()
    with pytest.raises(BuildError, match=r"^a Ray worker died \(\w+\): while starting: check that every node"):
        list(ray_encode_batches(batches(islice(conversations(), 20), 8), encoder, 1, None))


def test_refuses_workers_with_other_libraries(ray_instance, monkeypatch):
    import databuild.executors.ray as executor

    encoder, conversations = _tiny_stream()
    here = {**executor.library_versions(), "tokenizers": "0.0.1"}
    monkeypatch.setattr(executor, "library_versions", lambda: here)  # the driver's view only
    with pytest.raises(BuildError, match=r"libraries differ .*tokenizers .* on a worker, 0\.0\.1 here"):
        next(ray_encode_batches(batches(conversations(), 16), encoder, 1, None))


def test_refuses_more_workers_than_cpus(ray_instance):
    encoder, conversations = _tiny_stream()
    cpus = int(ray.cluster_resources()["CPU"])
    with pytest.raises(BuildError, match=rf"^{cpus + 1} workers need {cpus + 1} CPUs .* it has {cpus}$"):
        next(ray_encode_batches(batches(conversations(), 16), encoder, cpus + 1, None))
    assert ray.is_initialized()


def test_without_ray_installed(monkeypatch):
    encoder, conversations = _tiny_stream()
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(BuildError, match=r"^the ray executor needs the extra: pip install 'databuild\[ray\]'$"):
        ray_encode_batches(batches(conversations(), 16), encoder, 1, None)  # at the call, before any result


def test_actor_methods_run_on_the_worker_main_thread(ray_instance):
    """Where the render limit's SIGALRM is delivered (encode/render_limit.py); elsewhere its watchdog
    would bound the render instead."""
    import threading

    class Where:
        def main(self) -> bool:
            return threading.current_thread() is threading.main_thread()

    actor = ray.remote(num_cpus=1)(Where).remote()
    assert ray.get(actor.main.remote()) is True
    ray.kill(actor)


def test_a_render_that_never_ends_stops_a_ray_build_in_one_line(ray_instance, tmp_path):
    from conftest import write_config
    from databuild.config import load_config
    from source_folders import OK_ROWS, write_chat_source
    from test_render_limit import endless_tokenizer

    config = load_config(write_config(tmp_path / "c.yaml", source={"dir": str(write_chat_source(tmp_path, OK_ROWS))},
                                      tokenizer=endless_tokenizer(tmp_path), rows=4, render_timeout=1,
                                      on_bad_conversation="skip"))
    with pytest.raises(BuildError, match=r"^conversation 'ok-1.*a render of it took longer than 1 s \(render_timeout\)"
                                         r".*nothing was written$") as caught:
        make(config, tmp_path / "out", progress=False, executor="ray", workers=2, batch_size=3)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out" / "c.parquet").exists()
