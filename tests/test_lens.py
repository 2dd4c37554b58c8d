"""The lens surface through the public API against the emulator, sync and async: register →
session → wait running → stream → destroy (the stream ends); streams that lose and repeat
nothing over dropped connections and across processes; heartbeats on request; the refused
shapes; the echoed key never kept; one DeprecationWarning per process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator, Optional

import pytest

from _fake_server import FakeServer, response
from _helpers import header, run_on
from sensorium.errors import (APIConnectionError, APIResponseValidationError, APITimeoutError, InvalidArgumentError,
                              LensEventError, NotFoundError, SensoriumError, WaitTimeoutError)
from sensorium.testing import Emulator
from sensorium.types import Lens, LensSession, StreamEvent

pytestmark = pytest.mark.filterwarnings("ignore:the lens runtime is deprecated:DeprecationWarning")

NOOP = {"processor_name": "lens_noop_processor", "processor_config": {}}
SSE = {"processor_name": "server_sent_events_writer", "processor_config": {}}


@pytest.fixture
def emu():
    with Emulator(lens_heartbeat_interval=0.2) as emulator:
        yield emulator


def on(emu: Emulator, kind: str, operation: Callable[[Any], Any], **options: Any) -> Any:
    return run_on(kind, operation, api_key=emu.api_key, base_url=emu.base_url, **options)


def read(emu: Emulator, kind: str, session_id: str, *, stop_after: Optional[int] = None,
         **options: Any) -> tuple[list[StreamEvent], Optional[str]]:
    """The events of one stream (until it ends, or ``stop_after`` events), and its last_event_id."""
    client_options = {k: options.pop(k) for k in ("read_timeout", "max_retries") if k in options}
    events: list[StreamEvent] = []
    if kind == "sync":
        with emu.client(**client_options) as client:
            with client.lens.sessions.stream(session_id, **options) as stream:
                for event in stream:
                    events.append(event)
                    if stop_after is not None and len(events) == stop_after:
                        break
                return events, stream.last_event_id

    async def main() -> Optional[str]:
        import sensorium

        async with sensorium.AsyncClient(api_key=emu.api_key, base_url=emu.base_url, **client_options) as client:
            async with client.lens.sessions.stream(session_id, **options) as stream:
                async for event in stream:
                    events.append(event)
                    if stop_after is not None and len(events) == stop_after:
                        break
                return stream.last_event_id

    return events, asyncio.run(main())


def running_session(emu: Emulator, kind: str, pipeline: list[dict[str, Any]]) -> str:
    lens = on(emu, kind, lambda c: c.lens.register("echo", model_pipeline=pipeline))
    session = on(emu, kind, lambda c: c.lens.sessions.create(lens.lens_id))
    on(emu, kind, lambda c: c.lens.sessions.wait_until_running(session.session_id, timeout=10))
    return str(session.session_id)


def feed(emu: Emulator, session_id: str, count: int, start: int = 0) -> None:
    with emu.client() as client:
        for i in range(start, start + count):
            client.lens.sessions.process_event(session_id, {"type": "data.json", "event_data": {"i": i}})


def in_background(work: Callable[[], Any]) -> Callable[[], Any]:
    """Starts ``work`` on a thread; the returned function joins it and gives its result."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # handed to the test thread
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(timeout=60)
        assert not thread.is_alive(), "the stream did not end"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return join


@contextlib.contextmanager
def fake_session_socket(handler: Callable[[Any], None]) -> Iterator[str]:
    """A WebSocket server running ``handler(ws)`` per connection, behind a REST fake whose session
    record (any id) points at it; yields the REST base URL."""
    from websockets.sync.server import serve

    with serve(handler, "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        endpoint = f"ws://127.0.0.1:{ws_server.socket.getsockname()[1]}/v0.5/lens/sessions/lsn-1"
        record = json.dumps({"session_id": "lsn-1", "session_endpoint": endpoint}).encode()
        with FakeServer(lambda head: [response(200, record)]) as rest:
            yield rest.base_url


def answer_after_the_next_request(ws: Any) -> None:
    """Answers each request with ``{type: event_data.reply_type or <type>.response, event_data}``,
    in order; the answer to a request with ``hold: true`` goes out only once the next request has
    come, so its caller has given up by then and the next caller is waiting."""
    held: list[str] = []
    for message in ws:
        request = json.loads(message)
        data = request.get("event_data") or {}
        held.append(json.dumps({"type": data.get("reply_type") or f"{request['type']}.response", "event_data": data}))
        if not data.get("hold"):
            for reply in held:
                ws.send(reply)
            held.clear()


@contextlib.contextmanager
def interrupted_after(seconds: float, before: Callable[[], None] = lambda: None) -> Iterator[None]:
    """A Ctrl-C (``KeyboardInterrupt``, raised in the main thread) ``seconds`` after entering,
    once ``before()`` has run in the signal handler."""
    def interrupt(*_: Any) -> None:
        before()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_register_session_stream_destroy(emu, client_kind):
    lens = on(emu, client_kind, lambda c: c.lens.register("echo", model_pipeline=[NOOP, SSE]))
    assert isinstance(lens, Lens) and lens.lens_id.startswith("lns-") and lens.lens_config["lens_name"] == "echo"
    session = on(emu, client_kind, lambda c: c.lens.sessions.create(lens.lens_id))
    assert isinstance(session, LensSession) and session.status == "registered" and session.num_events == 0
    running = on(emu, client_kind, lambda c: c.lens.sessions.wait_until_running(session.session_id, timeout=10))
    assert running.status == "running" and running.session_start_timestamp is not None
    answer = on(emu, client_kind, lambda c: c.lens.sessions.process_event(
        session.session_id, {"type": "data.json", "event_data": {"i": 0}}))
    assert answer["response"][0]["type"] == "inference.result"
    feed(emu, session.session_id, 4, start=1)

    done = in_background(lambda: read(emu, client_kind, session.session_id))
    time.sleep(0.5)
    destroyed = on(emu, client_kind, lambda c: c.lens.sessions.destroy(session.session_id))
    assert destroyed.status == "destroyed" and destroyed.session_destroyed_timestamp is not None
    events, last_id = done()
    assert [e.type for e in events] == ["inference.result"] * 5
    assert [e.event_data for e in events] == [{"i": i} for i in range(5)]
    assert last_id == events[-1].id
    with pytest.raises(NotFoundError):
        read(emu, client_kind, session.session_id)


def test_dropped_connections_lose_and_repeat_nothing(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP, SSE])
    emu.drop_streams(every=37)
    feed(emu, session_id, 200)
    done = in_background(lambda: read(emu, client_kind, session_id))
    feed(emu, session_id, 200, start=200)
    with emu.client() as client:
        client.lens.sessions.destroy(session_id)
    events, _ = done()
    assert [e.event_data["i"] for e in events] == list(range(400))
    consumer = [r for r in emu.requests if "/lens/sessions/consumer/" in r.path]
    assert len(consumer) >= 400 // 37  # it really reconnected, each time after the last event read
    assert all(header(r, "last-event-id") for r in consumer[1:])


