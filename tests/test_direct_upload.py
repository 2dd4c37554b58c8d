"""The SDK's direct-to-cloud upload against the emulator's: round trips, part faults, expired
URLs and resume, seen through ``client.files.upload``."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from sensorium.errors import ConflictError, TransferError
from sensorium.testing import Emulator

from _helpers import write

PART = 1024 * 1024


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(upload_part_size=PART) as e:
        yield e




def downloaded(emu: Emulator, name: str) -> str:
    import urllib.request

    req = urllib.request.Request(
        f"{emu.base_url}/files/download/{name}", headers={"Authorization": f"Bearer {emu.api_key}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return hashlib.sha256(resp.read()).hexdigest()


def part_puts(emu: Emulator) -> list[tuple[int, int]]:
    return [(int(r.path.rsplit("/", 1)[1]), r.status) for r in emu.requests if r.method == "PUT"]


@pytest.mark.parametrize("size", [0, 1, PART, 3 * PART + 7])
def test_direct_upload_round_trip(emu: Emulator, tmp_path: Path, size: int) -> None:
    path, digest = write(tmp_path, f"f{size}.bin", size)
    with emu.client() as client:
        rec = client.files.upload(path, method="direct")
    assert rec.file_id == f"f{size}.bin"
    assert downloaded(emu, f"f{size}.bin") == digest
    assert all("authorization" not in r.headers for r in emu.requests if r.method == "PUT")


def test_part_faults_are_retried(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "rows.jsonl", 3 * PART)
    emu.inject_upload_part(2, action="reset")
    emu.inject_upload_part(3, status=503)
    with emu.client(max_retries=2) as client:
        client.files.upload(path, concurrency=1)
    assert downloaded(emu, "rows.jsonl") == digest
    assert sorted(part_puts(emu)) == [(1, 200), (2, 0), (2, 200), (3, 200), (3, 503)]


def test_interrupted_upload_resumes_with_missing_parts_only(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "big.bin", 4 * PART)
    # Part 3 fails for good on the first run (a 400 is not retried), so the run stops part-way;
    # with one part at a time, parts 1 and 2 are sent and checkpointed before it.
    emu.inject_upload_part(3, status=400, times=None)
    with emu.client(max_retries=0) as client:
        with pytest.raises(TransferError) as info:
            client.files.upload(path, method="direct", concurrency=1)
        assert info.value.resumable and info.value.upload_id
        emu.clear_faults()
        emu.expire_upload_urls()  # the old URLs are useless; a resume gets fresh ones
        emu.clear_requests()
        client.files.upload(path, method="direct", concurrency=1)
    assert downloaded(emu, "big.bin") == digest
    # Only what was not checkpointed went again (parts 1 and 2 were, before part 3 failed).
    assert sorted(n for n, _ in part_puts(emu)) == [3, 4]


# Two uploads of one file at once must not adopt, abort or join each other's upload: as with
# the simple upload, one stores the file and the other gets the name's 409.


def _one_stored_one_conflict(outcomes: list[Any]) -> None:
    records = [o for o in outcomes if not isinstance(o, BaseException)]
    conflicts = [o for o in outcomes if isinstance(o, ConflictError)]
    assert len(records) == 1 and len(conflicts) == 1, outcomes
    assert records[0].file_id == "twice.csv"


def test_two_threads_uploading_one_file_directly(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "twice.csv", 10 * PART)
    emu.inject_upload_part(1, delay=0.3, times=None)  # both are surely under way together
    outcomes: list[Any] = []
    start = threading.Barrier(2)
    with emu.client() as client:

        def upload() -> None:
            start.wait()
            try:
                outcomes.append(client.files.upload(path, method="direct"))
            except Exception as e:
                outcomes.append(e)

        threads = [threading.Thread(target=upload) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _one_stored_one_conflict(outcomes)
    assert downloaded(emu, "twice.csv") == digest


def test_two_tasks_uploading_one_file_directly(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "twice.csv", 10 * PART)
    emu.inject_upload_part(1, delay=0.3, times=None)

    async def main() -> list[Any]:
        async with emu.async_client() as client:
            return list(await asyncio.gather(
                client.files.upload(path, method="direct"),
                client.files.upload(path, method="direct"),
                return_exceptions=True,
            ))

    _one_stored_one_conflict(asyncio.run(main()))
    assert downloaded(emu, "twice.csv") == digest


def test_two_processes_uploading_one_file_directly(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "twice.csv", 10 * PART)
    emu.inject_upload_part(1, delay=0.3, times=None)
    child = textwrap.dedent(
        """
        import sys
        import sensorium
        from sensorium.errors import ConflictError
        with sensorium.Client(base_url=sys.argv[1], api_key=sys.argv[2]) as client:
            try:
                client.files.upload(sys.argv[3], method="direct")
                print("stored")
            except ConflictError:
                print("conflict")
        """
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", child, emu.base_url, emu.api_key, str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        for _ in range(2)
    ]
    results = [run.communicate(timeout=120) for run in runs]
    assert sorted(out.strip() for out, _ in results) == ["conflict", "stored"], results
    assert downloaded(emu, "twice.csv") == digest


def test_a_name_taken_while_the_parts_go_is_a_conflict_not_resumable(emu: Emulator, tmp_path: Path) -> None:
    path, _ = write(tmp_path, "taken.csv", 2 * PART)
    emu.inject_upload_part(2, delay=0.6)
    other = b"another writer's rows\n"
    taken: list[bool] = []
    with emu.client() as client, emu.client() as writer:

        def on_progress(done: int, total: int) -> None:
            if not taken and done > 0:
                writer.files.upload_base64("taken.csv", other)
                taken.append(True)

        with pytest.raises(ConflictError):
            client.files.upload(path, method="direct", concurrency=1, on_progress=on_progress)
        assert taken, "the progress callback never ran while part 2 was held"
        # Nothing is left to resume: a new attempt meets the name's 409 again, not a resume.
        with pytest.raises(ConflictError):
            client.files.upload(path, method="direct")
    assert downloaded(emu, "taken.csv") == hashlib.sha256(other).hexdigest()


# A server's upload plan is its data: the client sends no byte twice, none not at all, and
# reports a plan or a completion it cannot trust as the server's fault.

def _plan_server(parts: Any, *, complete: Any = None, resume: Any = None) -> Any:
    """A fake platform whose initiate answers ``parts(base)`` (a list of part dicts, ``base`` the
    storage's address) and whose complete answers ``complete`` (default: the file as sent)."""
    import json as _json

    from _fake_server import FakeServer, response

    holder: dict[str, Any] = {}

    def script(head: bytes) -> list[Any]:
        line = head.split(b"\r\n", 1)[0].decode()
        method, target = line.split(" ")[:2]
        base = holder["server"].base_url.rsplit("/v0.5", 1)[0]
        if method == "PUT":
            return [response(200, b"", {"ETag": '"e"'})]
        if target.endswith("/initiate"):
            body = {"upload_id": "upl_1", "strategy": "multipart", "part_size": 500, "parts": parts(base),
                    **(resume or {})}
            return [response(200, _json.dumps(body).encode())]
        if target.endswith("/complete"):
            answer = complete or {"file_uid": "u", "file_name": "f.csv", "file_status": "Registered",
                                  "num_bytes": 1000}
            return [response(200, _json.dumps(answer).encode())]
        return [response(200, b"{}")]

    server = FakeServer(script)
    holder["server"] = server
    return server


def _part(n: int, offset: int, length: int, url: str | None = None) -> Any:
    return lambda base: {"part_number": n, "url": url or f"{base}/store/{n}", "offset": offset, "length": length}


def _plan(*parts: Any) -> Any:
    return lambda base: [p(base) for p in parts]


def _puts(server: Any) -> list[bytes]:
    return [h for h in server.requests if h.startswith(b"PUT ")]


def _completes(server: Any) -> list[bytes]:
    return [h for h in server.requests if b"/complete " in h.split(b"\r\n", 1)[0]]


BAD_PLANS = {
    "gap": _plan(_part(1, 0, 500)),
    "empty": _plan(),
    "overlap": _plan(_part(1, 0, 600), _part(2, 500, 500)),
    "twice": _plan(_part(1, 0, 500), _part(1, 500, 500)),
    "relative url": _plan(_part(1, 0, 1000, "/store/1")),
    "ftp url": _plan(_part(1, 0, 1000, "ftp://127.0.0.1/store/1")),
}


@pytest.mark.parametrize("plan", list(BAD_PLANS), ids=list(BAD_PLANS))
def test_a_plan_that_does_not_cover_the_file_exactly_once_is_refused(client_kind: str, tmp_path: Path, plan: str) -> None:
    from _helpers import run_on
    from sensorium.errors import APIResponseValidationError

    path = tmp_path / "f.csv"
    path.write_bytes(b"x" * 1000)
    with _plan_server(BAD_PLANS[plan]) as server:
        with pytest.raises(APIResponseValidationError) as info:
            run_on(client_kind, lambda c: c.files.upload(path, method="direct"),
                   api_key="k", base_url=server.base_url, max_retries=0)
        assert "base_url" not in str(info.value)
        assert _puts(server) == [] and _completes(server) == []


@pytest.mark.parametrize("answer", [
    {"file_uid": "u", "file_name": "f.csv", "num_bytes": 5},
    {"file_uid": "u", "file_name": "other.csv", "num_bytes": 1000},
], ids=["size", "name"])
def test_a_completion_naming_another_file_is_refused(client_kind: str, tmp_path: Path, answer: Any) -> None:
    from _helpers import run_on
    from sensorium.errors import APIResponseValidationError

    path = tmp_path / "f.csv"
    path.write_bytes(b"x" * 1000)
    with _plan_server(_plan(_part(1, 0, 500), _part(2, 500, 500)), complete=answer) as server:
        with pytest.raises(APIResponseValidationError):
            run_on(client_kind, lambda c: c.files.upload(path, method="direct"),
                   api_key="k", base_url=server.base_url, max_retries=0)


def test_a_good_plan_from_the_same_server_still_uploads(client_kind: str, tmp_path: Path) -> None:
    """The fake platform itself is sound: only the plans above are refused."""
    from _helpers import run_on

    path = tmp_path / "f.csv"
    path.write_bytes(b"x" * 1000)
    with _plan_server(_plan(_part(2, 500, 500), _part(1, 0, 500))) as server:
        rec = run_on(client_kind, lambda c: c.files.upload(path, method="direct"),
                     api_key="k", base_url=server.base_url, max_retries=0)
        assert rec.file_id == "f.csv" and len(_puts(server)) == 2


def _interrupted_then_resumed(client_kind: str, server: Any, path: Path) -> Any:
    """Uploads `path` to the fake platform `server` once, which it must stop as resumable, and
    gives the function that uploads it again."""
    from _helpers import run_on

    def upload() -> Any:
        return run_on(client_kind, lambda c: c.files.upload(path, method="direct", concurrency=1),
                      api_key="k", base_url=server.base_url, max_retries=0)

    with pytest.raises(TransferError) as first:
        upload()
    assert first.value.resumable
    return upload


@pytest.mark.parametrize("resumed", [
    # Part 2 claimed still to send, but at part 1's bytes: bytes 500..999 would never be sent.
    {"num_parts": 2, "part_size": 500, "total_bytes": 1000, "parts": [(2, 0, 500)]},
    # 3 parts of 500 bytes do not make 1000 bytes: the "already sent" part 3 is past the end.
    {"num_parts": 3, "part_size": 500, "total_bytes": 1000, "parts": [(2, 500, 500)]},
    # Another file's upload.
    {"num_parts": 2, "part_size": 500, "total_bytes": 999, "parts": [(2, 500, 499)]},
], ids=["misplaced", "too many parts", "other size"])
def test_a_resume_whose_parts_and_the_sent_ones_do_not_make_the_file_is_refused(
    client_kind: str, tmp_path: Path, resumed: Any
) -> None:
    import json as _json

    from _fake_server import FakeServer, response
    from sensorium.errors import APIResponseValidationError

    initiates: list[int] = []

    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n", 1)[0].decode().split(" ")[:2]
        base = server.base_url.rsplit("/v0.5", 1)[0]
        if method == "PUT":
            # The first run stores part 1 and is refused part 2, so it stops, resumable.
            if target.endswith("/2") and len(initiates) == 1:
                return [response(400, b'{"errors": [{"code": "invalid_upload_parts", "message": "no"}]}')]
            return [response(200, b"", {"ETag": '"e"'})]
        if target.endswith("/initiate"):
            initiates.append(1)
            if len(initiates) == 1:
                body = {"upload_id": "upl_1", "num_parts": 2, "part_size": 500, "total_bytes": 1000,
                        "parts": [{"part_number": n, "url": f"{base}/store/{n}", "offset": o, "length": 500}
                                  for n, o in ((1, 0), (2, 500))]}
            else:
                body = {"upload_id": "upl_1", "is_resume": True, **resumed,
                        "parts": [{"part_number": n, "url": f"{base}/store/{n}", "offset": o, "length": ln}
                                  for n, o, ln in resumed["parts"]]}
            return [response(200, _json.dumps(body).encode())]
        return [response(200, b"{}")]

    path = tmp_path / "f.csv"
    path.write_bytes(b"x" * 1000)
    with FakeServer(script) as server:
        upload_again = _interrupted_then_resumed(client_kind, server, path)
        puts_before = len(_puts(server))
        with pytest.raises(APIResponseValidationError):
            upload_again()
        assert len(_puts(server)) == puts_before and _completes(server) == []


def test_a_resume_in_parts_of_another_size_sends_the_file_afresh(client_kind: str, tmp_path: Path) -> None:
    # The first run sent parts 1 and 2 of 250 bytes (bytes 0..500). A resume that lays the same
    # upload out in parts of 500 says part 1 is sent, but the part 1 it holds is bytes 0..250: the
    # file it would assemble never existed. It is discarded and the file sent whole instead.
    import json as _json

    from _fake_server import FakeServer, response

    initiates: list[int] = []

    def plan(upload_id: str, size: int, numbers: Any, **extra: Any) -> bytes:
        base = server.base_url.rsplit("/v0.5", 1)[0]
        parts = [{"part_number": n, "url": f"{base}/store/{upload_id}/{n}", "offset": (n - 1) * size,
                  "length": size} for n in numbers]
        return _json.dumps({"upload_id": upload_id, "num_parts": 1000 // size, "part_size": size,
                            "total_bytes": 1000, "parts": parts, **extra}).encode()

    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n", 1)[0].decode().split(" ")[:2]
        if method == "PUT":
            if target.endswith("/upl_1/3"):
                return [response(400, b'{"errors": [{"code": "invalid_upload_parts", "message": "no"}]}')]
            return [response(200, b"", {"ETag": '"e"'})]
        if target.endswith("/initiate"):
            initiates.append(1)
            if len(initiates) == 1:
                return [response(200, plan("upl_1", 250, [1, 2, 3, 4]))]
            if len(initiates) == 2:
                return [response(200, plan("upl_1", 500, [2], is_resume=True))]
            return [response(200, plan("upl_2", 500, [1, 2]))]
        if target.endswith("/complete"):
            return [response(200, b'{"file_uid": "u", "file_name": "f.csv", "file_status": "Registered", '
                                  b'"num_bytes": 1000}')]
        return [response(200, b"{}")]

    path = tmp_path / "f.csv"
    path.write_bytes(b"x" * 1000)
    with FakeServer(script) as server:
        upload_again = _interrupted_then_resumed(client_kind, server, path)
        rec = upload_again()
        assert rec.file_id == "f.csv"
        lines = [h.split(b"\r\n", 1)[0] for h in server.requests]
        assert any(b"upl_1/abort" in line for line in lines), "the relaid upload is aborted"
        assert [line.split(b" ")[1].rsplit(b"/", 2)[-2:] for line in lines if line.startswith(b"PUT ")][-2:] == [
            [b"upl_2", b"1"], [b"upl_2", b"2"]
        ], "the whole file is sent afresh"
        assert len(_completes(server)) == 1


def test_direct_uploads_leave_no_lock_files_behind(emu: Emulator, tmp_path: Path) -> None:
    """Each direct upload left an empty `<hash>.lock` in the cache folder for good, one per file
    name and emulator port: a user's ~/.cache/sensorium grew by one per dated file uploaded."""
    import os

    for n in range(3):
        path, _ = write(tmp_path, f"day-{n}.bin", PART + 1)
        with emu.client() as client:
            client.files.upload(path, method="direct")
    uploads = Path(os.environ["SENSORIUM_CACHE_DIR"]) / "uploads"
    assert uploads.is_dir(), "the uploads took no lock in the cache folder: the test tests nothing"
    assert list(uploads.glob("*.lock")) == []
