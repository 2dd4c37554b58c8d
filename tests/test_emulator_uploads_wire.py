"""Wire conformance of the emulator's direct-to-cloud upload, in raw HTTP (standard library only).

Expected shapes are written from wire-notes.md ("Files", direct-to-cloud upload) and the spec's
Files, Errors and Limits sections, not from our own structs.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import urllib.parse
from datetime import datetime
from typing import Any, Iterator, Optional

import pytest

from sensorium.testing import Emulator

from _raw_http import Reply, request

PART = 1024 * 1024
INITIATE_KEYS = {
    "upload_id", "file_uid", "strategy", "num_parts", "part_size", "parts", "expires_at",
    "is_resume", "total_bytes",
}
PART_KEYS = {"part_number", "url", "offset", "length"}
COMPLETE_KEYS = {"file_uid", "file_name", "file_status", "num_bytes", "file_attributes"}
ERROR_KEYS = {"code", "message", "suggestion", "error_uid"}


def post(emu: Emulator, path: str, obj: Any = None, **kw: Any) -> Reply:
    body = None if obj is None else json.dumps(obj).encode()
    return request(emu, "POST", path, body, headers={"Content-Type": "application/json"}, **kw)


def put(url: str, data: bytes, headers: Optional[dict[str, str]] = None) -> Reply:
    """A part PUT as a storage client sends it: no Authorization header unless asked."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("PUT", f"{u.path}?{u.query}", body=data, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def initiate(emu: Emulator, name: str, num_bytes: int, *, key: str = "default", **fields: Any) -> Reply:
    body = {"filename": name, "file_type": "application/octet-stream", "num_bytes": num_bytes}
    body.update(fields)
    return post(emu, "/files/uploads/initiate", body, key=key)