@pytest.mark.parametrize("action", ["truncate", "stall"])
def test_an_emulator_stream_cut_or_stalled_by_a_fault_is_read_again(emu, client_kind, action):
    """inject(action="stall"|"truncate") on the stream route used to wait for the end of a body
    that never ends: the client saw no answer at all, neither a cut nor a stall. A cut is seen at
    once (the default 60 s stall timeout is never reached); a stall after the stall timeout."""
    session_id = running_session(emu, client_kind, [NOOP, SSE])
    feed(emu, session_id, 20)
    emu.inject("GET", "/lens/sessions/consumer/*", action=action)
    options = {"read_timeout": 0.5} if action == "stall" else {}
    done = in_background(lambda: read(emu, client_kind, session_id, **options))
    deadline = time.monotonic() + 15
    while len([r for r in emu.requests if "/lens/sessions/consumer/" in r.path]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len([r for r in emu.requests if "/lens/sessions/consumer/" in r.path]) == 2, "no second connection"
    with emu.client() as client:
        client.lens.sessions.destroy(session_id)
    events, _ = done()
    assert [e.event_data["i"] for e in events] == list(range(20))
    assert len([r for r in emu.requests if "/lens/sessions/consumer/" in r.path]) == 2


def test_a_later_process_resumes_where_the_first_stopped(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP, SSE])
    feed(emu, session_id, 30)
    first, last_id = read(emu, client_kind, session_id, stop_after=12)
    assert [e.event_data["i"] for e in first] == list(range(12)) and last_id == first[-1].id
    done = in_background(lambda: read(emu, client_kind, session_id, last_event_id=last_id))
    time.sleep(0.3)
    with emu.client() as client:
        client.lens.sessions.destroy(session_id)
    rest, _ = done()
    assert [e.event_data["i"] for e in rest] == list(range(12, 30))


def test_heartbeats_only_when_asked(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP, SSE])
    feed(emu, session_id, 1)
    events, _ = read(emu, client_kind, session_id, heartbeats=True, stop_after=3)
    assert events[0].type == "inference.result"
    beats = [e for e in events if e.type == "sse.stream.heartbeat"]
    assert beats and beats[0].event_data["message_timeout"] == 5.0
    quiet, _ = read(emu, client_kind, session_id, stop_after=1)
    assert [e.type for e in quiet] == ["inference.result"]


def test_a_stalled_connection_is_resumed_after_the_last_event():
    frames = [f"event: message\r\nid: {i}\r\ndata: {{\"type\": \"inference.result\", \"event_data\": {{\"i\": {i}}}}}"
              f"\r\n\r\n".encode() for i in range(1, 7)]
    seen: list[bytes] = []

    def script(head: bytes) -> list[Any]:
        seen.append(head)
        start = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"last-event-id:"):
                start = int(line.split(b":", 1)[1])
        head_bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        if start == 0:  # three events, a frame cut in half, then silence
            return [head_bytes + b"".join(frames[:3]) + frames[3][:20], 30.0]
        return [head_bytes + b"".join(frames[start:]) + b'id: 99\ndata: {"type": "sse.stream.end"}\n\n']

    import sensorium

    with FakeServer(script) as server:
        with sensorium.Client(api_key="sk-test", base_url=server.base_url, read_timeout=0.5) as client:
            with client.lens.sessions.stream("lsn-1") as stream:
                got = [e.event_data["i"] for e in stream]
    assert got == [1, 2, 3, 4, 5, 6]
    assert len(seen) == 2 and b"last-event-id: 3" in seen[1].lower()


def sse_frame(data: str, event_id: Optional[int] = None) -> bytes:
    return (f"event: message\r\n" + (f"id: {event_id}\r\n" if event_id is not None else "")
            + f"data: {data}\r\n\r\n").encode()


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def test_frames_without_an_id_are_events_too(client_kind):
    # SSE: `id` is optional and the last one carries forward; such frames are new events.
    frames = [sse_frame(f'{{"type": "inference.result", "event_data": {{"i": {i}}}}}', event_id)
              for i, event_id in enumerate((1, None, None, 4))]
    end = sse_frame('{"type": "sse.stream.end"}')
    with FakeServer(lambda head: [SSE_HEAD + b"".join(frames) + end]) as server:
        events, last_id = read_stream(client_kind, server.base_url)
    assert [(e.id, e.event_data["i"]) for e in events] == [("1", 0), ("1", 1), ("1", 2), ("4", 3)]
    assert last_id == "4"


def test_a_key_a_stream_event_echoes_is_taken_out(client_kind):
    """HTTP answers and socket messages had the key taken out on arrival; stream events did not."""
    echo = sse_frame('{"type": "inference.result", "event_data": {"note": "served for sk-test", "keys": ["sk-test"]}}', 1)
    end = sse_frame('{"type": "sse.stream.end"}')
    with FakeServer(lambda head: [SSE_HEAD + echo + end]) as server:
        events, last_id = read_stream(client_kind, server.base_url)
    [event] = events
    assert event.event_data == {"note": "served for <redacted>", "keys": ["<redacted>"]}
    assert (event.id, event.type, last_id) == ("1", "inference.result", "1")
    for text in (event.data, repr(event), pickle.dumps(event).decode("latin-1")):
        assert "sk-test" not in text


def read_stream(kind: str, base_url: str) -> tuple[list[StreamEvent], Optional[str]]:
    async def events(c: Any) -> tuple[list[StreamEvent], Optional[str]]:
        async with c.lens.sessions.stream("lsn-1") as stream:
            return [e async for e in stream], stream.last_event_id

    def sync_events(c: Any) -> tuple[list[StreamEvent], Optional[str]]:
        with c.lens.sessions.stream("lsn-1") as stream:
            return list(stream), stream.last_event_id

    return run_on(kind, sync_events if kind == "sync" else events, api_key="sk-test", base_url=base_url)


