"""Clients pickle as their configuration, never their key, and work in forked and spawned
workers (what multiprocessing and Dask need)."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle

import numpy as np
import pytest

import sensorium
from _helpers import ENCODER
from sensorium.errors import ConfigurationError

WINDOW = np.random.default_rng(3).normal(size=(2, 128))


@pytest.mark.parametrize("cls", [sensorium.Client, sensorium.AsyncClient])
def test_pickle_holds_the_configuration_and_not_the_key(emu, monkeypatch, cls):
    client = cls(api_key=emu.api_key, base_url=emu.base_url, timeout=12.5, max_retries=5,
                 default_headers={"X-Team": "vision"})
    client = client.with_options(read_timeout=33)
    data = pickle.dumps(client)
    assert emu.api_key.encode() not in data
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    monkeypatch.delenv("SENSORIUM_BASE_URL", raising=False)
    again = pickle.loads(data)
    assert type(again) is cls
    assert (again.base_url, again.agents_base_url) == (client.base_url, client.agents_base_url)
    assert (again.timeout, again.max_retries) == (12.5, 5)
    assert again._options == client._options
    assert emu.api_key not in repr(again)


def test_unpickled_client_uses_the_environments_key(emu, monkeypatch):
    data = pickle.dumps(emu.client())
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    with pickle.loads(data) as client:
        assert client.embed(ENCODER, WINDOW).vectors.shape == (2, 768)
    other_org = emu.new_api_key()
    monkeypatch.setenv("SENSORIUM_API_KEY", other_org)
    with pickle.loads(data) as client:
        client.embed(ENCODER, WINDOW)
    assert emu.requests[-1].org != emu.requests[-2].org


@pytest.mark.parametrize("cls", [sensorium.Client, sensorium.AsyncClient])
def test_unpickled_without_a_key_the_first_call_names_the_variable(emu, monkeypatch, cls):
    # Unpickling itself succeeds: an error raised while unpickling a task's arguments never
    # reaches the caller of a multiprocessing pool or a Dask future, who would wait forever.
    original = cls(api_key=emu.api_key, base_url=emu.base_url)
    monkeypatch.delenv("SENSORIUM_API_KEY", raising=False)
    client = pickle.loads(pickle.dumps(original))
    assert client.base_url == original.base_url and emu.api_key not in repr(client)
    assert pickle.loads(pickle.dumps(client)).base_url == original.base_url  # a worker may pass it on
    with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY"):
        if cls is sensorium.Client:
            client.embed(ENCODER, WINDOW)
        else:
            asyncio.run(client.embed(ENCODER, WINDOW))
    with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY"):
        client.files.info() if cls is sensorium.Client else asyncio.run(client.files.info())
    assert emu.requests == []


@pytest.mark.parametrize("cls", [sensorium.Client, sensorium.AsyncClient])
@pytest.mark.parametrize("key, problem", [("", "is not set"), ("   ", "is blank"), ("\n", "is blank"),
                                          ("ab\ncd", "a control character"), ("sk-\x1bx", "a control character"),
                                          ("sk-cl\u00e9", "a non-ASCII character")],
                         ids=["empty", "spaces", "newline", "inner-newline", "control-character", "non-ascii"])
def test_unpickled_with_an_unusable_key_the_first_call_says_so(emu, monkeypatch, cls, key, problem):
    """A blank or malformed key in the worker's environment made unpickling itself raise, which a
    multiprocessing pool cannot deliver: the task was lost and its caller waited for ever. Every
    unusable key is treated as a missing one: the client unpickles and its first call raises."""
    original = cls(api_key=emu.api_key, base_url=emu.base_url)
    monkeypatch.setenv("SENSORIUM_API_KEY", key)
    client = pickle.loads(pickle.dumps(original))
    assert client.base_url == original.base_url
    with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY") as info:
        client.files.info() if cls is sensorium.Client else asyncio.run(client.files.info())
    assert problem in str(info.value)
    assert not key.strip() or key.strip() not in str(info.value), "the key is never shown"
    assert emu.requests == []


def _embed_with(client):
    return client.embed(ENCODER, WINDOW).vectors.shape


def test_a_pool_worker_without_the_key_reports_it_to_the_caller(emu, monkeypatch):
    # The parent holds the key in the client only; the pool's workers have none to take.
    monkeypatch.delenv("SENSORIUM_API_KEY", raising=False)
    client = sensorium.Client(api_key=emu.api_key, base_url=emu.base_url)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        result = pool.apply_async(_embed_with, (client,))
        with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY"):
            result.get(timeout=120)  # a hang (the old behaviour) ends here as a TimeoutError


def test_a_closed_client_does_not_pickle(emu):
    client = emu.client()
    client.close()
    with pytest.raises(TypeError, match="closed"):
        pickle.dumps(client)


def _embed_in_worker(client, queue):
    """Runs in the child: embeds with the client it was given (inherited or unpickled)."""
    try:
        queue.put(client.embed_many(ENCODER, WINDOW[np.newaxis]))
    except BaseException as e:  # reported to the parent, which fails the test with it
        queue.put(repr(e))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_client_works_in_forked_and_spawned_workers(emu, monkeypatch, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available here")
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    client = emu.client()
    expected = client.embed_many(ENCODER, WINDOW[np.newaxis])  # the parent's runtime is running
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    worker = ctx.Process(target=_embed_in_worker, args=(client, queue))
    worker.start()
    try:
        got = queue.get(timeout=120)
    finally:
        worker.join(timeout=60)
    assert not isinstance(got, str), got
    np.testing.assert_array_equal(got, expected)
    assert worker.exitcode == 0


@pytest.mark.parametrize("array", [np.array([[1, 2], [3, 4]]), np.linspace(0, 1, 12).reshape(3, 4),
                                   np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4),
                                   np.array([[2**64 - 1, 0]], dtype=np.uint64)], ids=["int", "float64", "float32", "uint64"])
def test_a_numeric_event_pickles_and_copies_with_its_numbers_exact(array):
    import copy

    event = sensorium.events.numeric(array)
    for again in (pickle.loads(pickle.dumps(event)), copy.deepcopy(event), copy.copy(event)):
        assert again.to_dict() == event.to_dict() and (again.channels, again.window) == (event.channels, event.window)


def test_a_numeric_event_is_not_rebuilt_from_anything_else():
    with pytest.raises(sensorium.errors.InvalidArgumentError, match="numeric_array"):
        sensorium.events.NumericEvent._from_json(b'{"type": "data.text", "event_data": {"contents": "x"}}')
