"""``AsyncClient``: real awaitables on the running loop, concurrency, cancellation."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import weakref

import numpy as np
import pytest

import sensorium
from _helpers import ENCODER, REASONER, calls
from sensorium import AsyncPager, Embeddings, FileRecord, QueryResult, events
from sensorium.errors import (
    APITimeoutError,
    InternalServerError,
    InvalidArgumentError,
    NotFoundError,
    QueryFailedError,
)


@pytest.fixture
async def aclient(emu):
    async with emu.async_client() as client:
        yield client


async def test_query(aclient):
    result = await aclient.query(REASONER, "hello", events=[events.text("PUFFIN-8")])
    assert isinstance(result, QueryResult)
    assert result.status == "completed" and "PUFFIN-8" in result.text


@pytest.mark.timeout(30)
async def test_gather_runs_queries_concurrently(emu, aclient):
    emu.set_query_delay(0.5)
    markers = [f"GANNET-{i}" for i in range(8)]
    start = time.monotonic()
    results = await asyncio.gather(
        *(aclient.query(REASONER, "echo", events=[events.text(m)]) for m in markers)
    )
    elapsed = time.monotonic() - start
    assert [m in r.text for m, r in zip(markers, results)] == [True] * 8
    assert len({r.query_id for r in results}) == 8
    # Eight 0.5 s queries one after another would take 4 s.
    assert elapsed < 3.0


@pytest.mark.timeout(30)
async def test_event_loop_keeps_running_during_a_query(emu, aclient):
    emu.set_query_delay(0.6)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    task = asyncio.create_task(ticker())
    await aclient.query(REASONER, "hi")
    task.cancel()
    assert ticks >= 10


@pytest.mark.timeout(30)
async def test_cancelling_a_pending_query_leaves_the_client_usable(emu, aclient):
    emu.set_query_delay(5.0)
    task = asyncio.create_task(aclient.query(REASONER, "never mind"))
    await asyncio.sleep(0.3)
    assert not task.done()
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - start < 3.0  # not the 5 s the query takes
    emu.set_query_delay(0.0)
    result = await aclient.query(REASONER, "again", events=[events.text("TERN-2")])
    assert "TERN-2" in result.text


@pytest.mark.timeout(30)
async def test_wait_for_timeout_cancels_and_client_survives(emu, aclient):
    emu.set_query_delay(3.0)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(aclient.query(REASONER, "slow"), timeout=0.2)
    emu.set_query_delay(0.0)
    results = await asyncio.gather(*(aclient.query(REASONER, "fast") for _ in range(3)))
    assert all(r.status == "completed" for r in results)


async def test_errors_raise_from_await(emu, aclient):
    with pytest.raises(NotFoundError):
        await aclient.files.metadata("missing.txt")
    with pytest.raises(InvalidArgumentError):
        await aclient.query(REASONER, "hi", max_new_tokens="many")
    assert calls(emu, "/query") == []
    emu.fail_queries("async boom", times=1)
    with pytest.raises(QueryFailedError, match="async boom"):
        await aclient.query(REASONER, "hi")


async def test_retries(emu):
    emu.inject("POST", "/query", status=503, retry_after=0.02, times=2)
    async with emu.async_client(max_retries=2) as client:
        assert (await client.query(REASONER, "x")).status == "completed"
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2, 3]
    emu.inject("POST", "/query", status=503, retry_after=0.02, times=None)
    async with emu.async_client(max_retries=1) as client:
        with pytest.raises(InternalServerError):
            await client.query(REASONER, "x")


async def test_timeout(emu):
    emu.set_query_delay(2.0)
    async with emu.async_client(timeout=0.2, max_retries=0) as client:
        with pytest.raises(APITimeoutError):
            await client.query(REASONER, "x")


async def test_embed(aclient, client):
    data = np.random.default_rng(3).normal(size=(2, 1024))
    result = await aclient.embed(ENCODER, data)
    assert isinstance(result, Embeddings) and result.vectors.shape == (2, 768)
    np.testing.assert_array_equal(result.vectors, client.embed(ENCODER, data).vectors)
    with pytest.raises(InvalidArgumentError):
        await aclient.embed(ENCODER, np.array([np.nan]))


async def test_files_round_trip(aclient, tmp_path):
    for i in range(5):
        (tmp_path / f"a{i}.txt").write_text(f"content {i}")
        record = await aclient.files.upload(tmp_path / f"a{i}.txt")
        assert isinstance(record, FileRecord)
    await aclient.files.upload_base64("b.csv", b"x,y\n")
    pager = aclient.files.list(limit=2)
    assert isinstance(pager, AsyncPager)
    names = [f.file_id async for f in pager]
    assert sorted(names) == sorted([f"a{i}.txt" for i in range(5)] + ["b.csv"])
    first = await aclient.files.list(limit=2).first_page()
    assert len(first.data) == 2 and first.has_more
    pages = [p async for p in aclient.files.list(limit=4).pages()]
    assert [len(p.data) for p in pages] == [4, 2]
    assert (await aclient.files.metadata("a3.txt")).num_bytes == len("content 3")
    assert (await aclient.files.info())["num_files"] == 6
    out = await aclient.files.download("a2.txt", tmp_path / "out.txt")
    assert out.read_text() == "content 2"
    assert (await aclient.files.delete("a2.txt")).file_id == "a2.txt"
    with pytest.raises(NotFoundError):
        await aclient.files.metadata("a2.txt")


async def test_models(aclient):
    ids = [m.id async for m in aclient.models.list(model_family="Encoder")]
    assert ENCODER in ids and REASONER not in ids


async def test_with_options(emu, aclient):
    emu.inject("POST", "/query", status=503, retry_after=0.02, times=None)
    with pytest.raises(InternalServerError):
        await aclient.with_options(max_retries=0).query(REASONER, "x")
    assert len(calls(emu, "/query")) == 1


async def test_many_concurrent_mixed_calls(emu, aclient, tmp_path):
    for i in range(4):
        await aclient.files.upload_base64(f"m{i}.txt", f"MARK{i}".encode())
    coros = []
    for i in range(4):
        coros.append(aclient.query(REASONER, "read", file_ids=[f"m{i}.txt"]))
        coros.append(aclient.files.metadata(f"m{i}.txt"))
        coros.append(aclient.embed(ENCODER, np.full((1, 64), float(i))))
    results = await asyncio.gather(*coros)
    for i in range(4):
        assert f"MARK{i}" in results[3 * i].text
        assert results[3 * i + 1].file_id == f"m{i}.txt"
        assert results[3 * i + 2].vectors.shape == (1, 768)


async def test_progress_callback_on_async_download(aclient, tmp_path):
    content = b"z" * 500_000
    await aclient.files.upload_base64("z.txt", content)
    seen: list[tuple[int, int]] = []
    out = await aclient.files.download("z.txt", tmp_path / "z.txt", on_progress=lambda d, t: seen.append((d, t)))
    assert out.read_bytes() == content
    assert seen and seen[-1] == (len(content), len(content))


async def test_one_failure_in_gather_does_not_disturb_the_others(aclient):
    results = await asyncio.gather(
        aclient.query(REASONER, "ok-1"),
        aclient.files.metadata("missing.txt"),
        aclient.query(REASONER, "ok-2"),
        return_exceptions=True,
    )
    assert results[0].status == "completed" and results[2].status == "completed"
    assert isinstance(results[1], NotFoundError)


def test_one_client_across_two_event_loops(emu):
    client = emu.async_client()

    async def once(marker):
        return (await client.query(REASONER, "x", events=[events.text(marker)])).text

    assert "LOOP-ONE" in asyncio.run(once("LOOP-ONE"))
    assert "LOOP-TWO" in asyncio.run(once("LOOP-TWO"))
    client.close()


# Defect: a loop closed while a call was still pending (not cancelled) was never freed, with the
# two sockets of its wake-up pair: the module's table of loops held the loop's bridge, which held
# the pending future, which held the loop.

@pytest.mark.timeout(60)
def test_a_loop_closed_with_a_call_pending_is_freed_with_its_sockets(emu):
    emu.set_query_delay(0.5)
    client = emu.async_client()

    def unix_sockets():
        # The wake-up pairs; TCP connections (the pool's, the emulator's) come and go meanwhile.
        with open("/proc/net/unix") as table:
            inodes = {line.split()[6] for line in list(table)[1:]}
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except FileNotFoundError:  # the listing's own descriptor, closed since
                continue
            count += link.startswith("socket:[") and link[8:-1] in inodes
        return count

    async def start_a_query():
        asyncio.ensure_future(client.query(REASONER, "x"))
        await asyncio.sleep(0)  # the query's task takes its first step: the request is sent

    before = unix_sockets()
    loops = []
    for _ in range(10):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(start_a_query())
        loop.close()
        loops.append(weakref.ref(loop))
        del loop
    gc.collect()
    assert [alive for alive in loops if alive() is not None] == []
    # The sockets go once the requests have ended on the server (within the query delay).
    deadline = time.monotonic() + 30
    while unix_sockets() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert unix_sockets() <= before
    client.close()


@pytest.mark.timeout(30)
async def test_cancelling_a_download_cancels_the_transfer(emu, aclient, tmp_path):
    """Cancelling the awaitable cancels the Rust future: the stalled transfer stops and its
    temporary file goes, long before the 60 s read timeout would end it."""
    # Above the 4 MiB that downloads gather in memory, so the bytes stream to a temporary file.
    await aclient.files.upload_base64("big.png", b"\x89PNG" + bytes(5_000_000))
    emu.inject("GET", "/files/download/big.png", action="stall", times=1)
    folder = tmp_path / "dl"
    folder.mkdir()
    task = asyncio.create_task(aclient.files.download("big.png", folder))
    deadline = time.monotonic() + 10
    while not list(folder.iterdir()) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert list(folder.iterdir()), "the partial file should exist while the transfer is stalled"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 3
    while list(folder.iterdir()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert list(folder.iterdir()) == []
    out = await aclient.files.download("big.png", folder)
    assert out.stat().st_size == 5_000_004


def test_async_resource_methods_are_coroutine_functions_as_their_stubs_say():
    """The stubs declare `async def files.metadata(...)` and the like, but at runtime they were
    plain methods returning an awaitable: `inspect.iscoroutinefunction` said False (frameworks
    dispatch on it). Every method of every Async* class in the stubs is checked against them."""
    import ast
    import importlib
    import inspect
    from pathlib import Path

    stubs = Path(sensorium.__file__).parent / "resources"
    checked = 0
    for stub in sorted(stubs.glob("*.pyi")):
        module = importlib.import_module(f"sensorium.resources.{stub.stem}")
        for node in ast.parse(stub.read_text()).body:
            if not (isinstance(node, ast.ClassDef) and node.name.startswith("Async")):
                continue
            cls = getattr(module, node.name)
            for method in node.body:
                if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and not method.name.startswith("_"):
                    declared = isinstance(method, ast.AsyncFunctionDef)
                    actual = inspect.iscoroutinefunction(getattr(cls, method.name))
                    assert actual == declared, f"{node.name}.{method.name}: stub async={declared}, runtime {actual}"
                    checked += 1
    assert checked > 80


def test_a_bad_argument_to_an_async_resource_method_is_raised_where_it_is_awaited(emu):
    """`client.files.metadata(5)` on AsyncClient raised TypeError at the call, before any await,
    unlike `AsyncClient.query(5, ...)`; now both raise when awaited."""
    client = sensorium.AsyncClient(api_key=emu.api_key, base_url=emu.base_url)
    pending = client.files.metadata(5)  # no exception here
    with pytest.raises(TypeError, match="^file_id: "):
        asyncio.run(pending)
    unawaited = client.agents.blueprints.get("")
    unawaited.close()  # never awaited: closing it leaves no warning
    assert len(emu.requests) == 0