def test_an_interrupted_or_cancelled_wait_for_events_loses_none(client_kind):
    # The second event arrives while the caller waits; the wait is then given up (Ctrl-C on
    # Client, a cancelled `__anext__` on AsyncClient) after the core has received the event but
    # before Python has it. The next read must hand it out.
    arrive = threading.Event()

    def script(head: bytes) -> Iterator[bytes]:
        yield SSE_HEAD + sse_frame('{"type": "inference.result", "event_data": {"i": 1}}', 1)
        arrive.wait(10)
        yield sse_frame('{"type": "inference.result", "event_data": {"i": 2}}', 2) + sse_frame(
            '{"type": "sse.stream.end"}', 3)

    def received_meanwhile() -> None:
        arrive.set()
        time.sleep(0.5)  # the core's reading task takes the event meanwhile

    def sync_body(c: Any) -> list[int]:
        with c.lens.sessions.stream("lsn-1") as stream:
            got = [next(stream).event_data["i"]]
            with pytest.raises(KeyboardInterrupt), interrupted_after(0.2, received_meanwhile):
                next(stream)
            return got + [e.event_data["i"] for e in stream]

    async def async_body(c: Any) -> list[int]:
        async with c.lens.sessions.stream("lsn-1") as stream:
            got = [(await stream.__anext__()).event_data["i"]]
            waiting = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0)  # the wait starts
            received_meanwhile()  # blocks the loop: the result cannot reach the waiting task
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            return got + [e.event_data["i"] async for e in stream]

    with FakeServer(script) as server:
        got = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                     base_url=server.base_url)
    assert got == [1, 2]


def test_refused_shapes(emu, client_kind):
    with emu.client() as client:
        for bad, argument in ((lambda: client.lens.register(" ", model_pipeline=[NOOP]), "name"),
                              (lambda: client.lens.register("x"), "model_pipeline"),
                              (lambda: client.lens.register("x", model_pipeline=[{"name": "noop"}]), "model_pipeline"),
                              (lambda: client.lens.register("lens_name: [unclosed\nmodel_pipeline: []"), "name"),
                              (lambda: client.lens.sessions.process_event("lsn-1", {"data": 1}), "event"),
                              (lambda: client.lens.modify("lns-1"), "lens_name"),
                              (lambda: client.lens.sessions.stream(" "), "session_id"),
                              (lambda: client.lens.sessions.stream("lsn-1", last_event_id="7\nid: 9"), "last_event_id"),
                              (lambda: client.lens.sessions.wait_until_running("lsn-1", timeout=float("nan")),
                               "timeout")):
            with pytest.raises(InvalidArgumentError) as info:
                bad()
            assert info.value.argument == argument
        for config in ("model_pipeline: []\n", {"model_pipeline": [NOOP]}):
            with pytest.raises(InvalidArgumentError, match="no lens_name"):
                client.lens.register(config)
        for flag in (lambda: client.lens.sessions.stream("lsn-1", heartbeats="no"),
                     lambda: client.lens.sessions.connect("lsn-1", subprotocol=1)):
            with pytest.raises(InvalidArgumentError, match="takes True or False"):  # as every boolean option
                flag()
        assert emu.requests == []
    session_id = running_session(emu, client_kind, [NOOP])
    with pytest.raises(LensEventError) as refused:
        on(emu, client_kind, lambda c: c.lens.sessions.process_event(session_id, {"type": "bogus", "data": 1}))
    assert "bogus" in str(refused.value) and refused.value.body["type"] == "error"
    with pytest.raises(NotFoundError):
        on(emu, client_kind, lambda c: c.lens.sessions.info("lsn-missing"))


def test_lens_from_yaml_or_dict_clone_modify_delete(emu, client_kind):
    text = "lens_name: from yaml\nmodel_pipeline:\n  - processor_name: lens_noop_processor\n    processor_config: {}\n"
    lens = on(emu, client_kind, lambda c: c.lens.register(text))
    assert lens.lens_name == "from yaml"
    other = on(emu, client_kind, lambda c: c.lens.register({"lens_name": "as dict", "model_pipeline": [NOOP]}))
    clone = on(emu, client_kind, lambda c: c.lens.clone(other.lens_id, name="copy"))
    assert clone.lens_name == "copy" and clone.lens_id != other.lens_id
    changed = on(emu, client_kind, lambda c: c.lens.modify(clone.lens_id, model_pipeline=[NOOP, SSE]))
    assert [p["processor_name"] for p in changed.lens_config["model_pipeline"]] == [
        "lens_noop_processor", "server_sent_events_writer"]
    assert on(emu, client_kind, lambda c: c.lens.info(clone.lens_id)).lens_config == changed.lens_config
    on(emu, client_kind, lambda c: c.lens.delete(clone.lens_id))
    ids = {item.lens_id for item in on(emu, client_kind, lambda c: c.lens.metadata())}
    assert {lens.lens_id, other.lens_id} <= ids and clone.lens_id not in ids


def test_both_status_spellings_and_a_timeout(emu, client_kind):
    emu.set_lens_status_style("number")
    session_id = running_session(emu, client_kind, [NOOP])
    assert on(emu, client_kind, lambda c: c.lens.sessions.info(session_id)).session_status == "3"
    sessions = on(emu, client_kind, lambda c: c.lens.sessions.metadata())
    assert [s.status for s in sessions] == ["running"]
    lens = on(emu, client_kind, lambda c: c.lens.register("slow", model_pipeline=[NOOP]))
    fresh = on(emu, client_kind, lambda c: c.lens.sessions.create(lens.lens_id))
    with pytest.raises(WaitTimeoutError):
        on(emu, client_kind, lambda c: c.lens.sessions.wait_until_running(fresh.session_id, timeout=0))


def test_the_echoed_key_is_never_kept(emu):
    with emu.client() as client:
        lens = client.lens.register("echo", model_pipeline=[NOOP])
        session = client.lens.sessions.create(lens.lens_id)
    assert session.api_key == "<redacted>"
    for text in (repr(session), str(session.to_dict()), str(pickle.loads(pickle.dumps(session)))):
        assert emu.api_key not in text


