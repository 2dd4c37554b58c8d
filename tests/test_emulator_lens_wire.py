"""The emulator's lens surface on the wire, with raw HTTP (standard library) and a WebSocket client
library: routes and their mixed error shapes, the session record and state table (expiry
included), the SSE stream (framing, replay after Last-Event-ID, heartbeats, drop_streams, end
after destroy) and every WebSocket request type with both ways of passing the credential."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any, Iterator, Optional

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from _raw_http import Reply, request
from sensorium.testing import Emulator

# The spec's "Lens session record" table.
RECORD_FIELDS = {
    "session_id", "lens_id", "lens_name", "org_id", "api_key", "session_status", "session_endpoint",
    "session_runner", "node_tag", "session_ttl_sec", "lens_config", "input_data_stream_id",
    "output_data_stream_id", "registration_timestamp", "last_event_timestamp", "last_update_timestamp",
    "session_start_timestamp", "session_destroyed_timestamp", "num_active_connections", "num_updates",
    "num_inputs", "num_outputs", "num_events",
}
COUNTERS = ["num_active_connections", "num_updates", "num_inputs", "num_outputs", "num_events"]
LENS_FIELDS = {"lens_id", "lens_name", "lens_status", "lens_modifiable", "lens_config"}
REGISTERED = "LensSessionStatus.SESSION_STATUS_REGISTERED"
RUNNING = "LensSessionStatus.SESSION_STATUS_RUNNING"

NOOP = {"processor_name": "lens_noop_processor", "processor_config": {}}
SSE = {"processor_name": "server_sent_events_writer", "processor_config": {}}


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(lens_heartbeat_interval=0.3) as emulator:
        yield emulator


def call(emu: Emulator, method: str, path: str, body: Any = None, *, key: Optional[str] = "default",
         raw: Optional[bytes] = None, headers: Optional[dict[str, str]] = None) -> Reply:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    h = {"Content-Type": "application/json", **(headers or {})}
    return request(emu, method, path, data, key=key, headers=h)


def envelope(reply: Reply, status: int, code: str) -> None:
    assert reply.status == status, reply.raw
    body = reply.json()
    assert list(body) == ["errors"] and body["errors"][0]["code"] == code, body
    assert body["errors"][0]["error_uid"].startswith("err-")


def register(emu: Emulator, pipeline: list[dict[str, Any]], name: str = "lens") -> str:
    reply = call(emu, "POST", "/lens/register", {"lens_config": {"lens_name": name, "model_pipeline": pipeline}})
    assert reply.status == 200, reply.raw
    return str(reply.json()["lens_id"])


def create(emu: Emulator, lens_id: str) -> dict[str, Any]:
    reply = call(emu, "POST", "/lens/sessions/create", {"lens_id": lens_id})
    assert reply.status == 200, reply.raw
    return dict(reply.json())


def process(emu: Emulator, session_id: str, event: Any) -> dict[str, Any]:
    reply = call(emu, "POST", "/lens/sessions/events/process", {"session_id": session_id, "event": event})
    assert reply.status == 200, reply.raw
    return dict(reply.json())


def info(emu: Emulator, session_id: str) -> Reply:
    return call(emu, "GET", f"/lens/sessions/info?session_id={session_id}")


def wait_running(emu: Emulator, session_id: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < 5:
        if info(emu, session_id).json()["session_status"] == RUNNING:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError("the session never ran")


# ---- lenses ------------------------------------------------------------------------------------

def test_register_clone_modify_delete_info_metadata(emu: Emulator) -> None:
    reply = call(emu, "POST", "/lens/register", {"lens_config": {"lens_name": "mine", "model_pipeline": [NOOP],
                                                                 "model_parameters": {"k": 1}}})
    lens = reply.json()
    assert set(lens) == LENS_FIELDS
    assert lens["lens_id"].startswith("lns-") and lens["lens_status"] == "LENS_STATUS_MOUNTED"
    assert lens["lens_modifiable"] is True and lens["lens_config"]["model_parameters"] == {"k": 1}

    clone = call(emu, "POST", "/lens/clone", {"lens_id": lens["lens_id"]}).json()
    assert clone["lens_id"] != lens["lens_id"] and clone["lens_config"]["model_pipeline"] == [NOOP]

    modified = call(emu, "POST", "/lens/modify", {"lens_id": clone["lens_id"], "model_parameters": {"k": 2}}).json()
    assert modified["lens_config"]["model_parameters"] == {"k": 2}

    metadata = call(emu, "GET", "/lens/metadata").json()
    assert isinstance(metadata, list) and {m["lens_id"] for m in metadata} >= {lens["lens_id"], clone["lens_id"]}
    one = call(emu, "GET", f"/lens/metadata?lens_id={lens['lens_id']}").json()
    assert [m["lens_id"] for m in one] == [lens["lens_id"]]
    assert len(call(emu, "GET", "/lens/metadata?shard_index=0&max_items_per_shard=1").json()) == 1
    assert call(emu, "GET", f"/lens/info?lens_id={lens['lens_id']}").json() == lens
    summary = call(emu, "GET", "/lens/info").json()
    assert summary["num_lenses"] == len(metadata)

    deleted = call(emu, "POST", "/lens/delete", {"lens_id": clone["lens_id"]})
    assert deleted.status == 200 and deleted.json()["is_valid"] is True
    gone = call(emu, "GET", f"/lens/info?lens_id={clone['lens_id']}")
    assert gone.status == 400 and all(isinstance(e, str) for e in gone.json()["errors"])

    # Lenses are per organization; the built-in one is everyone's and cannot be changed.
    other = emu.new_api_key()
    other_ids = {m["lens_id"] for m in call(emu, "GET", "/lens/metadata", key=other).json()}
    assert lens["lens_id"] not in other_ids
    builtin = [m for m in metadata if m["lens_modifiable"] is False]
    assert builtin and builtin[0]["lens_id"] in other_ids
    refused = call(emu, "POST", "/lens/delete", {"lens_id": builtin[0]["lens_id"]})
    assert refused.status == 400 and refused.json()["is_valid"] is False and refused.json()["error_messages"]


def test_register_errors(emu: Emulator) -> None:
    envelope(call(emu, "POST", "/lens/register", raw=b"{not json"), 422, "invalid_json_payload")
    envelope(call(emu, "POST", "/lens/register", {"lens_name": "x"}), 422, "invalid_json_payload")
    envelope(call(emu, "POST", "/lens/register", {"lens_config": {"model_pipeline": []}}), 422, "missing_lens_name")
    envelope(call(emu, "POST", "/lens/register", {"lens_config": {"lens_name": ""}}), 422, "missing_lens_name")
    bad = call(emu, "POST", "/lens/register", {"lens_config": {"lens_name": "x", "model_pipeline": [{"oops": 1}]}})
    assert bad.status == 400 and bad.json()["is_valid"] is False
    assert bad.json()["error_messages"] == ["model_pipeline[0] needs a processor_name."]
    envelope(call(emu, "POST", "/lens/register", {"lens_config": {"lens_name": "x"}}, key="sk-wrong"),
             401, "unauthorized_request")
    envelope(call(emu, "GET", "/lens/metadata", key=None), 401, "unauthorized_request")


# ---- sessions ----------------------------------------------------------------------------------

def test_session_record_and_state_moves(emu: Emulator) -> None:
    lens_id = register(emu, [NOOP, SSE], "echo")
    record = create(emu, lens_id)
    assert set(record) == RECORD_FIELDS
    assert record["api_key"] == emu.api_key
    assert record["session_id"].startswith("lsn-") and record["lens_id"] == lens_id and record["lens_name"] == "echo"
    assert record["session_status"] == REGISTERED
    assert record["session_start_timestamp"] is None and record["session_destroyed_timestamp"] is None
    assert all(record[c] == 0 for c in COUNTERS)
    assert record["session_ttl_sec"] == 86400
    assert record["session_endpoint"] == f"ws://127.0.0.1:{emu.port}/v0.5/lens/sessions/{record['session_id']}"
    assert record["input_data_stream_id"] is None and record["output_data_stream_id"] is None
    assert wait_running(emu, record["session_id"]) < 1.0
    running = info(emu, record["session_id"]).json()
    assert running["session_start_timestamp"] >= running["registration_timestamp"]
    assert "api_key" not in running, "only creation and session.status echo the key"

    answer = process(emu, record["session_id"], {"type": "data.json", "event_data": {"x": 1}})
    assert answer == {"type": "success", "event_data": {"response": [{"type": "inference.result", "event_data": {"x": 1}}]}}
    counted = info(emu, record["session_id"]).json()
    assert (counted["num_inputs"], counted["num_outputs"], counted["num_events"]) == (1, 1, 1)

    listed = call(emu, "GET", "/lens/sessions/metadata").json()
    assert [r["session_id"] for r in listed] == [record["session_id"]]
    assert call(emu, "GET", "/lens/sessions/info").json()["num_sessions"] == 1

    destroyed = call(emu, "POST", "/lens/sessions/destroy", {"session_id": record["session_id"]})
    assert destroyed.status == 200
    assert destroyed.json()["session_status"] == "LensSessionStatus.SESSION_STATUS_DESTROYED"
    assert destroyed.json()["session_destroyed_timestamp"] is not None
    envelope(info(emu, record["session_id"]), 404, "session_not_found")
    envelope(call(emu, "POST", "/lens/sessions/destroy", {"session_id": record["session_id"]}), 404, "session_not_found")
    envelope(call(emu, "GET", f"/lens/sessions/consumer/{record['session_id']}"), 404, "session_not_found")


def test_session_create_errors_are_plain_strings(emu: Emulator) -> None:
    for body in ({"lens_id": "lns-nope"}, {}):
        reply = call(emu, "POST", "/lens/sessions/create", body)
        assert reply.status == 400
        errors = reply.json()["errors"]
        assert errors and all(isinstance(e, str) for e in errors), errors
    bad_config = register(emu, [{"processor_name": "warp_drive"}])
    reply = call(emu, "POST", "/lens/sessions/create", {"lens_id": bad_config})
    assert reply.status == 400 and reply.json()["errors"][0].startswith("Invalid lens config:")
    envelope(call(emu, "POST", "/lens/sessions/create", {"lens_id": bad_config}, key="sk-x"), 401, "unauthorized_request")
    # Another organization's session does not exist for this caller.
    session = create(emu, register(emu, [NOOP]))
    envelope(info_as(emu, session["session_id"], emu.new_api_key()), 404, "session_not_found")


def info_as(emu: Emulator, session_id: str, key: str) -> Reply:
    return call(emu, "GET", f"/lens/sessions/info?session_id={session_id}", key=key)


def test_process_event_error_bodies(emu: Emulator) -> None:
    session = create(emu, register(emu, [NOOP]))["session_id"]
    for event, words in [({"event_data": {"a": 1}}, "'type'"), ({"type": "teleport", "event_data": {"a": 1}}, "teleport"),
                         ({"type": "image", "data": ""}, "Empty payload")]:
        body = process(emu, session, event)
        assert body["type"] == "error" and body["event_data"]["is_valid"] is False, body
        assert words in body["event_data"]["error_messages"][0]
    envelope(call(emu, "POST", "/lens/sessions/events/process", {"session_id": "lsn-x", "event": {"type": "image"}}),
             404, "session_not_found")
    envelope(call(emu, "POST", "/lens/sessions/events/process", {"session_id": session}, key="sk-x"), 401,
             "unauthorized_request")


def test_both_status_spellings(emu: Emulator) -> None:
    session = create(emu, register(emu, [NOOP]))["session_id"]
    wait_running(emu, session)
    emu.set_lens_status_style("number")
    assert info(emu, session).json()["session_status"] == "3"
    with Emulator(lens_status_style="number") as numbers:
        lens = register(numbers, [NOOP])
        assert create(numbers, lens)["session_status"] == "1"
    with pytest.raises(ValueError, match="enum, number"):
        Emulator(lens_status_style="roman")  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", [0, -1, 0.0])
def test_a_session_ttl_that_would_expire_every_session_at_once_is_refused(ttl: float) -> None:
    with pytest.raises(ValueError, match="session_ttl_sec must be above 0"):
        Emulator(session_ttl_sec=ttl)


def test_sessions_expire_after_their_ttl_of_inactivity() -> None:
    # The spec's session_ttl_sec is whole seconds: 0.6 is in force as 1, and the record says so.
    with Emulator(session_ttl_sec=0.6, lens_heartbeat_interval=0.1) as emu:
        session = create(emu, register(emu, [NOOP, SSE]))
        assert session["session_ttl_sec"] == 1
        sid = session["session_id"]
        for _ in range(4):  # events keep it alive past its ttl
            time.sleep(0.3)
            assert process(emu, sid, {"type": "data.json", "event_data": {"a": 1}})["type"] == "success"
        stream = SseStream(emu, sid)
        frames = stream.frames_until("sse.stream.end", timeout=5)
        assert [f["data"]["type"] for f in frames if f["data"]["type"] == "inference.result"] == ["inference.result"] * 4
        envelope(info(emu, sid), 404, "session_not_found")


# ---- SSE ---------------------------------------------------------------------------------------

class SseStream:
    """A raw SSE reader over http.client: frames as dicts {event, id, data (parsed JSON)}."""

    def __init__(self, emu: Emulator, session_id: str, last_event_id: Optional[str] = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=10)
        headers = {"Authorization": f"Bearer {emu.api_key}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", f"/v0.5/lens/sessions/consumer/{session_id}", headers=headers)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.read()
        assert self.resp.headers["Content-Type"] == "text/event-stream"

    def next(self) -> Optional[dict[str, Any]]:
        """The next frame; None when the connection ended (cleanly or cut)."""
        fields: dict[str, Any] = {}
        while True:
            try:
                line = self.resp.readline()
            except (http.client.IncompleteRead, ConnectionError):
                return None
            if not line:
                return None
            text = line.decode().rstrip("\n")
            if text == "":
                fields["data"] = json.loads(fields["data"])
                return fields
            name, _, value = text.partition(": ")
            fields[name] = value

    def frames_until(self, kind: str, timeout: float = 10) -> list[dict[str, Any]]:
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            f = self.next()
            if f is None:
                break
            out.append(f)
            if f["data"]["type"] == kind:
                break
        return out

    def close(self) -> None:
        self.conn.close()


def test_sse_frames_replay_resume_heartbeats_and_end(emu: Emulator) -> None:
    sid = create(emu, register(emu, [NOOP, SSE]))["session_id"]
    inputs = [{"n": i, "text": "line\nbreak\u2028sep"} for i in range(5)]
    for data in inputs:
        process(emu, sid, {"type": "data.json", "event_data": data})

    stream = SseStream(emu, sid)
    start = stream.next()
    assert start is not None and start["event"] == "message"
    assert start["data"] == {"type": "sse.stream.start", "event_data": {"session_id": sid, "reader_id": start["data"]["event_data"]["reader_id"]}}
    outputs = [stream.next() for _ in inputs]
    assert [o["data"]["event_data"] for o in outputs if o] == inputs, "replayed from the first output"
    assert all(o and o["data"]["type"] == "inference.result" and isinstance(o["data"]["timestamp"], float) for o in outputs)
    ids = [int(o["id"]) for o in outputs if o]
    assert ids == sorted(set(ids))
    beats = [stream.next(), stream.next()]
    assert [b["data"]["type"] for b in beats if b] == ["sse.stream.heartbeat"] * 2
    payloads = [b["data"]["event_data"] for b in beats if b]
    assert [p["message_timeout"] for p in payloads] == [5.0, 6.0]
    assert payloads[0]["num_messages"] == 5 and payloads[0]["session_id"] == sid and payloads[0]["num_bytes"] > 0
    assert payloads[0]["session_status"] in (REGISTERED, RUNNING)
    assert int(beats[1]["id"]) > int(beats[0]["id"]) > ids[-1]  # type: ignore[index]
    stream.close()

    # Resume after the third output: the fourth and fifth, nothing twice.
    resumed = SseStream(emu, sid, last_event_id=str(ids[2]))
    resumed.next()
    got = [resumed.next(), resumed.next()]
    assert [g["data"]["event_data"]["n"] for g in got if g] == [3, 4]
    # Resuming after a heartbeat's id loses nothing pushed after it.
    process(emu, sid, {"type": "data.json", "event_data": {"n": 5}})
    after_beat = SseStream(emu, sid, last_event_id=beats[1]["id"])  # type: ignore[index]
    frames = after_beat.frames_until("inference.result")
    assert frames[-1]["data"]["event_data"] == {"n": 5}
    after_beat.close()

    # Destroy: the open stream gets what remains, then sse.stream.end.
    process(emu, sid, {"type": "data.json", "event_data": {"n": 6}})
    call(emu, "POST", "/lens/sessions/destroy", {"session_id": sid})
    rest = resumed.frames_until("sse.stream.end")
    kinds = [f["data"]["type"] for f in rest if f["data"]["type"] != "sse.stream.heartbeat"]
    assert kinds == ["inference.result", "inference.result", "sse.stream.end"]
    assert [f["data"]["event_data"]["n"] for f in rest if f["data"]["type"] == "inference.result"] == [5, 6]
    assert resumed.next() is None
    resumed.close()


def test_sse_errors(emu: Emulator) -> None:
    sid = create(emu, register(emu, [NOOP, SSE]))["session_id"]
    envelope(call(emu, "GET", f"/lens/sessions/consumer/{sid}", key=None), 401, "unauthorized_request")
    envelope(call(emu, "GET", "/lens/sessions/consumer/lsn-nope"), 404, "session_not_found")
    envelope(call(emu, "GET", f"/lens/sessions/consumer/{sid}", headers={"Last-Event-ID": "abc"}), 400, "invalid_cursor")


def test_drop_streams_cuts_every_n_events_and_resume_is_lossless(emu: Emulator) -> None:
    sid = create(emu, register(emu, [NOOP, SSE]))["session_id"]
    for i in range(10):
        process(emu, sid, {"type": "data.json", "event_data": {"n": i}})
    emu.drop_streams(every=3)
    received: list[int] = []
    last: Optional[str] = None
    connections = 0
    while len(received) < 10 and connections < 10:
        connections += 1
        stream = SseStream(emu, sid, last_event_id=last)
        per_connection = 0
        while (frame := stream.next()) is not None:
            if frame["data"]["type"] == "inference.result":
                received.append(frame["data"]["event_data"]["n"])
                per_connection += 1
                last = frame["id"]
            if len(received) == 10:
                break
        stream.close()
        assert per_connection <= 3
    assert received == list(range(10)) and connections == 4
    emu.drop_streams(None)
    stream = SseStream(emu, sid)
    frames = [stream.next() for _ in range(11)]
    assert sum(1 for f in frames if f and f["data"]["type"] == "inference.result") == 10
    stream.close()
    # The control route does the same for other processes.
    assert call(emu, "POST", "/_emulator/drop_streams", {"every": 2}).json() == {"every": 2}
    assert call(emu, "POST", "/_emulator/drop_streams", {"every": 0}).status == 400
    with pytest.raises(ValueError):
        emu.drop_streams(every=0)


# ---- WebSocket ---------------------------------------------------------------------------------

def ws(emu: Emulator, session: dict[str, Any], *, via_protocol: bool = False, key: Optional[str] = None) -> ClientConnection:
    key = key or emu.api_key
    if via_protocol:
        return connect(session["session_endpoint"], subprotocols=[f"authenticationauthorization.bearer.{key}",  # type: ignore[list-item]
                                                                  "event-protocol-v1"])  # type: ignore[list-item]
    return connect(session["session_endpoint"], additional_headers={"Authorization": f"Bearer {key}"})


def ask(sock: ClientConnection, kind: str, event_data: Any = None, *, binary: bool = False) -> dict[str, Any]:
    message = {"type": kind} if event_data is None else {"type": kind, "event_data": event_data}
    text = json.dumps(message)
    sock.send(text.encode() if binary else text)
    answer = sock.recv(timeout=10)
    assert isinstance(answer, bytes) == binary
    return dict(json.loads(answer))


def upload(emu: Emulator, name: str, data: bytes) -> None:
    with emu.client() as client:
        client.files.upload_base64(name, data)


def test_websocket_every_request_type(emu: Emulator) -> None:
    session = create(emu, register(emu, [NOOP]))
    sid = session["session_id"]
    with ws(emu, session) as sock:
        status = ask(sock, "session.status")
        assert set(status) == RECORD_FIELDS and status["api_key"] == emu.api_key, "the bare record"
        assert status["num_active_connections"] == 1
        assert ask(sock, "session.validate") == {"type": "session.validate.response", "event_data": {
            "is_valid": True, "error_messages": [], "session_status": status["session_status"]}}
        assert ask(sock, "session.read", {"client_id": "a"}) == {"type": "session.read.response", "event_data": None}
        update = ask(sock, "session.update", {"type": "data.json", "event_data": {"v": 1}}, binary=True)
        assert update == {"type": "session.update.response", "event_data": {"is_valid": True, "error_messages": [], "num_outputs": 1}}
        bad = ask(sock, "session.update", {"type": "nonsense", "event_data": {"v": 1}})
        assert bad["type"] == "session.update.response" and bad["event_data"]["is_valid"] is False
        read = ask(sock, "session.read", {"client_id": "a"})["event_data"]
        assert read["client_id"] == "a" and [m["data"] for m in read["messages"]] == [{"v": 1}]
        assert set(read["messages"][0]) == {"timestamp", "type", "data"}
        assert ask(sock, "session.read", {"client_id": "a"})["event_data"] is None
        assert len(ask(sock, "session.read", {"client_id": "b"})["event_data"]["messages"]) == 1, "a new reader replays"
        modified = ask(sock, "session.modify", {"model_parameters": {"threshold": 0.5}})
        assert modified["type"] == "session.modify.response" and modified["event_data"]["is_valid"] is True
        assert ask(sock, "session.modify", {"model_pipeline": [{"processor_name": "nope"}]})["event_data"]["is_valid"] is False
        assert ask(sock, "session.get")["event_data"]["lens_config"]["model_parameters"] == {"threshold": 0.5}
        assert ask(sock, "session.heartbeat")["event_data"]["is_valid"] is True
        rtsp = ask(sock, "input_stream.set", {"stream_type": "rtsp_video_streamer",
                                               "stream_config": {"rtsp_url": "rtsp://10.0.0.1/cam", "target_image_size": [224, 224],
                                                                 "target_frame_rate_hz": 1.0}})
        assert rtsp["type"] == "input_stream.set.response" and rtsp["event_data"]["is_valid"] is False
        assert "unreachable" in rtsp["event_data"]["error_messages"][0]
        missing = ask(sock, "input_stream.set", {"stream_type": "csv_file_reader", "stream_config": {"file_id": "no.csv"}})
        assert "no.csv" in missing["event_data"]["error_messages"][0]
        out = ask(sock, "output_stream.set", {"stream_type": "server_sent_events_writer", "stream_config": {}})
        assert out["event_data"]["is_valid"] is True
        query = ask(sock, "model.query", {"instruction": "describe", "data": []})
        assert query["type"] == "model.query.response" and query["event_data"]["message"] == "Response timed out for query"
        unknown = ask(sock, "warp.drive")
        assert unknown == {"type": "warp.drive.response", "event_data": {"is_valid": False, "error_messages": ["Unknown event type 'warp.drive'."]}}
        sock.send("{not json")
        assert json.loads(sock.recv(timeout=10))["type"] == "error"
        # Pings are answered between requests.
        assert sock.ping().wait(timeout=5)
        counted = ask(sock, "session.status")
        assert counted["output_data_stream_id"] is not None and counted["num_updates"] == 2 and counted["num_events"] >= 15
        destroyed = ask(sock, "session.destroy")
        assert destroyed["type"] == "session.destroy.response" and destroyed["event_data"]["is_valid"] is True
        assert destroyed["event_data"]["session_id"] == sid
        after = ask(sock, "session.status")
        assert after["event_data"]["is_valid"] is False
    # Leaving the block did the close handshake.
    assert sock.close_code == 1000
    envelope(info(emu, sid), 404, "session_not_found")


def test_websocket_credentials(emu: Emulator) -> None:
    session = create(emu, register(emu, [NOOP]))
    with ws(emu, session, via_protocol=True) as sock:
        assert sock.subprotocol == "event-protocol-v1", "the key is never the selected protocol"
        assert ask(sock, "session.status")["session_id"] == session["session_id"]
    for attempt in (lambda: ws(emu, session, key="sk-wrong"), lambda: ws(emu, session, via_protocol=True, key="sk-wrong"),
                    lambda: connect(session["session_endpoint"])):
        with pytest.raises(InvalidStatus) as caught:
            attempt()
        assert caught.value.response.status_code == 401
        body = json.loads(caught.value.response.body or b"{}")
        assert body["errors"][0]["code"] == "unauthorized_request"
        assert "sk-wrong" not in (caught.value.response.body or b"").decode()
    with pytest.raises(InvalidStatus) as caught:
        connect(session["session_endpoint"].replace(session["session_id"], "lsn-nope"),
                additional_headers={"Authorization": f"Bearer {emu.api_key}"})
    assert caught.value.response.status_code == 404


# ---- the runtime -------------------------------------------------------------------------------

def csv_text(rows: list[list[float]]) -> bytes:
    return ("timestamp,a,b\n" + "".join(f"{i},{r[0]},{r[1]}\n" for i, r in enumerate(rows))).encode()


def read_all(sock: ClientConnection, want: int, timeout: float = 10) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(messages) < want and time.monotonic() < deadline:
        got = ask(sock, "session.read", {"client_id": "r"})["event_data"]
        if got:
            messages += got["messages"]
        else:
            time.sleep(0.05)
    return messages


def test_csv_reader_and_n_shot_classification(emu: Emulator) -> None:
    import math

    slow = [[math.sin(i * 0.2), 0.5 * math.sin(i * 0.2)] for i in range(64)]
    fast = [[math.sin(i * 2.9), 0.5 * math.sin(i * 2.9)] for i in range(64)]
    upload(emu, "slow.csv", csv_text(slow))
    upload(emu, "fast.csv", csv_text(fast))
    upload(emu, "stream.csv", csv_text([[math.sin(i * 0.2 + 0.1) * 3, 0.0] for i in range(16)]
                                      + [[math.sin(i * 2.9 + 0.1), 0.0] for i in range(16)]))
    lens = register(emu, [{"processor_name": "lens_timeseries_state_processor",
                           "processor_config": {"n_shot_files": {"slow": "slow.csv", "fast": "fast.csv"}, "window_size": 16}}])
    session = create(emu, lens)
    with ws(emu, session) as sock:
        started = ask(sock, "input_stream.set", {"stream_type": "csv_file_reader",
                                                  "stream_config": {"file_id": "stream.csv", "window_size": 16}})
        assert started["event_data"]["is_valid"] is True
        messages = read_all(sock, 2)
        assert [m["data"]["result"] for m in messages] == ["slow", "fast"]
        assert set(messages[0]["data"]["scores"]) == {"slow", "fast"}
        assert ask(sock, "session.status")["input_data_stream_id"] == started["event_data"]["input_data_stream_id"]
    missing = register(emu, [{"processor_name": "lens_timeseries_state_processor",
                              "processor_config": {"n_shot_files": {"x": "absent.csv"}}}])
    reply = call(emu, "POST", "/lens/sessions/create", {"lens_id": missing})
    assert reply.status == 400 and "absent.csv" in reply.json()["errors"][0]


def test_video_reader_camera_and_many_rows(emu: Emulator) -> None:
    upload(emu, "clip.mp4", bytes(range(256)) * 600)  # any bytes: the stand-ins never fail on content
    lens = register(emu, [{"processor_name": "lens_video_processor"}, {"processor_name": "lens_camera_processor"}])
    session = create(emu, lens)
    with ws(emu, session) as sock:
        assert ask(sock, "input_stream.set", {"stream_type": "video_file_reader",
                                              "stream_config": {"file_id": "clip.mp4"}})["event_data"]["is_valid"] is True
        messages = read_all(sock, 6)
        assert [m["type"] for m in messages] == ["frame.processed", "inference.result"] * 3
        assert [m["data"]["frame_index"] for m in messages[::2]] == [0, 1, 2]
        caption = ask(sock, "model.query", {"instruction": "what is there?",
                                            "data": [{"type": "base64_img", "base64_img": "aGVsbG8="}]})
        assert caption["event_data"]["is_valid"] is True and caption["event_data"]["result"].startswith("The frame shows")
    upload(emu, "rows.csv", csv_text([[float(i), 0.0] for i in range(3000)]))
    sid = create(emu, register(emu, [NOOP, SSE]))
    with ws(emu, sid) as sock:
        ask(sock, "input_stream.set", {"stream_type": "csv_file_reader", "stream_config": {"file_id": "rows.csv", "window_size": 1}})
    stream = SseStream(emu, sid["session_id"])
    values = []
    while len(values) < 3000 and (frame := stream.next()) is not None:
        if frame["data"]["type"] == "inference.result":
            values.append(frame["data"]["event_data"]["contents"][0][0])
    assert values == [float(i) for i in range(3000)]
    stream.close()


def test_command_line_flags() -> None:
    from sensorium.emulator import _parser

    args = _parser().parse_args(["--session-ttl-sec", "5", "--lens-heartbeat-interval", "0.5", "--lens-status-style", "number"])
    assert (args.session_ttl_sec, args.lens_heartbeat_interval, args.lens_status_style) == (5.0, 0.5, "number")


def test_the_session_endpoint_uses_the_address_the_emulator_was_reached_by(emu: Emulator) -> None:
    """The lens socket behind a port mapping was handed out at the bound 127.0.0.1:<port>."""
    lens_id = register(emu, [NOOP, SSE], "echo")
    reply = call(emu, "POST", "/lens/sessions/create", {"lens_id": lens_id}, headers={"Host": "emulator.test:9000"})
    record = reply.json()
    assert record["session_endpoint"] == f"ws://emulator.test:9000/v0.5/lens/sessions/{record['session_id']}"
