"""Wire conformance of the emulator, spoken in raw HTTP with the standard library only.

Expected bodies are written from the spec's tables (platform-interface.md: Direct query, Files,
Errors, Limits, Authentication, Models) and the brief's additions, not from our own structs.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import socket
import struct
import urllib.parse
import uuid
from typing import Any, Iterator, Optional

import pytest

from sensorium.testing import Emulator

from _raw_http import Reply, request

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
ENCODER = "Encoder::encoder_embeddings_01"
ERROR_KEYS = {"code", "message", "suggestion", "error_uid"}
QUERY_RESPONSE_KEYS = {
    "query_id", "status", "response", "query_timestamp", "loading_timestamp",
    "inference_timestamp", "response_timestamp", "query_queue_time_sec",
    "inference_time_sec", "query_response_time_sec", "gpq_node",
}
WORKER_KEYS = {
    "response", "query", "prompt", "system", "instruction", "generation_latency",
    "query_gpq_latency", "query_queue_latency", "results_timestamp", "prefetch_stats",
}
FILE_RECORD_KEYS = {"file_id", "file_uid", "file_type", "num_bytes", "created_at", "status"}


def post_json(emu: Emulator, path: str, obj: Any, *, headers: Optional[dict[str, str]] = None, **kw: Any) -> Reply:
    h = {"Content-Type": "application/json", **(headers or {})}
    return request(emu, "POST", path, json.dumps(obj).encode(), headers=h, **kw)


def query(emu: Emulator, **fields: Any) -> Reply:
    body = {"model": REASONER, "query": "hello"}
    body.update(fields)
    return post_json(emu, "/query", body)


def multipart(field: str, filename: Optional[str], content: bytes, content_type: str = "application/octet-stream") -> tuple[bytes, dict[str, str]]:
    boundary = "----sensorium-test-" + uuid.uuid4().hex
    disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename is not None else "")
    body = (
        f"--{boundary}\r\nContent-Disposition: {disposition}\r\nContent-Type: {content_type}\r\n\r\n".encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(emu: Emulator, name: str, content: bytes, *, key: str = "default", content_type: str = "application/octet-stream", path: str = "/files") -> Reply:
    body, headers = multipart("file", name, content, content_type)
    return request(emu, "POST", path, body, key=key, headers=headers)


def assert_error(reply: Reply, status: int, code: str) -> dict[str, Any]:
    assert reply.status == status, reply.raw
    body = reply.json()
    assert list(body) == ["errors"]
    assert len(body["errors"]) == 1
    err = body["errors"][0]
    assert set(err) <= ERROR_KEYS and {"code", "message", "error_uid"} <= set(err)
    assert err["code"] == code
    assert isinstance(err["message"], str) and err["message"]
    assert err["error_uid"].startswith("err-")
    return err  # type: ignore[no-any-return]


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"


@pytest.fixture
def emu(sensorium_emulator: Emulator) -> Iterator[Emulator]:
    yield sensorium_emulator


# --- Authentication ---------------------------------------------------------------------------


def test_query_401_is_detail(emu: Emulator) -> None:
    for key in (None, "sk-wrong"):
        reply = post_json(emu, "/query", {"model": REASONER, "query": "x"}, key=key)
        assert reply.status == 401
        body = reply.json()
        assert list(body) == ["detail"] and isinstance(body["detail"], str)


@pytest.mark.parametrize("path", ["/files/metadata", "/files/info", "/models", "/files/metadata/a.txt"])
def test_other_401_are_envelopes(emu: Emulator, path: str) -> None:
    assert_error(request(emu, "GET", path, key=None), 401, "unauthorized_request")
    assert_error(request(emu, "GET", path, key="sk-emu-unknown"), 401, "unauthorized_request")


# --- Direct query: validation -------------------------------------------------------------------


def test_query_validation_codes(emu: Emulator) -> None:
    bad_json = request(emu, "POST", "/query", b"{not json", headers={"Content-Type": "application/json"})
    assert_error(bad_json, 400, "invalid_request")
    assert_error(post_json(emu, "/query", [1, 2]), 400, "invalid_request")
    assert_error(post_json(emu, "/query", {"query": "x"}), 400, "invalid_request")
    assert_error(post_json(emu, "/query", {"model": REASONER}), 400, "invalid_request")
    assert_error(query(emu, model="Reasoner::nope"), 400, "invalid_model_version")
    err = assert_error(query(emu, max_new_tokens="5"), 400, "invalid_parameter_type")
    assert "max_new_tokens" in err["message"]
    err = assert_error(query(emu, events=[{"type": "data.json", "event_data": {"contents": {"a": 1}}}]), 400, "invalid_parameter_type")
    assert "contents" in err["message"]
    assert_error(query(emu, events=[{"type": "data.video", "event_data": {"contents": "x"}}]), 400, "invalid_request")
    assert_error(query(emu, events=["data.text"]), 400, "invalid_parameter_type")
    err = assert_error(query(emu, file_ids=["fil_0123456789"]), 400, "unsupported_file_type")
    assert "file name" in err["message"]
    assert_error(query(emu, file_ids=["missing.txt"]), 404, "file_not_found")
    assert query(emu, some_future_field={"x": 1}).status == 200


def test_prompt_size_limit(emu: Emulator) -> None:
    assert query(emu, query="a" * 40_000).status == 200
    assert_error(query(emu, query="a" * 40_001), 413, "payload_too_large")
    assert_error(query(emu, query="a" * 20_000, events=[{"type": "data.text", "event_data": {"contents": "é" * 10_001}}]), 413, "payload_too_large")
    assert query(emu, query="a" * 40_001, max_query_size_mb=0.05).status == 200


def test_max_wait_time_gives_504(emu: Emulator) -> None:
    emu.set_query_delay(30.0)
    assert_error(query(emu, max_wait_time_sec=0.05), 504, "query_timeout")
    emu.set_query_delay(0.0)
    assert query(emu, max_wait_time_sec=0.05).status == 200


# --- Direct query: answers ----------------------------------------------------------------------


def test_reasoner_answer_shape_and_determinism(emu: Emulator) -> None:
    reply = query(emu, query="What is in my notes?", system_prompt="Be brief.")
    assert reply.status == 200
    body = reply.json()
    assert set(body) == QUERY_RESPONSE_KEYS
    uuid.UUID(body["query_id"])
    assert body["status"] == "completed"
    assert body["gpq_node"] == "emulator-gpq-0"
    for k in QUERY_RESPONSE_KEYS - {"query_id", "status", "response", "gpq_node"}:
        assert isinstance(body[k], float) or isinstance(body[k], int)
    assert set(body["response"]) == WORKER_KEYS
    out = body["response"]["response"]
    assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], str)
    assert out[0].startswith(f'[emulated {REASONER}] query "What is in my notes?"')
    assert body["response"]["query"] == "What is in my notes?"
    assert body["response"]["system"] == "Be brief."
    again = query(emu, query="What is in my notes?", system_prompt="Be brief.").json()
    assert again["response"]["response"] == out
    assert reply.headers["Server"] == "sensorium-emulator"


def test_reasoner_describes_files_and_events(emu: Emulator) -> None:
    assert upload(emu, "notes.txt", b"first line\nsecond line").status == 200
    assert upload(emu, "data.json", b'{"alpha": 1, "beta": [2]}').status == 200
    assert upload(emu, "photo.png", png(640, 480)).status == 200
    assert upload(emu, "table.csv", b"a,b\n1,2\n").status == 200
    assert upload(emu, "clip.mp4", b"\0\0\0\x18ftypmp42").status == 200
    img = base64.b64encode(png(32, 16)).decode()
    reply = query(
        emu,
        file_ids=["notes.txt", "data.json", "photo.png", "table.csv", "clip.mp4"],
        events=[
            {"type": "data.text", "event_data": {"contents": "inline words"}},
            {"type": "data.base64_img", "event_data": {"contents": img}},
            {"type": "data.base64_img_array", "event_data": {"contents": [img, img]}},
            {"type": "data.numeric_array", "event_data": {"contents": [[1, 2, 3], [4, 5, 6]]}},
        ],
        query_metadata={"raw_fps": 1.0, "frames_indices": [0, 1], "total_num_frames": 2},
        max_new_tokens=1000,
    )
    assert reply.status == 200, reply.raw
    text = reply.json()["response"]["response"][0]
    assert 'with 5 files: notes.txt (text/plain, 22 bytes): "first line second line"' in text
    assert "data.json (application/json, 25 bytes): JSON object with top-level keys: alpha, beta" in text
    assert "photo.png (image/png" in text and "640x480" in text
    assert "table.csv (text/csv, 8 bytes): contents not visible to this model" in text
    assert "clip.mp4 (video/mp4, 12 bytes): video: this model does not describe video" in text
    assert 'data.text "inline words"' in text
    assert "image/png 32x16 pixels" in text
    assert "data.base64_img_array of 2 images" in text
    assert "2 channels x 3 points" in text


def test_frames_of_one_video_without_their_timing_are_query_failed(emu: Emulator) -> None:
    """wire-notes: several images as frames of one video (multi_image false) need query_metadata
    {raw_fps, frames_indices, total_num_frames}; without it the service answers 400 query_failed."""
    img = base64.b64encode(png(8, 8)).decode()
    frames = [{"type": "data.base64_img_array", "event_data": {"contents": [img, img, img]}}]
    err = assert_error(query(emu, events=frames), 400, "query_failed")
    assert "multi_image" in err["message"] and "raw_fps" in err["message"]
    assert_error(query(emu, events=frames, multi_image=False, query_metadata={"run": 7}), 400, "query_failed")
    timing = {"raw_fps": 2.0, "frames_indices": [0, 5, 10], "total_num_frames": 11}
    assert query(emu, events=frames, query_metadata=timing).status == 200
    assert query(emu, events=frames, multi_image=True).status == 200


def test_max_new_tokens_cuts_the_answer(emu: Emulator) -> None:
    text = query(emu, query="one two three four five", max_new_tokens=4).json()["response"]["response"][0]
    assert text == f'[emulated {REASONER}] query "one'


# The spec's list of what `sanitize_response` strips; `api_key` is the one the emulator never sends.
INTERNAL_FIELDS = ["org_id", "query_metadata", "file_ids", "data_types", "render", "input_items", "sanitize"]


def test_sanitize_false_echoes_internal_fields(emu: Emulator) -> None:
    upload(emu, "a.txt", b"x")
    upload(emu, "b.txt", b"y")
    events = [{"type": "data.text", "event_data": {"contents": "note"}},
              {"type": "data.numeric_array", "event_data": {"contents": [[1, 2]]}}]
    plain = query(emu, file_ids=["a.txt"], events=events, render=True).json()
    assert not set(INTERNAL_FIELDS + ["api_key"]) & set(plain)
    raw = query(emu, file_ids=["a.txt", "b.txt"], events=events, sanitize_response=False, query_metadata={"run": 7}, render=True)
    body = raw.json()
    assert [f for f in INTERNAL_FIELDS if f not in body] == [], "false returns the raw record"
    assert body["org_id"] == "org-emu-default"
    assert body["file_ids"] == ["a.txt", "b.txt"]
    assert body["query_metadata"] == {"run": 7}
    assert body["render"] is True and body["sanitize"] is False
    assert body["input_items"] == [
        {"kind": "file", "file_id": "a.txt", "data_type": "text/plain"},
        {"kind": "file", "file_id": "b.txt", "data_type": "text/plain"},
        {"kind": "event", "data_type": "data.text"},
        {"kind": "event", "data_type": "data.numeric_array"},
    ]
    assert body["data_types"] == ["text/plain", "data.text", "data.numeric_array"]
    assert body["api_key"] == emu.api_key, "the platform echoes the caller's key in the raw record"
    older = query(emu, sanitize=False).json()  # the older callers' spelling
    assert older["render"] is False and older["input_items"] == [] and older["data_types"] == []


def test_fail_queries(emu: Emulator) -> None:
    emu.fail_queries("worker out of memory", times=1)
    body = query(emu).json()
    assert body["status"] == "failed"
    assert body["error_msg"] == "worker out of memory"
    nxt = query(emu).json()
    assert nxt["status"] == "completed" and "error_msg" not in nxt


def _numeric(channels: list[list[float]], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": ENCODER, "query": "", "events": [{"type": "data.numeric_array", "event_data": {"contents": channels}}]}
    body.update(fields)
    return body


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_encoder_shapes_warnings_and_similarity(emu: Emulator) -> None:
    wave = [math.sin(i * 0.05) for i in range(1024)]
    one = post_json(emu, "/query", _numeric([wave])).json()
    emb = one["response"]["response"]
    assert len(emb) == 768 and all(isinstance(v, float) for v in emb)
    assert "warning_messages" not in one["response"]
    assert post_json(emu, "/query", _numeric([wave])).json()["response"]["response"] == emb

    noisy = [v + 0.01 * ((i * 7919) % 13 - 6) / 6 for i, v in enumerate(wave)]
    other = [math.sin(i * 0.31 + 1.3) for i in range(1024)]
    e_noisy = post_json(emu, "/query", _numeric([noisy])).json()["response"]["response"]
    e_other = post_json(emu, "/query", _numeric([other])).json()["response"]["response"]
    assert _cos(emb, e_noisy) > _cos(emb, e_other)

    two = post_json(emu, "/query", _numeric([[1.0] * 100, [2.0] * 100])).json()
    assert len(two["response"]["response"]) == 2 and all(len(c) == 768 for c in two["response"]["response"])
    assert two["response"]["warning_messages"] == ["window of 100 points was zero-padded to 1024"]
    long = post_json(emu, "/query", _numeric([[0.5] * 1500])).json()
    assert long["response"]["warning_messages"] == ["window of 1500 points was truncated to its last 1024"]


def test_encoder_normalize_input(emu: Emulator) -> None:
    wave = [math.sin(i * 0.1) for i in range(1024)]
    scaled = [10 * v + 3 for v in wave]
    a = post_json(emu, "/query", _numeric([wave], normalize_input=True)).json()["response"]["response"]
    b = post_json(emu, "/query", _numeric([scaled], normalize_input=True)).json()["response"]["response"]
    assert _cos(a, b) > 0.9999
    c = post_json(emu, "/query", _numeric([scaled])).json()["response"]["response"]
    assert c != b
    flat = post_json(emu, "/query", _numeric([[5.0] * 10], normalize_input=True)).json()["response"]["response"]
    assert all(v == 0 for v in flat)


def test_encoder_errors(emu: Emulator) -> None:
    assert_error(post_json(emu, "/query", _numeric([[1, 2], [3]])), 400, "invalid_parameter_type")
    assert_error(post_json(emu, "/query", _numeric([[1, "x"]])), 400, "invalid_parameter_type")
    assert_error(post_json(emu, "/query", {"model": ENCODER, "query": ""}), 400, "invalid_request")


# --- Files ----------------------------------------------------------------------------------------


def test_files_round_trip(emu: Emulator) -> None:
    content = b"hello from the test\n" * 50
    reply = upload(emu, "dir/notes.txt", content)
    assert reply.status == 200
    body = reply.json()
    assert set(body) == {"is_valid", "file_id", "file_uid"}
    assert body["is_valid"] is True and body["file_id"] == "notes.txt"
    uuid.UUID(body["file_uid"])

    record = request(emu, "GET", "/files/metadata/notes.txt").json()
    assert set(record) == FILE_RECORD_KEYS
    assert record == {**record, "file_id": "notes.txt", "file_uid": body["file_uid"], "file_type": "text/plain", "num_bytes": len(content), "status": "Registered"}
    assert record["created_at"].endswith("Z") and "T" in record["created_at"]

    got = request(emu, "GET", "/files/download/notes.txt")
    assert got.status == 200 and got.raw == content
    assert got.headers["Content-Type"] == "text/plain"
    assert got.headers["Content-Length"] == str(len(content))
    assert request(emu, "GET", "/files/info").json() == {"num_files": 1, "num_bytes": len(content)}

    assert_error(upload(emu, "notes.txt", b"again"), 409, "file_already_exists")
    deleted = request(emu, "DELETE", "/files/delete/notes.txt")
    assert deleted.json() == {"is_valid": True, "file_id": "notes.txt", "file_uid": body["file_uid"]}
    assert_error(request(emu, "GET", "/files/metadata/notes.txt"), 404, "file_not_found")
    assert_error(request(emu, "GET", "/files/download/notes.txt"), 404, "file_not_found")
    assert_error(request(emu, "DELETE", "/files/delete/notes.txt"), 404, "file_not_found")
    assert request(emu, "GET", "/files/metadata").json()["data"] == []


def test_file_ids_are_percent_decoded(emu: Emulator) -> None:
    assert upload(emu, "my report (v2).txt", b"x").status == 200
    quoted = urllib.parse.quote("my report (v2).txt")
    assert request(emu, "GET", f"/files/metadata/{quoted}").json()["file_id"] == "my report (v2).txt"
    assert request(emu, "GET", f"/files/download/{quoted}").raw == b"x"


def test_upload_validation(emu: Emulator) -> None:
    body, headers = multipart("attachment", "a.txt", b"x")
    assert_error(request(emu, "POST", "/files", body, headers=headers), 400, "invalid_request")
    assert_error(request(emu, "POST", "/files", b"{}", headers={"Content-Type": "application/json"}), 400, "invalid_request")
    err = assert_error(upload(emu, "rows.jsonl", b"{}\n{}\n"), 400, "invalid_file_type")
    assert "direct-to-cloud" in (err["message"] + err.get("suggestion", ""))
    assert_error(upload(emu, "blob.bin", b"x", content_type="application/zip"), 400, "invalid_file_type")
    ok = upload(emu, "readme", b"plain words", content_type="text/plain")
    assert ok.status == 200
    assert request(emu, "GET", "/files/metadata/readme").json()["file_type"] == "text/plain"
    assert request(emu, "GET", "/files/info").json()["num_files"] == 1


def test_base64_upload(emu: Emulator) -> None:
    data = png(3, 2)
    encoded = base64.encodebytes(data)  # line-wrapped, as many encoders write it
    assert upload(emu, "tiny.png", encoded, path="/files/base64").status == 200
    assert request(emu, "GET", "/files/download/tiny.png").raw == data
    assert_error(upload(emu, "bad.png", b"%%% not base64 %%%", path="/files/base64"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/files/metadata/bad.png"), 404, "file_not_found")


def test_upload_over_limit_leaves_nothing() -> None:
    with Emulator(max_upload_bytes=1000) as small:
        assert upload(small, "ok.txt", b"x" * 1000).status == 200
        assert_error(upload(small, "big.txt", b"x" * 5000), 413, "payload_too_large")
        assert request(small, "GET", "/files/info").json() == {"num_files": 1, "num_bytes": 1000}
        assert_error(request(small, "GET", "/files/metadata/big.txt"), 404, "file_not_found")


def test_listing_sort_filter_and_cursors(emu: Emulator) -> None:
    sizes = {"c.txt": 30, "a.png": 10, "b.csv": 20, "d.txt": 40, "e.json": 50}
    for name, size in sizes.items():
        assert upload(emu, name, b"{" + b" " * (size - 2) + b"}").status == 200
    page = request(emu, "GET", "/files/metadata").json()
    assert set(page) == {"data", "has_more", "next_cursor", "prev_cursor"}
    assert [r["file_id"] for r in page["data"]] == ["e.json", "d.txt", "b.csv", "a.png", "c.txt"]
    assert page["has_more"] is False and page["next_cursor"] is None and page["prev_cursor"] is None

    by_size = request(emu, "GET", "/files/metadata?sort=num_bytes").json()["data"]
    assert [r["num_bytes"] for r in by_size] == [50, 40, 30, 20, 10]
    asc = request(emu, "GET", "/files/metadata?sort=num_bytes&order=asc").json()["data"]
    assert [r["num_bytes"] for r in asc] == [10, 20, 30, 40, 50]

    seen: list[str] = []
    url = "/files/metadata?sort=file_id&limit=2"
    first = request(emu, "GET", url).json()
    seen += [r["file_id"] for r in first["data"]]
    assert first["has_more"] is True
    second = request(emu, "GET", f"{url}&after={urllib.parse.quote(first['next_cursor'])}").json()
    seen += [r["file_id"] for r in second["data"]]
    third = request(emu, "GET", f"{url}&after={urllib.parse.quote(second['next_cursor'])}").json()
    seen += [r["file_id"] for r in third["data"]]
    assert seen == ["a.png", "b.csv", "c.txt", "d.txt", "e.json"]
    assert third["has_more"] is False and third["next_cursor"] is None
    back = request(emu, "GET", f"{url}&before={urllib.parse.quote(second['prev_cursor'])}").json()
    assert [r["file_id"] for r in back["data"]] == ["a.png", "b.csv"]

    filtered = request(emu, "GET", "/files/metadata?sort=file_id&file_type=text/plain,%20,image/png").json()["data"]
    assert [r["file_id"] for r in filtered] == ["a.png", "c.txt", "d.txt"]

    assert_error(request(emu, "GET", "/files/metadata?after=made-up"), 400, "invalid_cursor")
    assert_error(request(emu, "GET", f"/files/metadata?after={first['next_cursor']}&before=x"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/files/metadata?limit=0"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/files/metadata?limit=1001"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/files/metadata?sort=size"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/files/metadata?order=sideways"), 400, "invalid_request")
    many = ",".join(f"type/t{i}" for i in range(51))
    assert_error(request(emu, "GET", f"/files/metadata?file_type={many}"), 400, "invalid_request")


def test_orgs_do_not_see_each_other(emu: Emulator) -> None:
    other = emu.new_api_key()
    assert upload(emu, "mine.txt", b"a").status == 200
    assert upload(emu, "mine.txt", b"b", key=other).status == 200  # same name, other org
    assert request(emu, "GET", "/files/info", key=other).json() == {"num_files": 1, "num_bytes": 1}
    assert request(emu, "GET", "/files/download/mine.txt", key=other).raw == b"b"
    upload(emu, "only-default.txt", b"x")
    assert_error(request(emu, "GET", "/files/metadata/only-default.txt", key=other), 404, "file_not_found")
    assert_error(post_json(emu, "/query", {"model": REASONER, "query": "", "file_ids": ["only-default.txt"]}, key=other), 404, "file_not_found")
    team1 = emu.new_api_key("team")
    team2 = emu.new_api_key("team")
    upload(emu, "shared.txt", b"t", key=team1)
    assert request(emu, "GET", "/files/metadata/shared.txt", key=team2).status == 200


# --- Models ----------------------------------------------------------------------------------------


def test_models_filters(emu: Emulator) -> None:
    every = request(emu, "GET", "/models").json()
    assert set(every) == {"data", "has_more", "next_cursor"}
    assert every["has_more"] is False and every["next_cursor"] is None
    ids = [m["id"] for m in every["data"]]
    # The spec's neutral ids and the live ones of the wire notes, each version in both spellings.
    assert {REASONER, "Reasoner::c2_5_8b_260413b723a9ab", ENCODER} <= set(ids)
    assert {"Newton::c2_6_8b_fp8_260424d7a55d5e", "OmegaEncoder::omega_embeddings_surface_01", "OmegaEncoder::encoder_embeddings_01"} <= set(ids)
    assert len(ids) == len(set(ids)) == 18
    assert all(set(m) == {"id", "model_family", "variant", "description", "scope"} for m in every["data"])
    enc = request(emu, "GET", "/models?model_family=encoder").json()["data"]
    assert len(enc) == 8 and {m["model_family"] for m in enc} == {"Encoder", "OmegaEncoder"}
    assert enc[0] == {**enc[0], "id": ENCODER, "model_family": "Encoder", "variant": "encoder_embeddings_01", "scope": "platform"}
    assert request(emu, "GET", "/models?model_family=omegaencoder").json()["data"] == enc
    assert len(request(emu, "GET", "/models?model_family=REASONER").json()["data"]) == 10
    assert request(emu, "GET", "/models?scope=org").json()["data"] == []
    assert len(request(emu, "GET", "/models?scope=platform").json()["data"]) == 18
    assert [m["id"] for m in request(emu, "GET", "/models?search=C2_5").json()["data"]] == ["Reasoner::c2_5_8b_260413b723a9ab", "Newton::c2_5_8b_260413b723a9ab"]
    assert [m["id"] for m in request(emu, "GET", "/models?variant=c2_4_7b_251215a172f6d7").json()["data"]] == [REASONER, "Newton::c2_4_7b_251215a172f6d7"]
    assert_error(request(emu, "GET", "/models?model_family=Vision"), 400, "invalid_request")
    assert_error(request(emu, "GET", "/models?scope=galaxy"), 400, "invalid_request")


def test_unknown_route_is_spec_shaped(emu: Emulator) -> None:
    assert_error(request(emu, "GET", "/no-such-surface/items"), 404, "not_found")


# --- Faults and the request log -----------------------------------------------------------------


def test_status_faults_with_retry_after(emu: Emulator) -> None:
    emu.inject("POST", "/query", 503, retry_after=2, times=1)
    emu.inject("POST", "/v0.5/query", 429, retry_after=0.5, times=1)
    emu.inject(None, "/files/*", 500, times=1)
    first = query(emu)
    assert_error(first, 503, "server_at_capacity")
    assert first.headers["Retry-After"] == "2"
    second = query(emu)
    assert_error(second, 429, "rate_limit_exceeded")
    # RFC 9110's delay-seconds is a whole number (urllib3 refuses "0.5"): rounded up, with the
    # precise wait in retry-after-ms, which clients that know it read first.
    assert second.headers["Retry-After"] == "1"
    assert second.headers["retry-after-ms"] == "500"
    assert first.headers["retry-after-ms"] == "2000"
    assert query(emu).status == 200
    assert_error(request(emu, "GET", "/files/info"), 500, "internal_error")
    assert request(emu, "GET", "/files/info").status == 200
    emu.inject("GET", "/models", 418, times=None)
    for _ in range(2):
        reply = request(emu, "GET", "/models")
        assert_error(reply, 418, "injected_fault")
        assert "Retry-After" not in reply.headers
    emu.clear_faults()
    assert request(emu, "GET", "/models").status == 200
    emu.inject("GET", "/models", 502, delay=0.01)
    assert_error(request(emu, "GET", "/models"), 502, "bad_gateway")


def test_reset_fault(emu: Emulator) -> None:
    emu.inject("POST", "/query", action="reset")
    with pytest.raises(ConnectionResetError):
        query(emu)
    assert query(emu).status == 200
    assert [r.status for r in emu.requests] == [0, 200]


def test_truncate_fault(emu: Emulator) -> None:
    emu.inject("GET", "/models", action="truncate")
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=30)
    conn.request("GET", "/v0.5/models", headers={"Authorization": f"Bearer {emu.api_key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    declared = int(resp.headers["Content-Length"])
    with pytest.raises(http.client.IncompleteRead) as info:
        resp.read()
    assert len(info.value.partial) == declared // 2
    conn.close()
    assert request(emu, "GET", "/models").status == 200
    assert [r.status for r in emu.requests] == [200, 200]


def test_stall_fault(emu: Emulator) -> None:
    emu.inject("GET", "/models", action="stall")
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=0.5)
    conn.request("GET", "/v0.5/models", headers={"Authorization": f"Bearer {emu.api_key}"})
    resp = conn.getresponse()
    assert resp.status == 200
    declared = int(resp.headers["Content-Length"])
    got = resp.fp.read(declared // 2)
    assert len(got) == declared // 2
    with pytest.raises((socket.timeout, TimeoutError)):
        resp.fp.read(1)
    conn.close()
    assert request(emu, "GET", "/models").status == 200


def test_requests_log(emu: Emulator) -> None:
    body = {"model": REASONER, "query": "logged"}
    post_json(emu, "/query", body, headers={"x-sensorium-retry-count": "2"})
    upload(emu, "f.txt", b"12345")
    request(emu, "GET", "/files/metadata?limit=5&sort=file_id", key="sk-nobody")
    log = emu.requests
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", "/v0.5/query", 200),
        ("POST", "/v0.5/files", 200),
        ("GET", "/v0.5/files/metadata", 401),
    ]
    q = log[0]
    assert q.attempt == 3 and q.org == "org-emu-default"
    assert q.headers["authorization"] == "Bearer <redacted>"
    assert q.body is not None and json.loads(q.body) == body
    assert q.body_len == len(json.dumps(body).encode())
    assert log[1].body is None and log[1].body_len > 5 and log[1].attempt == 1
    assert log[2].query == "limit=5&sort=file_id" and log[2].org is None
    assert all(emu.api_key not in v for r in log for v in r.headers.values())
    emu.clear_requests()
    assert emu.requests == []


@pytest.mark.filterwarnings("ignore:the lens runtime is deprecated:DeprecationWarning")
def test_a_key_sent_as_a_websocket_subprotocol_is_redacted_in_the_log(emu: Emulator) -> None:
    """The spec lets the key travel in `Sec-WebSocket-Protocol` for clients that cannot set
    headers; the log must hide it there as it does in `Authorization`."""
    with emu.client() as c:
        session = c.lens.sessions.create("lns-emulator-echo")
        with c.lens.sessions.connect(session.session_id, subprotocol=True) as socket:
            socket.status()
    (upgrade,) = [r for r in emu.requests if "sec-websocket-protocol" in r.headers]
    assert upgrade.headers["sec-websocket-protocol"] == "authenticationauthorization.bearer.<redacted>, event-protocol-v1"
    assert all(emu.api_key not in v for r in emu.requests for v in r.headers.values())
    assert emu.api_key.encode() not in request(emu, "GET", "/_emulator/requests", key=None).raw


def test_control_routes(emu: Emulator) -> None:
    added = post_json(emu, "/_emulator/faults", {"method": "GET", "path": "/models", "status": 503, "retry_after": 1}, key=None)
    assert added.status == 200 and added.json()["times"] == 1
    assert_error(request(emu, "GET", "/models"), 503, "server_at_capacity")
    post_json(emu, "/_emulator/faults", {"path": "/models", "status": 500, "times": None}, key=None)
    assert request(emu, "DELETE", "/_emulator/faults", key=None).status == 200
    assert request(emu, "GET", "/models").status == 200
    assert post_json(emu, "/_emulator/faults", {"path": "/models", "action": "explode"}, key=None).status == 400
    log = request(emu, "GET", "/_emulator/requests", key=None).json()["data"]
    assert [r["status"] for r in log] == [503, 200]
    assert log[0]["headers"]["authorization"] == "Bearer <redacted>"
    assert "body" in log[0] and "body_base64" in log[0]
    summary = request(emu, "GET", "/_emulator/requests?bodies=false", key=None).json()["data"]
    assert [(r["method"], r["path"], r["status"], r["attempt"]) for r in summary] == \
        [(r["method"], r["path"], r["status"], r["attempt"]) for r in log]
    assert not any("body" in r or "body_base64" in r for r in summary)
    assert request(emu, "GET", "/_emulator/requests?bodies=maybe", key=None).status == 400
    key = post_json(emu, "/_emulator/keys", {"org": "ci"}, key=None).json()["api_key"]
    assert key.startswith("sk-emu-")
    assert request(emu, "GET", "/files/info", key=key).status == 200
    assert request(emu, "DELETE", "/_emulator/requests", key=None).status == 200
    assert emu.requests == []


def test_python_inject_rejects_unknown_action(emu: Emulator) -> None:
    with pytest.raises(ValueError, match="explode"):
        emu.inject("GET", "/models", action="explode")  # type: ignore[arg-type]


def test_query_accepts_bodies_over_axum_default_limit(emu: Emulator) -> None:
    # ~3 MB of numbers: above axum's 2 MB default, well under the emulator's 64 MiB.
    long = [round(math.sin(i * 0.01), 6) for i in range(300_000)]
    reply = post_json(emu, "/query", _numeric([long]))
    assert reply.status == 200, reply.raw[:200]
    assert reply.json()["response"]["warning_messages"] == ["window of 300000 points was truncated to its last 1024"]
    assert emu.requests[-1].body_len > 2_000_000


def test_upload_larger_than_axum_default_limit(emu: Emulator) -> None:
    content = bytes(range(256)) * 12_000  # ~3 MB
    assert upload(emu, "big.csv", content).status == 200
    assert request(emu, "GET", "/files/download/big.csv").raw == content
    assert request(emu, "GET", "/files/metadata/big.csv").json()["file_type"] == "text/csv"


# --- Emulator controls: what they accept, and the limits they set -------------------------------


def test_rate_limit_retry_after_is_whole_seconds_with_the_precise_wait_in_ms() -> None:
    # One request every 2 s: the second of two back-to-back requests waits up to 2 s.
    with Emulator(rate_limit=0.5) as emu:
        assert request(emu, "GET", "/models").status == 200
        refused = request(emu, "GET", "/models")
    assert_error(refused, 429, "rate_limit_exceeded")
    seconds, millis = refused.headers["Retry-After"], refused.headers["retry-after-ms"]
    assert seconds.isdigit() and millis.isdigit(), (seconds, millis)
    assert 0 < int(millis) <= 2000
    assert int(seconds) == math.ceil(int(millis) / 1000)


def test_retry_after_of_a_fractional_rate_limit_is_read_by_urllib3() -> None:
    urllib3 = pytest.importorskip("urllib3")
    with Emulator(rate_limit=0.5) as emu:
        headers = {"Authorization": f"Bearer {emu.api_key}"}
        with urllib3.PoolManager() as pool:
            assert pool.request("GET", emu.base_url + "/models", headers=headers, retries=False).status == 200
            refused = pool.request("GET", emu.base_url + "/models", headers=headers, retries=False)
    assert refused.status == 429
    # Raised InvalidHeader for the "0.499" the emulator used to send.
    assert urllib3.util.Retry(total=1).parse_retry_after(refused.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("path", ["/models", "/agents/nodes/registry"])
def test_every_list_pages_by_page_size_and_limit_and_refuses_made_up_cursors(path: str) -> None:
    with Emulator() as whole:
        everything = request(whole, "GET", path).json()["data"]
    assert len(everything) > 2
    with Emulator(page_size=2) as emu:
        seen: list[Any] = []
        reply = request(emu, "GET", path).json()
        while True:
            assert len(reply["data"]) <= 2
            seen += reply["data"]
            if not reply["has_more"]:
                assert reply["next_cursor"] is None
                break
            reply = request(emu, "GET", f"{path}?after={urllib.parse.quote(reply['next_cursor'])}").json()
        assert seen == everything
        assert len(request(emu, "GET", f"{path}?limit=1").json()["data"]) == 1
        assert_error(request(emu, "GET", f"{path}?limit=0"), 400, "invalid_request")
        assert_error(request(emu, "GET", f"{path}?after=zzz"), 400, "invalid_cursor")


def test_the_client_lists_every_model_and_node_across_pages() -> None:
    with Emulator() as whole, whole.client() as c:
        models, nodes = [m.id for m in c.models.list()], [n.key for n in c.agents.nodes.registry()]
    with Emulator(page_size=2) as emu, emu.client() as c:
        assert [m.id for m in c.models.list()] == models
        assert [n.key for n in c.agents.nodes.registry()] == nodes
        assert len([r for r in emu.requests if r.path == "/v0.5/models"]) == math.ceil(len(models) / 2)


def test_inject_matches_a_fine_tuning_path_as_the_spec_writes_it(emu: Emulator) -> None:
    # The spec writes fine-tuning paths relative to the /v0.6 base, as it does the others to /v0.5.
    emu.inject("GET", "/fine_tuning/jobs", 500, times=1)
    assert request(emu, "GET", "/v0.6/fine_tuning/jobs").status == 500
    assert request(emu, "GET", "/v0.6/fine_tuning/jobs").status == 200
    emu.inject("GET", "/v0.6/fine_tuning/jobs", 503, times=1)
    assert request(emu, "GET", "/v0.6/fine_tuning/jobs").status == 503
    emu.inject(None, "/fine_tuning/*", 502, times=1)
    assert request(emu, "GET", "/v0.5/models").status == 200
    assert request(emu, "GET", "/v0.6/fine_tuning/checkpoint_options").status == 502


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("args", "kwargs", "argument"), [
    (("FOO", "/models", 500), {}, "method"),
    ((None, "models", 500), {}, "path"),
    ((None, "/models?scope=all", 500), {}, "path"),
    (("GET", "/models"), {}, "a status, an action or a delay"),
    (("GET", "/models", 500), {"times": 0}, "times"),
    (("GET", "/models", 500), {"times": -1}, "times"),
    (("GET", "/models", 500), {"probability": 0.0}, "probability"),
    (("GET", "/models", 500), {"probability": 1.5}, "probability"),
    (("GET", "/models", -1), {}, "status"),
    (("GET", "/models", 70000), {}, "status"),
    (("GET", "/models", 429), {"retry_after": -1}, "retry_after"),
    (("GET", "/models", 429), {"retry_after": NAN}, "retry_after"),
    (("GET", "/models", 429), {"retry_after": INF}, "retry_after"),
])
def test_inject_refuses_a_rule_that_could_never_fire_naming_the_argument(
    emu: Emulator, args: tuple[Any, ...], kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(argument)):
        emu.inject(*args, **kwargs)
    assert request(emu, "GET", "/models").status == 200
    # The control route takes the same rules and refuses the same ones.
    method, path, *status = args
    rule = {"method": method, "path": path, "status": status[0] if status else None, **kwargs}
    if not any(isinstance(v, float) and not math.isfinite(v) for v in rule.values()):  # not JSON
        refused = post_json(emu, "/_emulator/faults", rule, key=None)
        assert refused.status == 400 and argument in refused.json()["errors"][0]["message"], refused.raw


def test_inject_still_takes_a_method_in_any_case_and_any_method(emu: Emulator) -> None:
    emu.inject("get", "/models", 500)
    emu.inject("*", "/models", 502)
    emu.inject(None, "/models", 503)
    assert [request(emu, "GET", "/models").status for _ in range(4)] == [500, 502, 503, 200]


@pytest.mark.parametrize(("make", "argument", "allowed"), [
    (lambda: Emulator(port=-1), "port", "0 to 65535"),
    (lambda: Emulator(port=70000), "port", "0 to 65535"),
    (lambda: Emulator(page_size=-3), "page_size", "1 to 1000"),
    (lambda: Emulator(page_size=2**70), "page_size", "1 to 1000"),
    (lambda: Emulator(max_upload_bytes=-5), "max_upload_bytes", "at least 0"),
    (lambda: Emulator(upload_part_size=-1), "upload_part_size", "at least 1"),
    (lambda: Emulator(upload_part_size=0), "upload_part_size", "at least 1"),
])
def test_out_of_range_emulator_options_are_value_errors_naming_them(make: Any, argument: str, allowed: str) -> None:
    import traceback

    with pytest.raises(ValueError, match=argument) as refused:
        make()
    assert allowed in str(refused.value)
    # The half-built emulator is a local of the failed constructor: its repr must not raise there.
    shown = "".join(traceback.TracebackException.from_exception(refused.value, capture_locals=True).format())
    assert "self = Emulator(not started)" in shown


@pytest.mark.parametrize(("control", "argument", "allowed"), [
    (lambda e: e.drop_streams(-1), "every", "at least 1"),
    (lambda e: e.inject("GET", "/models", 500, times=-1), "times", "at least 1"),
    (lambda e: e.inject("GET", "/models", -1), "status", "100 to 599"),
    (lambda e: e.inject_upload_part(-1, status=500), "part_number", "1 to 10000"),
    (lambda e: e.inject_upload_part(0, status=500), "part_number", "1 to 10000"),
    (lambda e: e.inject_upload_part(1, status=500, times=0), "times", "at least 1"),
    (lambda e: e.fail_queries("x", times=-1), "times", "at least 0"),
])
def test_out_of_range_control_arguments_are_value_errors_naming_them(
    emu: Emulator, control: Any, argument: str, allowed: str
) -> None:
    with pytest.raises(ValueError, match=argument) as refused:
        control(emu)
    assert allowed in str(refused.value)


def test_a_wrong_type_is_still_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match="port"):
        Emulator(port="abc")  # type: ignore[arg-type]


@pytest.mark.parametrize("option", ["rate_limit", "max_query_size_mb"])
def test_nonpositive_limits_are_refused_with_a_plain_message(option: str) -> None:
    with pytest.raises(ValueError, match=f"{option} must be a positive number, got 0") as refused:
        Emulator(**{option: 0})
    assert "Some(" not in str(refused.value)


@pytest.mark.parametrize("key", ["", " ", "sk emu", "sk-emu\n1", "sk-\x00emu", "sk-émü"])
def test_an_api_key_the_emulator_could_not_accept_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="api_key") as refused:
        Emulator(api_key=key)
    if key.strip():
        assert key not in str(refused.value)


def test_a_chosen_api_key_still_works() -> None:
    with Emulator(api_key="sk-my_own.key~1") as emu:
        assert request(emu, "GET", "/models").status == 200


def test_initiate_with_a_negative_size_names_num_bytes(emu: Emulator) -> None:
    reply = post_json(emu, "/files/uploads/initiate", {"filename": "a.csv", "file_type": "text/csv", "num_bytes": -1})
    err = assert_error(reply, 400, "invalid_request")
    assert "num_bytes" in err["message"] and "u64" not in err["message"], err


def test_the_key_is_redacted_wherever_a_request_carries_it(emu: Emulator) -> None:
    other = emu.new_api_key()
    for key in (emu.api_key, other):
        request(emu, "GET", "/models", key=None, headers={"X-Api-Key": key})
        request(emu, "GET", f"/models?api_key={key}&scope=all", key=None)
        post_json(emu, "/query", {"model": REASONER, "query": f"my key is {key}"}, key=key)
    log = emu.requests
    assert len(log) == 6
    assert [r.query for r in log[1::3]] == ["api_key=<redacted>&scope=all"] * 2
    assert [r.headers["x-api-key"] for r in log[0::3]] == ["<redacted>"] * 2
    assert all(b"my key is <redacted>" in (r.body or b"") for r in log[2::3])
    raw = request(emu, "GET", "/_emulator/requests", key=None).raw
    for key in (emu.api_key, other):
        assert key not in repr(log) and key.encode() not in raw


def test_a_key_sent_percent_encoded_is_redacted_too() -> None:
    # A key of the user's choosing may hold characters a URL must encode: its encoded form is
    # what the request line carries, and the log must not keep that either.
    from urllib.parse import quote

    key = "sk-test/a+b=c"
    with Emulator(api_key=key) as emu:
        request(emu, "GET", f"/models?api_key={quote(key, safe='')}&scope=all", key=None)
        request(emu, "GET", f"/files/{quote(key, safe='')}", key=key)
        log = emu.requests
        raw = request(emu, "GET", "/_emulator/requests", key=None).raw
    assert log[0].query == "api_key=<redacted>&scope=all"
    assert log[1].path.endswith("/files/<redacted>")
    for shown in (quote(key, safe=""), key):
        assert shown not in repr(log) and shown.encode() not in raw


def test_controls_after_stop_say_the_emulator_is_stopped() -> None:
    emu = Emulator()
    emu.stop()
    for control in (
        lambda: emu.inject("GET", "/models", 500),
        lambda: emu.fail_next_job("agent", error="x"),
        lambda: emu.new_api_key(),
        lambda: emu.fail_queries("x"),
        lambda: emu.drop_streams(2),
    ):
        with pytest.raises(RuntimeError, match="stopped"):
            control()
    assert emu.requests == []  # the log stays readable after stop
    emu.stop()


def test_urls_handed_out_use_the_address_the_emulator_was_reached_by(emu: Emulator) -> None:
    """Behind a port mapping (`docker run -p 9000:8080` of `--host 0.0.0.0`) or reached by
    another name, part URLs gave the bound 127.0.0.1:<port>, which the client could not reach:
    a direct upload failed after its initiate succeeded. The request's Host is their origin."""
    body = {"filename": "a.csv", "file_type": "text/csv", "num_bytes": 5}
    mapped = post_json(emu, "/files/uploads/initiate", body, headers={"Host": "emulator.test:9000"}).json()
    assert mapped["parts"] and all(p["url"].startswith("http://emulator.test:9000/_storage/") for p in mapped["parts"])
    # A Host that is no plain host[:port] is not written into URLs: the bound address is.
    odd = post_json(emu, "/files/uploads/initiate", {**body, "filename": "b.csv"}, headers={"Host": "user@evil.test"})
    assert all(p["url"].startswith(f"http://127.0.0.1:{emu.port}/") for p in odd.json()["parts"])