def test_one_deprecation_warning_per_process(emu):
    code = ("import warnings, sensorium\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            f"    c = sensorium.Client(api_key='k', base_url='{emu.base_url}')\n"
            f"    c.lens; c.lens.sessions; sensorium.AsyncClient(api_key='k', base_url='{emu.base_url}').lens\n"
            "print([str(w.message) for w in seen if w.category is DeprecationWarning])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    messages = eval(out)
    assert len(messages) == 1 and "deprecated" in messages[0] and "agents" in messages[0]


def test_the_session_socket_pairs_each_reply_with_its_call(emu, client_kind):
    import numpy as np
    import pandas as pd

    session_id = running_session(emu, client_kind, [NOOP])
    window = np.arange(12, dtype=np.float64).reshape(3, 4)
    frame = pd.DataFrame(window.T, columns=["a", "b", "c"])

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect(session_id, subprotocol=True) as socket:
            status = socket.status()
            checks = socket.validate()
            updated = [socket.update(window), socket.update(frame),
                       socket.update({"type": "data.json", "event_data": {"k": 1}})]
            first, again = socket.read(), socket.read()
            replay = socket.read(client_id="another reader")
            raw = socket.send("session.heartbeat")
            with pytest.raises(LensEventError):
                socket.set_input_stream("rtsp_video_streamer", {"rtsp_url": "rtsp://10.0.0.1/cam"})
            gone = socket.destroy()
        return status, checks, updated, first, again, replay, raw, gone

    async def async_body(c: Any) -> Any:
        async with await c.lens.sessions.connect(session_id, subprotocol=True) as socket:
            status = await socket.status()
            checks = await socket.validate()
            updated = [await socket.update(window), await socket.update(frame),
                       await socket.update({"type": "data.json", "event_data": {"k": 1}})]
            first, again = await socket.read(), await socket.read()
            replay = await socket.read(client_id="another reader")
            raw = await socket.send("session.heartbeat")
            with pytest.raises(LensEventError):
                await socket.set_input_stream("rtsp_video_streamer", {"rtsp_url": "rtsp://10.0.0.1/cam"})
            gone = await socket.destroy()
        return status, checks, updated, first, again, replay, raw, gone

    status, checks, updated, first, again, replay, raw, gone = on(
        emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert isinstance(status, LensSession) and status.session_id == session_id and status.api_key == "<redacted>"
    assert checks["is_valid"] is True
    assert all(u["is_valid"] for u in updated)
    contents = [m["data"] for m in first["messages"]]
    assert contents[0]["contents"] == window.tolist() and contents[1]["contents"] == window.tolist()
    assert contents[2] == {"k": 1}
    assert again is None  # this reader has read everything
    assert len(replay["messages"]) == 3  # a new reader replays from the start
    assert raw["type"] == "session.heartbeat.response"
    assert gone["is_valid"] is True
    with pytest.raises(NotFoundError):
        on(emu, client_kind, lambda c: c.lens.sessions.info(session_id))


def test_a_hundred_thousand_events_over_connections_cut_every_thousand(emu, client_kind):
    rows = 100_000
    csv = "time,x\n" + "".join(f"{i},{i % 7}\n" for i in range(rows))
    with emu.client() as client:
        client.files.upload_base64("long.csv", csv.encode())
    session_id = running_session(emu, client_kind, [NOOP, SSE])
    emu.drop_streams(every=1000)
    done = in_background(lambda: read(emu, client_kind, session_id))
    with emu.client() as client:
        with client.lens.sessions.connect(session_id) as socket:
            socket.set_input_stream("csv_file_reader", {"file_id": "long.csv", "window_size": 1})
        deadline = time.monotonic() + 120
        while client.lens.sessions.info(session_id).num_outputs < rows and time.monotonic() < deadline:
            time.sleep(0.2)
        client.lens.sessions.destroy(session_id)
    events, last_id = done()
    indices = [e.event_data["window_index"] for e in events]
    assert len(indices) == rows and indices == list(range(rows))  # each once, in order
    assert last_id == events[-1].id
    assert len([r for r in emu.requests if "/lens/sessions/consumer/" in r.path]) >= rows // 1000


def test_pings_are_answered_while_python_is_idle_and_stray_messages_never_become_replies(client_kind):
    pongs: list[bool] = []

    def handler(ws: Any) -> None:
        # A ping while the client sits idle: its reading task must answer.
        time.sleep(0.3)
        pongs.append(ws.ping().wait(timeout=2))
        for message in ws:
            request_type = json.loads(message)["type"]
            pongs.append(ws.ping().wait(timeout=2))
            # Unsolicited messages first: a heartbeat answer and garbage; neither is this call's reply.
            ws.send(json.dumps({"type": "session.heartbeat.response", "event_data": {"is_valid": True}}))
            ws.send("not json")
            if request_type == "session.status":
                ws.send(json.dumps({"session_id": "lsn-1", "session_status": "3", "api_key": "sk-test"}))
            else:
                ws.send(json.dumps({"type": f"{request_type}.response",
                                    "event_data": {"is_valid": True, "error_messages": [], "echo": request_type}}))

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect("lsn-1") as socket:
            time.sleep(1.0)  # Python does nothing; the ping still gets its pong
            return [socket.status(), socket.validate(), socket.read(),
                    socket.set_output_stream("sse", {}), socket.model_query(instruction="hi")]

    async def async_body(c: Any) -> Any:
        async with await c.lens.sessions.connect("lsn-1") as socket:
            await asyncio.sleep(1.0)
            return [await socket.status(), await socket.validate(), await socket.read(),
                    await socket.set_output_stream("sse", {}), await socket.model_query(instruction="hi")]

    with fake_session_socket(handler) as base_url:
        replies = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                         base_url=base_url)
    status, *others = replies
    assert status.session_id == "lsn-1" and status.status == "running" and status.api_key == "<redacted>"
    assert [r["echo"] for r in others] == ["session.validate", "session.read", "output_stream.set", "model.query"]
    assert pongs == [True] * 6


def test_the_late_reply_of_an_abandoned_socket_call_never_reaches_the_next_call(client_kind):
    # The first call gives up before its reply comes (Ctrl-C on Client, a cancelled awaitable on
    # AsyncClient); the server answers it only once the second call is waiting.
    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect("lsn-1") as socket:
            with pytest.raises(KeyboardInterrupt), interrupted_after(0.2):
                socket.send("session.read", {"call": 1, "hold": True})
            return socket.send("session.read", {"call": 2})

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect("lsn-1") as socket:  # no `await` needed
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(socket.send("session.read", {"call": 1, "hold": True}), 0.2)
            return await socket.send("session.read", {"call": 2})

    with fake_session_socket(answer_after_the_next_request) as base_url:
        reply = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                       base_url=base_url)
    assert reply == {"type": "session.read.response", "event_data": {"call": 2}}