def payload(n: int, seed: int = 1) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (n // len(block) + 1))[:n]


def send(part: dict[str, Any], data: bytes) -> dict[str, Any]:
    r = put(part["url"], data[part["offset"] : part["offset"] + part["length"]])
    assert r.status == 200, r.raw
    return {"part_number": part["part_number"], "part_token": r.headers["ETag"]}


def download_sha256(emu: Emulator, name: str, key: str = "default") -> str:
    r = request(emu, "GET", f"/files/download/{urllib.parse.quote(name)}", key=key)
    assert r.status == 200, r.raw
    return hashlib.sha256(r.raw).hexdigest()


def error(r: Reply, status: int, code: str) -> dict[str, Any]:
    assert r.status == status, (r.status, r.raw)
    body = r.json()
    assert set(body) == {"errors"}
    assert set(body["errors"][0]) <= ERROR_KEYS
    assert body["errors"][0]["code"] == code
    assert body["errors"][0]["error_uid"].startswith("err-")
    return body["errors"][0]


def xml_code(r: Reply) -> str:
    m = re.search(rb"<Code>([^<]*)</Code>", r.raw)
    assert m, r.raw
    return m.group(1).decode()


def url_expired(r: Reply) -> bool:
    """The client's rule: storage answers 403, or 400 mentioning TokenExpired."""
    return r.status == 403 or (r.status == 400 and b"TokenExpired" in r.raw)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(upload_part_size=PART) as e:
        yield e


def test_whole_flow_literal_shapes(emu: Emulator) -> None:
    data = payload(2 * PART + 10)
    r = initiate(emu, "big.bin", len(data))
    assert r.status == 200, r.raw
    started = r.json()
    assert set(started) == INITIATE_KEYS
    assert re.fullmatch(r"upl_[0-9a-f]+", started["upload_id"])
    assert started["strategy"] == "multipart"
    assert started["num_parts"] == 3 and started["part_size"] == PART
    assert started["is_resume"] is False and started["total_bytes"] == len(data)
    datetime.fromisoformat(started["expires_at"].replace("Z", "+00:00"))
    parts = started["parts"]
    assert [set(p) for p in parts] == [PART_KEYS] * 3
    assert [(p["part_number"], p["offset"], p["length"]) for p in parts] == [
        (1, 0, PART), (2, PART, PART), (3, 2 * PART, 10)
    ]
    assert all("/_storage/" in p["url"] and "signature=" in p["url"] for p in parts)

    tokens = [send(p, data) for p in parts]
    assert all(re.fullmatch(r'"[0-9a-f]+"', t["part_token"]) for t in tokens)
    upload_id = started["upload_id"]
    r = post(emu, f"/files/uploads/{upload_id}/parts/checkpoint", {"parts": tokens[:1]})
    assert r.status == 200, r.raw
    assert r.json() == {"upload_id": upload_id, "checkpointed": [1]}

    r = post(emu, f"/files/uploads/{upload_id}/complete", {"parts": tokens})
    assert r.status == 200, r.raw
    done = r.json()
    assert set(done) == COMPLETE_KEYS
    assert done == {
        "file_uid": started["file_uid"], "file_name": "big.bin", "file_status": "Registered",
        "num_bytes": len(data), "file_attributes": {},
    }
    meta = request(emu, "GET", "/files/metadata/big.bin").json()
    assert meta["num_bytes"] == len(data) and meta["file_type"] == "application/octet-stream"
    listing = request(emu, "GET", "/files/metadata").json()
    assert [f["file_id"] for f in listing["data"]] == ["big.bin"]
    assert download_sha256(emu, "big.bin") == hashlib.sha256(data).hexdigest()
    # The part PUTs are in the request log, without any credentials.
    puts = [q for q in emu.requests if q.method == "PUT"]
    assert [q.path for q in puts] == [f"/_storage/{upload_id}/{n}" for n in (1, 2, 3)]
    assert all(q.status == 200 and "authorization" not in q.headers for q in puts)


@pytest.mark.parametrize("size", [0, 1, PART - 1, PART, PART + 1, 4 * PART + 123])
def test_round_trip_is_byte_identical(emu: Emulator, size: int) -> None:
    data = payload(size, seed=size)
    started = initiate(emu, f"f{size}.jsonl", size, file_type="application/x-ndjson").json()
    expected_parts = max(1, -(-size // PART))
    assert started["num_parts"] == len(started["parts"]) == expected_parts
    assert started["strategy"] == ("simple" if expected_parts == 1 else "multipart")
    assert sum(p["length"] for p in started["parts"]) == size
    tokens = [send(p, data) for p in started["parts"]]
    r = post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": tokens})
    assert r.status == 200, r.raw
    assert r.json()["num_bytes"] == size
    assert download_sha256(emu, f"f{size}.jsonl") == hashlib.sha256(data).hexdigest()
    meta = request(emu, "GET", f"/files/metadata/f{size}.jsonl").json()
    assert meta["file_type"] == "application/x-ndjson" and meta["num_bytes"] == size


def test_resume_lists_only_missing_parts_and_completes_with_new_ones(emu: Emulator) -> None:
    data = payload(4 * PART)
    first = initiate(emu, "r.bin", len(data), resume_if_started=True).json()
    assert first["is_resume"] is False
    upload_id = first["upload_id"]
    t1, t2, t3 = (send(p, data) for p in first["parts"][:3])
    r = post(emu, f"/files/uploads/{upload_id}/parts/checkpoint", {"parts": [t1, t2]})
    assert r.json()["checkpointed"] == [1, 2]
    # Part 3 was sent but not checkpointed: a resume sends it again.

    again = initiate(emu, "r.bin", len(data), resume_if_started=True).json()
    assert set(again) == INITIATE_KEYS
    assert again["upload_id"] == upload_id and again["is_resume"] is True
    assert again["file_uid"] == first["file_uid"]
    assert again["num_parts"] == 4 and again["total_bytes"] == len(data)
    assert [p["part_number"] for p in again["parts"]] == [3, 4]
    assert [p["offset"] for p in again["parts"]] == [2 * PART, 3 * PART]

    new_tokens = [send(p, data) for p in again["parts"]]
    r = post(emu, f"/files/uploads/{upload_id}/complete", {"parts": new_tokens})
    assert r.status == 200, r.raw
    assert download_sha256(emu, "r.bin") == hashlib.sha256(data).hexdigest()


def test_resume_needs_the_same_size_and_type_and_absent_flag_starts_anew(emu: Emulator) -> None:
    first = initiate(emu, "s.bin", 3 * PART).json()
    other_size = initiate(emu, "s.bin", 3 * PART + 1, resume_if_started=True).json()
    assert other_size["is_resume"] is False and other_size["upload_id"] != first["upload_id"]
    other_type = initiate(emu, "s.bin", 3 * PART, file_type="text/plain", resume_if_started=True).json()
    assert other_type["is_resume"] is False
    fresh = initiate(emu, "s.bin", 3 * PART).json()
    assert fresh["is_resume"] is False and fresh["upload_id"] != first["upload_id"]
    assert len(fresh["parts"]) == 3
    # The newest unfinished upload of the same file is the one resumed.
    resumed = initiate(emu, "s.bin", 3 * PART, resume_if_started=False).json()
    assert resumed["is_resume"] is False
    r = initiate(emu, "s.bin", 3 * PART, resume_if_started=True).json()
    assert r["is_resume"] is True and r["upload_id"] == resumed["upload_id"]


def test_expired_urls_are_403_and_parts_urls_refreshes_them(emu: Emulator) -> None:
    data = payload(2 * PART)
    started = initiate(emu, "e.bin", len(data)).json()
    emu.expire_upload_urls()
    part = started["parts"][0]
    r = put(part["url"], data[: part["length"]])
    assert r.status == 403 and url_expired(r)
    assert xml_code(r) == "AccessDenied"
    assert b"<Message>Request has expired</Message>" in r.raw

    upload_id = started["upload_id"]
    r = post(emu, f"/files/uploads/{upload_id}/parts/urls", {"part_numbers": [1, 2]})
    assert r.status == 200, r.raw
    fresh = r.json()
    assert set(fresh) == {"parts"}
    assert [set(p) for p in fresh["parts"]] == [{"part_number", "url"}] * 2
    by_number = {p["part_number"]: p["url"] for p in fresh["parts"]}
    tokens = []
    for p in started["parts"]:
        tokens.append(send({**p, "url": by_number[p["part_number"]]}, data))
    r = post(emu, f"/files/uploads/{upload_id}/complete", {"parts": tokens})
    assert r.status == 200, r.raw


def test_forged_or_unsigned_urls_are_refused(emu: Emulator) -> None:
    started = initiate(emu, "g.bin", 2 * PART).json()
    url = started["parts"][0]["url"]
    forged = re.sub(r"signature=[0-9a-f]+", "signature=" + "0" * 64, url)
    r = put(forged, b"x" * PART)
    assert r.status == 403 and xml_code(r) == "SignatureDoesNotMatch"
    # Reusing part 1's signature for part 2 is a forgery too.
    r = put(url.replace(f"/{started['upload_id']}/1?", f"/{started['upload_id']}/2?"), b"x" * PART)
    assert r.status == 403 and xml_code(r) == "SignatureDoesNotMatch"
    r = put(url.split("?")[0], b"x" * PART)
    assert r.status == 403 and xml_code(r) == "AccessDenied"


def test_authorization_header_on_a_part_put_is_400_and_not_recorded(emu: Emulator) -> None:
    data = payload(PART)
    started = initiate(emu, "a.bin", len(data)).json()
    part = started["parts"][0]
    r = put(part["url"], data, headers={"Authorization": f"Bearer {emu.api_key}"})
    assert r.status == 400 and xml_code(r) == "InvalidArgument"
    assert "etag" not in {k.lower() for k in r.headers}
    r = post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": []})
    assert "1" in error(r, 400, "invalid_upload_parts")["message"]


def test_wrong_length_body_is_400_and_not_recorded(emu: Emulator) -> None:
    data = payload(2 * PART)
    started = initiate(emu, "w.bin", len(data)).json()
    p1, p2 = started["parts"]
    r = put(p1["url"], data[: PART - 1])
    assert r.status == 400 and xml_code(r) == "IncompleteBody"
    r = put(p1["url"], data[: PART + 1])
    assert r.status == 400 and xml_code(r) == "EntityTooLarge"
    t2 = send(p2, data)
    r = post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": [t2]})
    message = error(r, 400, "invalid_upload_parts")["message"]
    assert "1" in message and "2" not in message.replace(str(PART), "")
    # The over-long body did not spill into part 2: it still completes byte-identical.
    t1 = send(p1, data)
    r = post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": [t1, t2]})
    assert r.status == 200, r.raw
    assert download_sha256(emu, "w.bin") == hashlib.sha256(data).hexdigest()


def test_bad_tokens_and_part_numbers_are_invalid_upload_parts(emu: Emulator) -> None:
    data = payload(2 * PART)
    started = initiate(emu, "t.bin", len(data)).json()
    upload_id = started["upload_id"]
    t1 = send(started["parts"][0], data)
    bad = {"part_number": 1, "part_token": '"deadbeef"'}
    error(post(emu, f"/files/uploads/{upload_id}/parts/checkpoint", {"parts": [bad]}), 400, "invalid_upload_parts")
    unsent = {"part_number": 2, "part_token": '"00"'}
    error(post(emu, f"/files/uploads/{upload_id}/parts/checkpoint", {"parts": [unsent]}), 400, "invalid_upload_parts")
    error(post(emu, f"/files/uploads/{upload_id}/parts/urls", {"part_numbers": [3]}), 400, "invalid_upload_parts")
    error(post(emu, f"/files/uploads/{upload_id}/parts/urls", {"part_numbers": [0]}), 400, "invalid_upload_parts")
    t2 = send(started["parts"][1], data)
    error(post(emu, f"/files/uploads/{upload_id}/complete", {"parts": [t2, t1]}), 400, "invalid_upload_parts")
    assert post(emu, f"/files/uploads/{upload_id}/complete", {"parts": [t1, t2]}).status == 200


def test_initiate_validation(emu: Emulator) -> None:
    error(initiate(emu, "z.zip", 10, file_type="application/zip"), 400, "invalid_file_type")
    r = initiate(emu, "huge.bin", 250_000_000_001)
    assert r.status == 413, r.raw
    at_limit = initiate(emu, "limit.bin", 250_000_000_000)
    assert at_limit.status == 200, at_limit.raw
    assert post(emu, f"/files/uploads/{at_limit.json()['upload_id']}/abort").status == 200
    assert initiate(emu, "x.csv", 10, file_type="text/csv; charset=utf-8").status == 200
    error(post(emu, "/files/uploads/initiate", {"filename": "x"}), 400, "invalid_request")
    error(initiate(emu, "n.bin", 1, key="sk-emu-unknown"), 401, "unauthorized_request")


def test_inject_upload_part_status_and_reset(emu: Emulator) -> None:
    data = payload(3 * PART)
    started = initiate(emu, "f.bin", len(data)).json()
    p1, p2, p3 = started["parts"]
    emu.inject_upload_part(2, status=503)
    emu.inject_upload_part(3, action="reset")
    assert put(p1["url"], data[:PART]).status == 200
    r = put(p2["url"], data[PART : 2 * PART])
    error(r, 503, "server_at_capacity")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        put(p3["url"], data[2 * PART :])
    # Each fault applied once; the retries go through.
    tokens = [send(p, data) for p in (p1, p2, p3)]
    assert post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": tokens}).status == 200
    assert download_sha256(emu, "f.bin") == hashlib.sha256(data).hexdigest()
    statuses = [(q.path.rsplit("/", 1)[1], q.status) for q in emu.requests if q.method == "PUT"]
    assert statuses == [("1", 200), ("2", 503), ("3", 0), ("1", 200), ("2", 200), ("3", 200)]


def test_abort_then_404_and_completed_then_409(emu: Emulator) -> None:
    data = payload(PART)
    started = initiate(emu, "ab.bin", len(data)).json()
    upload_id = started["upload_id"]
    token = send(started["parts"][0], data)
    r = post(emu, f"/files/uploads/{upload_id}/abort")
    assert r.status == 200 and r.json() == {"upload_id": upload_id, "status": "aborted"}
    for path, body in [
        ("abort", None), ("complete", {"parts": [token]}), ("parts/checkpoint", {"parts": [token]}),
        ("parts/urls", {"part_numbers": [1]}),
    ]:
        error(post(emu, f"/files/uploads/{upload_id}/{path}", body), 404, "upload_not_found")
    r = put(started["parts"][0]["url"], data)
    assert r.status == 404 and xml_code(r) == "NoSuchUpload"
    error(request(emu, "GET", "/files/metadata/ab.bin"), 404, "file_not_found")
    error(post(emu, "/files/uploads/upl_unknown/abort"), 404, "upload_not_found")

    started = initiate(emu, "ab.bin", len(data)).json()
    token = send(started["parts"][0], data)
    upload_id = started["upload_id"]
    assert post(emu, f"/files/uploads/{upload_id}/complete", {"parts": [token]}).status == 200
    error(post(emu, f"/files/uploads/{upload_id}/complete", {"parts": [token]}), 409, "conflict")
    error(post(emu, f"/files/uploads/{upload_id}/abort"), 409, "conflict")
    assert download_sha256(emu, "ab.bin") == hashlib.sha256(data).hexdigest()


def test_existing_name_is_409_conflict(emu: Emulator) -> None:
    data = payload(10)
    started = initiate(emu, "taken.txt", len(data), file_type="text/plain").json()
    send(started["parts"][0], data)
    post(emu, f"/files/uploads/{started['upload_id']}/complete", {"parts": [send(started["parts"][0], data)]})
    error(initiate(emu, "taken.txt", 5, file_type="text/plain"), 409, "conflict")
    # A name taken by a simple upload while a direct one was in flight: complete says 409 too.
    late = initiate(emu, "race.txt", len(data), file_type="text/plain").json()
    token = send(late["parts"][0], data)
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="race.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n"
    ).encode()
    r = request(emu, "POST", "/files", body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status == 200, r.raw
    error(post(emu, f"/files/uploads/{late['upload_id']}/complete", {"parts": [token]}), 409, "conflict")


def test_two_organizations_are_isolated(emu: Emulator) -> None:
    other = emu.new_api_key()
    data = payload(PART + 1)
    mine = initiate(emu, "same.bin", len(data)).json()
    upload_id = mine["upload_id"]
    tokens = [send(p, data) for p in mine["parts"]]
    for path, body in [
        ("parts/checkpoint", {"parts": tokens}), ("parts/urls", {"part_numbers": [1]}),
        ("complete", {"parts": tokens}), ("abort", None),
    ]:
        error(post(emu, f"/files/uploads/{upload_id}/{path}", body, key=other), 404, "upload_not_found")
    # The other organization neither resumes this upload nor conflicts with the name.
    theirs = initiate(emu, "same.bin", len(data), key=other, resume_if_started=True).json()
    assert theirs["is_resume"] is False and theirs["upload_id"] != upload_id
    assert post(emu, f"/files/uploads/{upload_id}/complete", {"parts": tokens}).status == 200
    their_data = payload(len(data), seed=9)
    their_tokens = [send(p, their_data) for p in theirs["parts"]]
    r = post(emu, f"/files/uploads/{theirs['upload_id']}/complete", {"parts": their_tokens}, key=other)
    assert r.status == 200, r.raw
    assert download_sha256(emu, "same.bin") == hashlib.sha256(data).hexdigest()
    assert download_sha256(emu, "same.bin", key=other) == hashlib.sha256(their_data).hexdigest()