def test_a_late_error_reply_of_a_timed_out_call_is_not_the_next_calls(client_kind):
    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect("lsn-1") as socket:
            with pytest.raises(APITimeoutError) as late:
                socket.send("model.query", {"call": 1, "hold": True, "reply_type": "error"})
            return late.value, socket.send("session.validate", {"call": 2})

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect("lsn-1") as socket:
            with pytest.raises(APITimeoutError) as late:
                await socket.send("model.query", {"call": 1, "hold": True, "reply_type": "error"})
            return late.value, await socket.send("session.validate", {"call": 2})

    with fake_session_socket(answer_after_the_next_request) as base_url:
        timeout, reply = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                                base_url=base_url, timeout=0.5)
    assert reply == {"type": "session.validate.response", "event_data": {"call": 2}}
    assert "no reply to model.query within 0.5s" in str(timeout)


def client_connections(port: int) -> int:
    """This process's TCP connections to ``port`` on this machine (the client's ends: an
    in-process emulator's own ends are on ``port`` locally)."""
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if int(row[2].split(":")[1], 16) == port and f"socket:[{row[9]}]" in sockets)


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc")
def test_closing_a_session_socket_closes_its_connection(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP])
    kept: list[Any] = []  # the objects live on, as in a long-lived attribute

    def sync_body(c: Any) -> Any:
        counts = []
        for _ in range(4):
            with c.lens.sessions.connect(session_id) as socket:
                socket.status()
            kept.append(socket)
            counts.append(client_connections(emu.port))
        return counts

    async def async_body(c: Any) -> Any:
        counts = []
        for _ in range(4):
            async with c.lens.sessions.connect(session_id) as socket:
                await socket.status()
            kept.append(socket)
            counts.append(client_connections(emu.port))
        return counts

    counts = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    # After the first round only the client's pooled HTTP connection is left, and it is reused.
    assert counts[1:] == [counts[0]] * 3


def test_status_of_a_destroyed_session_raises_as_read_does(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP])

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect(session_id) as socket:
            socket.destroy()
            with pytest.raises(LensEventError) as read:
                socket.read()
            with pytest.raises(LensEventError) as status:
                socket.status()
        return read.value, status.value

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect(session_id) as socket:
            await socket.destroy()
            with pytest.raises(LensEventError) as read:
                await socket.read()
            with pytest.raises(LensEventError) as status:
                await socket.status()
        return read.value, status.value

    read, status = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert status.error_messages == read.error_messages == [f"Session '{session_id}' was not found."]


def test_records_from_literal_json_of_the_spec_tables():
    # The spec's "Lens session record" and "Lens" tables, written out by hand.
    record = {
        "session_id": "lsn-250101abc", "lens_id": "lns-1", "lens_name": "echo", "org_id": "org-1",
        "api_key": "sk-live-secret", "session_status": "LensSessionStatus.SESSION_STATUS_REGISTERED",
        "session_endpoint": "wss://api.example/v0.5/lens/sessions/lsn-250101abc", "session_runner": "runner-3",
        "node_tag": "gpu-a", "session_ttl_sec": 86400,
        "lens_config": {"lens_name": "echo", "model_pipeline": [NOOP], "model_parameters": {}},
        "input_data_stream_id": None, "output_data_stream_id": None, "registration_timestamp": 1767225600.5,
        "last_event_timestamp": 1767225600.5, "last_update_timestamp": 1767225600.5,
        "session_start_timestamp": None, "session_destroyed_timestamp": None, "num_active_connections": 0,
        "num_updates": 0, "num_inputs": 0, "num_outputs": 0, "num_events": 0, "shiny_new_field": [1],
    }
    session = LensSession.from_dict(record)
    assert session.status == "registered" and session.session_ttl_sec == 86400 and session.num_events == 0
    assert session.session_start_timestamp is None and session.extra == {"shiny_new_field": [1]}
    assert session.api_key == "<redacted>" and "sk-live-secret" not in repr(session) + str(session.to_dict())
    assert {**session.to_dict(), "api_key": "sk-live-secret"} == record
    for spelled, word in (("LensSessionStatus.SESSION_STATUS_RUNNING", "running"), ("SESSION_STATUS_RUNNING", "running"),
                          ("3", "running"), (3, "running"), ("SOMETHING_NEW", "SOMETHING_NEW")):
        assert LensSession.from_dict({"session_id": "lsn-1", "session_status": spelled}).status == word
    lens = Lens.from_dict({"lens_id": "lns-1", "lens_name": "echo", "lens_modifiable": True,
                           "lens_status": "LENS_STATUS_MOUNTED", "lens_config": record["lens_config"]})
    assert lens.lens_modifiable is True and lens.lens_config["model_pipeline"][0]["processor_name"] == "lens_noop_processor"


def test_modify_a_running_session_over_the_socket(emu, client_kind):
    session_id = running_session(emu, client_kind, [NOOP])

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect(session_id) as socket:
            return socket.modify(model_parameters={"threshold": 0.5})

    async def async_body(c: Any) -> Any:
        async with await c.lens.sessions.connect(session_id) as socket:
            return await socket.modify(model_parameters={"threshold": 0.5})

    answer = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert answer["is_valid"] is True
    assert answer["outputs"][0]["event_data"]["lens_config"]["model_parameters"] == {"threshold": 0.5}
    assert on(emu, client_kind, lambda c: c.lens.sessions.info(session_id)).num_updates == 1


def test_a_ctrl_c_at_any_point_of_taking_the_next_event_loses_and_repeats_nothing(emu, client_kind):
    """CPython runs a signal handler (Ctrl-C's KeyboardInterrupt) at a function's start and right
    after a call into C returns. A profile function sees exactly those points (``call``,
    ``c_return``) and raises there, one point further into each attempt, until the attempt gets
    its event: every event must come once, and ``last_event_id`` after an interrupted attempt
    must still name the last event received (``pop()`` then setting it lost an event)."""
    import sensorium.resources.lens as lens_module

    session_id = running_session(emu, client_kind, [NOOP, SSE])
    feed(emu, session_id, 12)  # as many spare as can be lost: the stream must not run dry
    ours = lens_module.__file__

    def interrupting_at(target: int) -> Callable[..., None]:
        points = iter(range(target + 1))

        def profile(frame: Any, event: str, _arg: Any) -> None:
            if frame.f_code.co_filename == ours and event in ("call", "c_return") and next(points, None) == target:
                raise KeyboardInterrupt
        return profile

    def sync_body(c: Any) -> tuple[list[int], int]:
        got: list[int] = []
        interrupts = target = 0
        with c.lens.sessions.stream(session_id) as stream:
            while len(got) < 6:
                sys.setprofile(interrupting_at(target))
                try:
                    event = next(stream)
                except KeyboardInterrupt:
                    assert stream.last_event_id == (event.id if got else None)
                    interrupts, target = interrupts + 1, target + 1
                    continue
                finally:
                    sys.setprofile(None)
                got.append(event.event_data["i"])
                target = 0
        return got, interrupts

    async def async_body(c: Any) -> tuple[list[int], int]:
        got: list[int] = []
        interrupts = target = 0
        async with c.lens.sessions.stream(session_id) as stream:
            while len(got) < 6:
                sys.setprofile(interrupting_at(target))
                try:
                    event = await stream.__anext__()
                except KeyboardInterrupt:
                    assert stream.last_event_id == (event.id if got else None)
                    interrupts, target = interrupts + 1, target + 1
                    continue
                finally:
                    sys.setprofile(None)
                got.append(event.event_data["i"])
                target = 0
        return got, interrupts

    got, interrupts = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert got == list(range(6))
    assert interrupts >= 6  # at least one per event


def test_a_cr_framed_stream_hands_out_each_event_at_once_and_ends_on_its_last_frame(client_kind):
    # CR alone ends lines (SSE standard). The parser kept a final CR back until the next byte,
    # so an event waited for the server's next bytes, and the closing `sse.stream.end` was never
    # read: the stream reconnected and met the session gone (404).
    def frame(event_id: int, kind: str) -> bytes:
        return f'event: message\rid: {event_id}\rdata: {{"type": "{kind}", "event_data": {{"i": {event_id}}}}}\r\r'.encode()

    released, more_sent = threading.Event(), threading.Event()

    def script(head: bytes) -> Iterator[bytes]:
        if b"last-event-id" in head.lower():
            yield b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
            return
        yield SSE_HEAD + frame(1, "inference.result")
        released.wait(10)  # the first event must not need these bytes
        more_sent.set()
        yield frame(2, "inference.result") + frame(3, "sse.stream.end")

    def sync_body(c: Any) -> tuple[list[str], bool]:
        with c.lens.sessions.stream("lsn-1") as stream:
            first = next(stream)
            early = not more_sent.is_set()
            released.set()
            return [first.id] + [e.id for e in stream], early

    async def async_body(c: Any) -> tuple[list[str], bool]:
        async with c.lens.sessions.stream("lsn-1") as stream:
            first = await stream.__anext__()
            early = not more_sent.is_set()
            released.set()
            return [first.id] + [e.id async for e in stream], early

    with FakeServer(script) as server:
        ids, early = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                            base_url=server.base_url, max_retries=0)
        assert len(server.requests) == 1, "no reconnect after sse.stream.end"
    assert ids == ["1", "2"]
    assert early, "the first event waited for the server's next bytes"


def test_a_failed_stream_keeps_failing_instead_of_looking_ended(client_kind):
    # One event, then the connection closes and the session is gone (404 on reconnecting): every
    # later read must raise again, never end as if the stream had finished.
    def script(head: bytes) -> list[bytes]:
        if b"last-event-id" in head.lower():
            return [response(404, b'{"errors": [{"code": "session_not_found", "message": "Session was not found."}]}')]
        return [SSE_HEAD + sse_frame('{"type": "inference.result", "event_data": {"i": 1}}', 1)]

    def sync_body(c: Any) -> tuple[list[Any], list[str]]:
        failures = []
        with c.lens.sessions.stream("lsn-1") as stream:
            got = [next(stream).id]
            for _ in range(3):
                with pytest.raises(NotFoundError):
                    next(stream)
                failures.append(stream.last_event_id)
            with pytest.raises(NotFoundError):
                got += [e.id for e in stream]
        return got, failures

    async def async_body(c: Any) -> tuple[list[Any], list[str]]:
        failures = []
        async with c.lens.sessions.stream("lsn-1") as stream:
            got = [(await stream.__anext__()).id]
            for _ in range(3):
                with pytest.raises(NotFoundError):
                    await stream.__anext__()
                failures.append(stream.last_event_id)
            with pytest.raises(NotFoundError):
                got += [e.id async for e in stream]
        return got, failures

    with FakeServer(script) as server:
        got, failures = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                               base_url=server.base_url, max_retries=0)
    assert got == ["1"] and failures == ["1", "1", "1"]


def test_stream_events_pickle_copy_and_compare_by_value(emu):
    import copy

    session_id = running_session(emu, "sync", [NOOP, SSE])
    feed(emu, session_id, 2)
    events, _ = read(emu, "sync", session_id, stop_after=2)
    again, _ = read(emu, "sync", session_id, stop_after=2)
    event = events[0]
    for twin in (pickle.loads(pickle.dumps(event)), copy.copy(event), copy.deepcopy(event), again[0]):
        assert twin == event and hash(twin) == hash(event) and twin is not event
        assert (twin.id, twin.type, twin.event_data, twin.data) == (event.id, event.type, event.event_data, event.data)
    assert events[1] != event and event != event.to_dict()
    assert event.to_dict() == {"id": event.id, "type": "inference.result", "event_data": {"i": 0}}


def test_a_csv_input_stream_window_beyond_the_file_reaches_its_end(emu, client_kind):
    # window_size 2**64-1 overflowed the emulator's window arithmetic and killed the socket. A
    # stand-in never fails on content (CHOICES): each window just reaches the end of the file.
    with emu.client() as client:
        client.files.upload_base64("small.csv", b"time,x\n1,1\n2,2\n3,3\n")
    session_id = running_session(emu, client_kind, [NOOP])
    config = {"file_id": "small.csv", "window_size": 2**64 - 1, "step_size": 1}

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect(session_id) as socket:
            socket.set_input_stream("csv_file_reader", config)
            return socket.status()

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect(session_id) as socket:
            await socket.set_input_stream("csv_file_reader", config)
            return await socket.status()

    status = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert status.status == "running"
    with emu.client() as client:
        deadline = time.monotonic() + 60
        while client.lens.sessions.info(session_id).num_outputs < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.lens.sessions.info(session_id).num_outputs == 3, "windows from rows 0, 1 and 2"


def test_socket_errors_name_the_argument_the_position_and_who_closed_it(emu, client_kind):
    import numpy as np

    session_id = running_session(emu, client_kind, [NOOP])
    window = np.array([[1.0, np.nan]])  # one channel, given 2-D

    def sync_body(c: Any) -> Any:
        socket = c.lens.sessions.connect(session_id)
        with pytest.raises(InvalidArgumentError) as bad:
            socket.update(window)
        socket.close()
        with pytest.raises(APIConnectionError) as closed:
            socket.status()
        return bad.value, closed.value

    async def async_body(c: Any) -> Any:
        socket = await c.lens.sessions.connect(session_id)
        with pytest.raises(InvalidArgumentError) as bad:
            await socket.update(window)
        await socket.close()
        with pytest.raises(APIConnectionError) as closed:
            await socket.status()
        return bad.value, closed.value

    bad, closed = on(emu, client_kind, sync_body if client_kind == "sync" else async_body)
    assert bad.argument == "event" and str(bad).startswith("event: holds a NaN")
    assert "channel 0, index 1" in str(bad)
    assert "closed by the caller" in str(closed) and "server" not in str(closed)


def test_async_streams_and_sockets_close_when_awaited_and_have_aclose(emu):
    """On AsyncClient the socket's `close()` is awaited but the event stream's was a plain method:
    `await events.close()` raised TypeError, and neither had the `aclose()` AsyncClient has. Now
    both close with `await x.close()` and `await x.aclose()`; the stream's `close()` called
    plainly (as code written before) still closes it at once, with no unawaited-coroutine
    warning."""
    import warnings

    import sensorium

    session_id = running_session(emu, "sync", [NOOP, SSE])
    feed(emu, session_id, 3)

    async def main() -> list[Any]:
        seen: list[Any] = []
        async with sensorium.AsyncClient(api_key=emu.api_key, base_url=emu.base_url) as client:
            for close in ("await close", "aclose", "plain close"):
                events = client.lens.sessions.stream(session_id)
                seen.append((await events.__anext__()).event_data["i"])
                if close == "await close":
                    assert await events.close() is None
                elif close == "aclose":
                    await events.aclose()
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter("error")
                        events.close()
                with pytest.raises(StopAsyncIteration):  # closed: reading ends
                    await events.__anext__()
            for close in ("close", "aclose"):
                socket = await client.lens.sessions.connect(session_id)
                await socket.status()
                await getattr(socket, close)()
                with pytest.raises(APIConnectionError, match="closed by the caller"):
                    await socket.status()
        return seen

    assert asyncio.run(main()) == [0, 0, 0]


def read_until_failure(kind: str, base_url: str, **client_options: Any) -> tuple[list[StreamEvent], Any]:
    """The events a stream hands out, and the exception that ends it (``None`` when it ends)."""
    got: list[StreamEvent] = []

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.stream("lsn-1") as stream:
            try:
                for event in stream:
                    got.append(event)
            except SensoriumError as e:
                return e
        return None

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.stream("lsn-1") as stream:
            try:
                async for event in stream:
                    got.append(event)
            except SensoriumError as e:
                return e
        return None

    client_options.setdefault("api_key", "sk-test")
    error = run_on(kind, sync_body if kind == "sync" else async_body, base_url=base_url, **client_options)
    return got, error


def test_a_key_the_session_socket_echoes_reaches_no_reply_and_no_error(client_kind):
    # Socket replies are redacted as they arrive, wherever the key sits: in a message's text, in a
    # list, under any name (only an `api_key` entry directly inside a dict was cleaned, so read()'s
    # error and the replies send() and validate() return carried it).
    secret = "sk-SECRET-0123456789abcdef"

    def handler(ws: Any) -> None:
        for message in ws:
            ws.send(json.dumps({"type": f"{json.loads(message)['type']}.response", "event_data": {
                "is_valid": False, "error_messages": [f"Authorization 'Bearer {secret}' is not valid on runner-3"],
                "details": [{"token": secret}, [secret], {"nested": {"api_key": secret}}]}}))

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect("lsn-1") as socket:
            with pytest.raises(LensEventError) as refused:
                socket.read()
            return socket.send("session.validate"), socket.validate(), refused.value

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect("lsn-1") as socket:
            with pytest.raises(LensEventError) as refused:
                await socket.read()
            return await socket.send("session.validate"), await socket.validate(), refused.value

    with fake_session_socket(handler) as base_url:
        sent, validated, refused = run_on(client_kind, sync_body if client_kind == "sync" else async_body,
                                          api_key=secret, base_url=base_url)
    assert str(refused) == "Authorization 'Bearer <redacted>' is not valid on runner-3"
    assert sent["event_data"]["details"][:2] == [{"token": "<redacted>"}, ["<redacted>"]]
    assert validated["error_messages"] == ["Authorization 'Bearer <redacted>' is not valid on runner-3"]
    for kept in (sent, validated, refused):
        assert secret not in repr(kept) and secret.encode() not in pickle.dumps(kept)
    assert secret not in repr(vars(refused))


def test_a_socket_call_that_gets_no_reply_names_what_came_instead(client_kind):
    # A message that is not JSON, or that answers another request, is no call's reply (the
    # platform also sends unsolicited ones); it was dropped silently and the caller saw only a
    # timeout. The timeout now says what came instead.
    def handler(ws: Any) -> None:
        for message in ws:
            if (json.loads(message)["event_data"] or {}).get("text"):
                ws.send("Internal runner error: traceback ...")
            else:
                ws.send(json.dumps({"type": "session.read.response", "event_data": None}))

    def sync_body(c: Any) -> Any:
        with c.lens.sessions.connect("lsn-1") as socket:
            failures = []
            for event_data in ({"text": True}, None):
                with pytest.raises(APITimeoutError) as late:
                    socket.send("session.validate", event_data)
                failures.append(late.value)
            return failures

    async def async_body(c: Any) -> Any:
        async with c.lens.sessions.connect("lsn-1") as socket:
            failures = []
            for event_data in ({"text": True}, None):
                with pytest.raises(APITimeoutError) as late:
                    await socket.send("session.validate", event_data)
                failures.append(late.value)
            return failures

    with fake_session_socket(handler) as base_url:
        not_json, other = run_on(client_kind, sync_body if client_kind == "sync" else async_body, api_key="sk-test",
                                 base_url=base_url, timeout=0.5)
    assert "no reply to session.validate within 0.5s" in str(not_json)
    assert "not JSON" in str(not_json) and "Internal runner error: traceback ..." in str(not_json)
    assert "a session.read reply" in str(other) and "Internal runner error" not in str(other)


def test_a_session_endpoint_that_is_not_a_websocket_url_is_named_with_where_it_came_from(client_kind):
    record = json.dumps({"session_id": "lsn-1", "session_endpoint": "http://127.0.0.1:9/x"}).encode()
    with FakeServer(lambda head: [response(200, record)]) as rest:
        base_url = rest.base_url
        with pytest.raises(APIResponseValidationError) as bad:
            run_on(client_kind, lambda c: c.lens.sessions.connect("lsn-1"), api_key="sk-test", base_url=base_url)
    assert str(bad.value).startswith(f"unexpected response from {base_url}/lens/sessions/info: ")
    assert 'session_endpoint "http://127.0.0.1:9/x" is not a ws:// or wss:// URL' in str(bad.value)


def sse_head(content_type: Optional[str]) -> bytes:
    return (b"HTTP/1.1 200 OK\r\n" + (f"Content-Type: {content_type}\r\n".encode() if content_type else b"")
            + b"Connection: close\r\n\r\n")


@pytest.mark.parametrize("content_type, body", [
    ("text/html", b"<html><body><h1>Sign in to Corporate Proxy</h1>" + b"<p>auth=sk-test</p>" * 200),
    ("application/json", b'{"errors": [{"code": "session_not_found", "message": "Session lsn-1 not found"}]}'),
])
def test_a_stream_answered_with_something_else_fails_at_once_saying_what_came(client_kind, content_type, body):
    # A proxy's sign-in page, or an error sent with 200, was parsed as an empty event stream and
    # reconnected to for half a minute before a misleading error.
    with FakeServer(lambda head: [sse_head(content_type) + body]) as server:
        events, error = read_until_failure(client_kind, server.base_url)
        assert len(server.requests) == 1
    assert events == [] and isinstance(error, APIResponseValidationError)
    message = str(error)
    assert f"Content-Type {content_type}, not text/event-stream" in message
    assert body[:40].decode() in message and len(message) < 1000
    assert "sk-test" not in message and "sk-test" not in error.body and error.body.startswith(body[:40].decode())


@pytest.mark.parametrize("content_type", ["text/event-stream; charset=utf-8", "Text/Event-Stream", None])
def test_an_event_stream_with_parameters_or_without_a_content_type_is_read(client_kind, content_type):
    # A missing Content-Type is taken for an event stream (what the client asked for with Accept).
    frames = sse_frame('{"type": "inference.result", "event_data": {"i": 1}}', 1) + sse_frame(
        '{"type": "sse.stream.end"}', 2)
    with FakeServer(lambda head: [sse_head(content_type) + frames]) as server:
        events, error = read_until_failure(client_kind, server.base_url)
    assert error is None and [e.event_data for e in events] == [{"i": 1}]


def test_an_event_larger_than_the_limit_fails_the_stream_instead_of_filling_memory(client_kind):
    # One line that never ends grew the client's memory without bound.
    def script(head: bytes) -> Iterator[Any]:
        yield SSE_HEAD + sse_frame('{"type": "inference.result", "event_data": {"i": 1}}', 1)
        yield b'id: 2\ndata: {"type": "inference.result", "event_data": "'
        for _ in range(20):
            yield b"A" * (1 << 20)
        yield 60.0

    with FakeServer(script) as server:
        events, error = read_until_failure(client_kind, server.base_url, read_timeout=30)
        assert len(server.requests) == 1
    assert [e.id for e in events] == ["1"]
    assert isinstance(error, APIResponseValidationError)
    assert "larger than 16 MiB" in str(error) and "after event 1" in str(error)


def test_a_frame_whose_type_is_not_text_keeps_its_event_data(client_kind):
    frames = (sse_frame('{"type": 5, "event_data": {"i": 1}}', 1)
              + sse_frame('{"type": "sse.stream.end"}', 2))
    with FakeServer(lambda head: [SSE_HEAD + frames]) as server:
        events, error = read_until_failure(client_kind, server.base_url)
    assert error is None
    assert [(e.type, e.event_data) for e in events] == [("message", {"i": 1})]


def test_an_event_id_no_header_can_carry_fails_the_resume_naming_it(client_kind):
    # The resume sent it as Last-Event-ID; building the request failed with an error that blamed
    # base_url.
    def script(head: bytes) -> list[bytes]:
        return [SSE_HEAD + b'id: a\x01b\ndata: {"type": "inference.result", "event_data": {"i": 1}}\n\n']

    with FakeServer(script) as server:
        events, error = read_until_failure(client_kind, server.base_url)
        assert len(server.requests) == 1
    assert [e.id for e in events] == ["a\x01b"]
    assert isinstance(error, APIConnectionError)
    assert '"a\\u{1}b" holds a control character' in str(error) and "base_url" not in str(error)


def test_a_non_ascii_event_id_is_resumed_from_as_utf_8(client_kind):
    # As the HTML standard's EventSource sends it.
    def script(head: bytes) -> list[bytes]:
        if b"last-event-id" not in head.lower():
            return [SSE_HEAD + sse_frame('{"type": "inference.result", "event_data": {"i": 1}}').replace(
                b"data:", "id: évt-1\r\ndata:".encode(), 1)]
        return [SSE_HEAD + sse_frame('{"type": "inference.result", "event_data": {"i": 2}}', 2)
                + sse_frame('{"type": "sse.stream.end"}', 3)]

    with FakeServer(script) as server:
        events, error = read_until_failure(client_kind, server.base_url)
        resumed = server.requests[1]
    assert error is None and [e.id for e in events] == ["évt-1", "2"]
    assert "last-event-id: évt-1".encode() in resumed.lower()


def test_events_without_ids_are_not_handed_out_again_after_a_drop(client_kind):
    # Without an id there is nothing to resume from: reconnecting restarted the stream, and the
    # events already handed out came again, silently.
    frames = b"".join(sse_frame(f'{{"type": "inference.result", "event_data": {{"i": {i}}}}}') for i in (1, 2))

    def script(head: bytes) -> list[bytes]:
        return [SSE_HEAD + frames + (sse_frame('{"type": "sse.stream.end"}') if len(server.requests) > 1 else b"")]

    with FakeServer(script) as server:
        events, error = read_until_failure(client_kind, server.base_url)
        assert len(server.requests) == 1
    assert [e.event_data["i"] for e in events] == [1, 2]
    assert isinstance(error, APIConnectionError)
    assert "no id" in str(error) and "again" in str(error)
