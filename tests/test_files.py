"""``client.files``: upload, list, metadata, info, download and delete, per organization."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import pytest

from _helpers import REASONER, calls, run_on
from sensorium import FileRecord, Page, SyncPager
from sensorium.testing import Emulator
from sensorium.errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    BadRequestError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
)


def make(tmp_path: Path, name: str, content: bytes | str) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    return path


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if "partial" in p.name or p.name.startswith(".sensorium")]


def test_upload_returns_the_record(emu, client, tmp_path):
    path = make(tmp_path, "notes.txt", "hello world\n")
    record = client.files.upload(path)
    assert isinstance(record, FileRecord)
    assert record.file_id == "notes.txt"
    assert isinstance(record.file_uid, str) and record.file_uid
    assert record.is_valid is True
    assert record.to_dict()["file_id"] == "notes.txt"
    (request,) = calls(emu, "/files", "POST")
    assert request.body_len >= path.stat().st_size


def test_upload_accepts_str_path(client, tmp_path):
    path = make(tmp_path, "a.csv", "x,y\n1,2\n")
    assert client.files.upload(str(path)).file_id == "a.csv"


def test_metadata_reports_size_and_type(client, tmp_path):
    client.files.upload(make(tmp_path, "table.csv", "a,b\n1,2\n"))
    client.files.upload(make(tmp_path, "pic.PNG", b"\x89PNG\r\n\x1a\n" + b"\0" * 100))
    meta = client.files.metadata("table.csv")
    assert (meta.file_id, meta.num_bytes, meta.file_type) == ("table.csv", 8, "text/csv")
    assert meta.created_at is not None
    assert client.files.metadata("pic.PNG").file_type == "image/png"


def test_unknown_extension_uses_content_type(client, tmp_path):
    path = make(tmp_path, "readme.md", "# notes")
    record = client.files.upload(path, content_type="text/plain")
    assert client.files.metadata(record.file_id).file_type == "text/plain"


def test_extension_wins_over_content_type(client, tmp_path):
    client.files.upload(make(tmp_path, "t.txt", "x"), content_type="image/png")
    assert client.files.metadata("t.txt").file_type == "text/plain"


def test_unknown_extension_without_content_type_is_rejected(emu, client, tmp_path):
    with pytest.raises(InvalidArgumentError, match="content_type"):
        client.files.upload(make(tmp_path, "blob.bin", b"\0\1"))
    assert calls(emu, "/files", "POST") == []


@pytest.mark.parametrize("name", ["train.jsonl", "TRAIN.JSONL", "rows.ndjson"])
def test_jsonl_needs_direct_to_cloud_upload(emu, client, tmp_path, name):
    path = make(tmp_path, name, '{"a": 1}\n{"a": 2}\n')
    with pytest.raises(InvalidArgumentError, match="direct-to-cloud"):
        client.files.upload(path, method="simple")
    with pytest.raises(InvalidArgumentError, match="direct-to-cloud"):
        client.files.upload(path, method="simple", content_type="text/plain")
    with pytest.raises(InvalidArgumentError, match="direct-to-cloud"):
        client.files.upload_base64(name, b'{"a": 1}\n')
    assert emu.requests == []
    # The default method sends JSONL through the direct-to-cloud flow, never the simple upload.
    record = client.files.upload(path)
    assert record.file_id == name
    assert calls(emu, "/files", "POST") == []
    assert [r.path for r in emu.requests][:1] == ["/v0.5/files/uploads/initiate"]
    assert client.files.metadata(name).file_type == "application/x-ndjson"
    client.files.download(name, tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == path.read_bytes()


def test_existing_name_is_a_conflict_and_not_retried(emu, client, tmp_path):
    path = make(tmp_path, "dup.txt", "first")
    client.files.upload(path)
    path.write_text("second version")
    with pytest.raises(ConflictError) as info:
        client.files.upload(path)
    err = info.value
    assert err.status == 409 and err.code == "file_already_exists"
    assert len(calls(emu, "/files", "POST")) == 2
    assert client.files.metadata("dup.txt").num_bytes == len("first")


def test_a_large_upload_to_a_taken_name_meets_the_409_not_a_broken_pipe(tmp_path):
    """The emulator answered the 409 as soon as it read the file's name and closed the
    connection under a client still sending: about one upload in five of 40 MB saw a broken pipe
    (APIConnectionError) instead of the conflict. It now reads the body to its end first, as the
    platform behind its buffering proxy does."""
    path = make(tmp_path, "big.csv", b"x" * (32 << 20))
    with Emulator(max_upload_bytes=64 << 20) as emu, emu.client(max_retries=0) as client:
        client.files.upload(path, method="simple")
        for _ in range(5):
            with pytest.raises(ConflictError):
                client.files.upload(path, method="simple")


# An upload whose first answer is lost (a reset, or a broken pipe after an early 409) is retried,
# and the retry may meet a 409 for the name. Only content byte for byte the caller's is taken
# as its own landed upload; anything else stays a conflict.
SAME_SIZE_VERSIONS = {
    "small": (b"day,value\n1,10\n", b"day,value\n1,99\n"),
    # Past the download buffer and many chunks long; only the very last byte differs.
    "5MB": (b"x" * (5 << 20) + b"A", b"x" * (5 << 20) + b"B"),
}


def _sender(how, path):
    if how == "path":
        return "/files", lambda c: c.files.upload(path)
    return "/files/base64", lambda c: c.files.upload_base64(path.name, path.read_bytes())


@pytest.mark.parametrize("how", ["path", "base64"])
@pytest.mark.parametrize("size", sorted(SAME_SIZE_VERSIONS))
def test_conflict_after_a_lost_response_with_other_content_is_a_conflict(emu, client, client_kind, tmp_path, how, size):
    stored, edited = SAME_SIZE_VERSIONS[size]
    path = make(tmp_path, "daily.csv", stored)
    client.files.upload(path)
    path.write_bytes(edited)
    route, send = _sender(how, path)
    emu.inject("POST", route, action="reset", times=1)
    with pytest.raises(ConflictError) as info:
        run_on(client_kind, send, base_url=emu.base_url, api_key=emu.api_key)
    assert info.value.status == 409
    assert client.files.download("daily.csv", tmp_path / "back.csv").read_bytes() == stored


@pytest.mark.parametrize("how", ["path", "base64"])
@pytest.mark.parametrize("size", sorted(SAME_SIZE_VERSIONS))
def test_conflict_after_a_lost_response_of_our_own_upload_is_its_success(emu, client, client_kind, tmp_path, how, size):
    content, _ = SAME_SIZE_VERSIONS[size]
    path = make(tmp_path, "daily.csv", content)
    route, send = _sender(how, path)
    # The first attempt lands; its answer is cut off. The retry meets the landed file.
    emu.inject("POST", route, action="truncate", times=1)
    record = run_on(client_kind, send, base_url=emu.base_url, api_key=emu.api_key)
    assert record.file_id == "daily.csv"
    # Usually [200, 409]. The emulator answers 409 as soon as it has read the part's name, so on a
    # busy machine a retry still sending its 5 MB can see its connection closed before the 409
    # arrives, and (being safe to repeat) is sent once more: only 409s follow the first answer.
    statuses = [r.status for r in calls(emu, route, "POST")]
    assert statuses[0] == 200 and len(statuses) >= 2 and set(statuses[1:]) == {409}, statuses
    assert client.files.download("daily.csv", tmp_path / "back.csv").read_bytes() == content


def test_missing_path_and_directory_are_rejected(emu, client, tmp_path):
    with pytest.raises(FileNotFoundError):
        client.files.upload(tmp_path / "absent.txt")
    folder = tmp_path / "folder.txt"
    folder.mkdir()
    with pytest.raises(InvalidArgumentError, match="not a regular file"):
        client.files.upload(folder)
    assert emu.requests == []


def test_upload_base64_from_bytes_and_base64_text(client, tmp_path):
    content = bytes(range(256)) * 4
    record = client.files.upload_base64("raw.csv", content)
    assert record.file_id == "raw.csv"
    assert client.files.download("raw.csv", tmp_path / "raw.csv").read_bytes() == content
    client.files.upload_base64("b64.txt", base64.b64encode(b"hello from base64").decode())
    assert client.files.download("b64.txt", tmp_path / "b64.txt").read_bytes() == b"hello from base64"
    assert client.files.metadata("raw.csv").num_bytes == len(content)


def test_upload_base64_rejects_bad_input(emu, client):
    with pytest.raises(InvalidArgumentError, match="base64"):
        client.files.upload_base64("x.txt", "this is not base64!!")
    with pytest.raises(TypeError, match="data"):
        client.files.upload_base64("x.txt", 12345)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        client.files.upload_base64("dir/x.txt", b"x")
    assert emu.requests == []


def test_upload_over_the_limit_is_413_and_not_retried(tmp_path):
    from sensorium.testing import Emulator

    with Emulator(max_upload_bytes=1000) as emu, emu.client() as client:
        client.files.upload(make(tmp_path, "small.txt", "x" * 1000))
        with pytest.raises(PayloadTooLargeError) as info:
            client.files.upload(make(tmp_path, "big.txt", "x" * 1001))
        assert info.value.status == 413
        assert len(calls(emu, "/files", "POST")) == 2
        assert [f.file_id for f in client.files.list()] == ["small.txt"]


def test_list_is_lazy_and_complete(emu, client, tmp_path):
    names = {f"f{i}.txt" for i in range(7)}
    for name in names:
        client.files.upload(make(tmp_path, name, name))
    emu.clear_requests()
    pager = client.files.list(limit=3)
    assert isinstance(pager, SyncPager)
    assert emu.requests == []
    it = iter(pager)
    next(it)
    assert len(calls(emu, "/files/metadata")) == 1
    rest = list(it)
    assert len(calls(emu, "/files/metadata")) == 3
    assert len(rest) == 6
    listed = [f.file_id for f in client.files.list(limit=3)]
    assert sorted(listed) == sorted(names) and len(listed) == len(set(listed))


def test_to_pandas_without_pandas_says_so_before_reading_the_list(emu, client_kind, monkeypatch):
    """Without pandas, `to_pandas()` fetched every page of the list (all of a large one) before
    saying it needs pandas. The check comes first, on both clients."""
    with emu.client() as setup:
        setup.files.upload_base64("a.txt", b"a")
    emu.clear_requests()
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)  # as if not installed

    async def frame_async(c):
        return await c.files.list(limit=1).to_pandas()

    operation = (lambda c: c.files.list(limit=1).to_pandas()) if client_kind == "sync" else frame_async
    with pytest.raises(InvalidArgumentError, match="needs pandas"):
        run_on(client_kind, operation, api_key=emu.api_key, base_url=emu.base_url)
    assert emu.requests == []


def test_pages_by_hand(client, tmp_path):
    for i in range(5):
        client.files.upload(make(tmp_path, f"p{i}.txt", "x"))
    pager = client.files.list(limit=2)
    first = pager.first_page()
    assert isinstance(first, Page)
    assert len(first.data) == 2 and first.has_more and first.next_cursor
    pages = list(pager.pages())
    assert [len(p.data) for p in pages] == [2, 2, 1]
    assert not pages[-1].has_more
    resumed = [f.file_id for f in client.files.list(limit=2, after=first.next_cursor)]
    assert resumed == [f.file_id for p in pages[1:] for f in p.data]


def test_list_newest_first_by_default(client, tmp_path):
    for name in ("old.txt", "mid.txt", "new.txt"):
        client.files.upload(make(tmp_path, name, "x"))
    assert [f.file_id for f in client.files.list()] == ["new.txt", "mid.txt", "old.txt"]


def test_list_sorting(client, tmp_path):
    sizes = {"b.txt": 30, "a.txt": 10, "c.txt": 20}
    for name, size in sizes.items():
        client.files.upload(make(tmp_path, name, "x" * size))
    assert [f.file_id for f in client.files.list(sort="file_id", order="asc")] == ["a.txt", "b.txt", "c.txt"]
    assert [f.file_id for f in client.files.list(sort="file_id", order="desc")] == ["c.txt", "b.txt", "a.txt"]
    assert [f.num_bytes for f in client.files.list(sort="num_bytes", order="desc")] == [30, 20, 10]
    assert [f.num_bytes for f in client.files.list(sort="num_bytes", order="asc")] == [10, 20, 30]


def test_list_filters_by_type(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "a.txt", "x"))
    client.files.upload(make(tmp_path, "b.csv", "x"))
    client.files.upload(make(tmp_path, "c.json", "{}"))
    assert [f.file_id for f in client.files.list(file_type="text/csv")] == ["b.csv"]
    both = {f.file_id for f in client.files.list(file_type=["text/csv", "application/json"])}
    assert both == {"b.csv", "c.json"}
    assert {f.file_id for f in client.files.list(file_type="text/plain, ,text/csv")} == {"a.txt", "b.csv"}
    assert "file_type=" in emu.requests[-1].query


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"sort": "size"}, "sort"),
        ({"order": "up"}, "order"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"file_type": [f"type/x{i}" for i in range(51)]}, "file_type"),
    ],
)
def test_list_arguments_are_checked(emu, client, kwargs, argument):
    with pytest.raises(InvalidArgumentError, match=argument):
        list(client.files.list(**kwargs))
    assert emu.requests == []


def test_made_up_cursor_is_a_bad_request(client):
    with pytest.raises(BadRequestError) as info:
        client.files.list(after="not-a-real-cursor").first_page()
    assert info.value.code == "invalid_cursor"


def test_info_summarises_storage(client, tmp_path):
    assert client.files.info() == {"num_files": 0, "num_bytes": 0}
    client.files.upload(make(tmp_path, "a.txt", "12345"))
    client.files.upload(make(tmp_path, "b.txt", "123"))
    info = client.files.info()
    assert (info["num_files"], info["num_bytes"]) == (2, 8)


def test_download_to_a_file_path(client, tmp_path):
    content = os.urandom(3 * 1024 * 1024 + 17)
    client.files.upload_base64("blob.png", content)
    out = tmp_path / "out" / "copy.png"
    out.parent.mkdir()
    result = client.files.download("blob.png", out)
    assert result == out
    assert out.read_bytes() == content
    assert leftovers(out.parent) == []


def test_download_into_a_folder_uses_the_file_name(client, tmp_path):
    client.files.upload(make(tmp_path, "src.txt", "abc"))
    folder = tmp_path / "downloads"
    folder.mkdir()
    result = client.files.download("src.txt", folder)
    assert result == folder / "src.txt"
    assert result.read_text() == "abc"
    assert client.files.download("src.txt", str(folder)) == folder / "src.txt"
    assert sorted(p.name for p in folder.iterdir()) == ["src.txt"]


def test_download_to_a_relative_path(client, tmp_path, monkeypatch):
    client.files.upload(make(tmp_path, "rel.txt", "relative"))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert client.files.download("rel.txt", "copy.txt").resolve() == work / "copy.txt"
    assert (work / "copy.txt").read_text() == "relative"
    assert sorted(p.name for p in work.iterdir()) == ["copy.txt"]


def test_download_to_an_empty_path_is_refused_as_download_outputs_refuses_it(emu, client, tmp_path, monkeypatch):
    client.files.upload_base64("hello.txt", b"hi")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="path: is empty") as info:
        client.files.download("hello.txt", "")
    assert info.value.argument == "path"
    assert list(tmp_path.iterdir()) == []


def test_download_into_a_missing_folder_given_with_a_slash(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "a.txt", "x"))
    missing = str(tmp_path / "not-yet") + os.sep
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        client.files.download("a.txt", missing)
    assert not (tmp_path / "not-yet").exists()
    (tmp_path / "not-yet").mkdir()
    assert client.files.download("a.txt", missing) == tmp_path / "not-yet" / "a.txt"


def test_download_replaces_an_existing_file(client, tmp_path):
    client.files.upload(make(tmp_path, "new.txt", "fresh"))
    out = make(tmp_path, "target.txt", "stale content that is longer")
    client.files.download("new.txt", out)
    assert out.read_text() == "fresh"


@pytest.mark.skipif(os.name != "posix", reason="file modes")
@pytest.mark.parametrize("size", [5, 3 * 1024 * 1024 + 17], ids=["gathered in memory", "streamed to disk"])
def test_download_gets_the_mode_open_would_give(client, tmp_path, size):
    # As open(path, "w") does: a new file gets 0666 less the umask (not a temporary file's 0600,
    # which would hide it from the group sharing the folder); a replaced file keeps its mode.
    client.files.upload_base64("shared.png", os.urandom(size))
    previous = os.umask(0o027)
    try:
        new = client.files.download("shared.png", tmp_path / "new.bin")
        replaced = make(tmp_path, "replaced.bin", "old")
        replaced.chmod(0o664)
        client.files.download("shared.png", replaced)
    finally:
        os.umask(previous)
    assert new.stat().st_mode & 0o777 == 0o640
    assert replaced.stat().st_mode & 0o777 == 0o664
    assert replaced.stat().st_size == size


def test_download_missing_file_leaves_nothing(emu, client, tmp_path):
    out = tmp_path / "never.txt"
    with pytest.raises(NotFoundError) as info:
        client.files.download("never.txt", out)
    assert info.value.code == "file_not_found"
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert len(calls(emu, "/files/download/never.txt")) == 1


def test_download_into_missing_folder_is_rejected(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "a.txt", "x"))
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        client.files.download("a.txt", tmp_path / "nope" / "a.txt")
    assert calls(emu, "/files/download/a.txt") == []


def test_truncated_download_is_retried_and_complete(emu, tmp_path):
    content = os.urandom(200_000)
    with emu.client(max_retries=2) as client:
        client.files.upload_base64("data.jpg", content)
        emu.inject("GET", "/files/download/data.jpg", action="truncate", times=1)
        out = client.files.download("data.jpg", tmp_path / "data.jpg")
    assert out.read_bytes() == content
    assert [r.attempt for r in calls(emu, "/files/download/data.jpg")] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jpg"]


def test_download_that_keeps_breaking_leaves_no_file(emu, tmp_path):
    content = os.urandom(100_000)
    with emu.client(max_retries=1) as client:
        client.files.upload_base64("data.jpg", content)
        emu.inject("GET", "/files/download/data.jpg", action="truncate", times=5)
        out = tmp_path / "data.jpg"
        with pytest.raises(APIConnectionError):
            client.files.download("data.jpg", out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    assert len(calls(emu, "/files/download/data.jpg")) == 2


@pytest.mark.timeout(30)
def test_stalled_download_times_out_on_read_timeout(emu, tmp_path):
    content = os.urandom(100_000)
    with emu.client(max_retries=0, read_timeout=0.5) as client:
        client.files.upload_base64("data.png", content)
        emu.inject("GET", "/files/download/data.png", action="stall", times=1)
        out = tmp_path / "data.png"
        with pytest.raises(APITimeoutError, match=r"no (data|progress) for 0\.5s"):  # not "0s"
            client.files.download("data.png", out)
        assert not out.exists()
        assert list(tmp_path.iterdir()) == []
        # The stall was one-off: the next download completes.
        assert client.files.download("data.png", out).read_bytes() == content


@pytest.mark.timeout(30)
def test_silent_download_server_times_out(emu, tmp_path):
    """No answer at all for longer than read_timeout (and timeout) ends the download."""
    with emu.client(max_retries=0, read_timeout=0.5, timeout=1.0) as client:
        client.files.upload_base64("late.txt", b"late")
        emu.inject("GET", "/files/download/late.txt", delay=4.0, times=1)
        start = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.files.download("late.txt", tmp_path / "late.txt")
        assert time.monotonic() - start < 3.5
    assert not (tmp_path / "late.txt").exists()


def test_delete(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "gone.txt", "x"))
    record = client.files.delete("gone.txt")
    assert record.file_id == "gone.txt" and record.is_valid is True
    assert [f.file_id for f in client.files.list()] == []
    with pytest.raises(NotFoundError):
        client.files.metadata("gone.txt")
    with pytest.raises(NotFoundError) as info:
        client.files.delete("gone.txt")
    assert info.value.code == "file_not_found"
    # The name is free again.
    assert client.files.upload(make(tmp_path, "gone.txt", "again")).file_id == "gone.txt"


@pytest.mark.parametrize("name", ["my notes é.txt", "50%+off #1.txt", "a?b=c&d.txt"])
def test_names_that_need_escaping(client, tmp_path, name):
    client.files.upload(make(tmp_path, name, "content"))
    assert client.files.metadata(name).file_id == name
    assert client.files.download(name, tmp_path / "out.txt").read_text() == "content"
    assert client.files.delete(name).file_id == name


@pytest.mark.parametrize("bad", ["", "a/b.txt", "..\\x.txt"])
def test_file_id_must_be_a_name(emu, client, tmp_path, bad):
    for call in (client.files.metadata, client.files.delete):
        with pytest.raises(InvalidArgumentError, match="file_id"):
            call(bad)
    with pytest.raises(InvalidArgumentError):
        client.files.download(bad, tmp_path / "x")
    assert emu.requests == []


def test_another_organization_cannot_see_the_files(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "private.txt", "org one only"))
    client.files.upload(make(tmp_path, "marker.txt", "ALBATROSS-3"))
    other_key = emu.new_api_key()
    with emu.client(api_key=other_key) as other:
        assert list(other.files.list()) == []
        assert other.files.info()["num_files"] == 0
        with pytest.raises(NotFoundError):
            other.files.metadata("private.txt")
        with pytest.raises(NotFoundError):
            other.files.download("private.txt", tmp_path / "stolen.txt")
        with pytest.raises(NotFoundError):
            other.files.delete("private.txt")
        # Names are per organization: the same name is free there.
        assert other.files.upload(make(tmp_path, "private.txt", "org two")).file_id == "private.txt"
        with pytest.raises(APIStatusError) as info:
            other.query(REASONER, "read", file_ids=["marker.txt"])
        assert 400 <= info.value.status < 500
        assert "ALBATROSS-3" not in str(info.value)
    assert client.files.metadata("private.txt").num_bytes == len("org one only")
    assert not (tmp_path / "stolen.txt").exists()


def test_same_organization_keys_share_files(emu, client, tmp_path):
    client.files.upload(make(tmp_path, "shared.txt", "x"))
    org = emu.requests[-1].org
    with emu.client(api_key=emu.new_api_key(org=org)) as colleague:
        assert [f.file_id for f in colleague.files.list()] == ["shared.txt"]


def test_empty_file_round_trips(client, tmp_path):
    client.files.upload(make(tmp_path, "empty.txt", b""))
    assert client.files.metadata("empty.txt").num_bytes == 0
    out = client.files.download("empty.txt", tmp_path / "back.txt")
    assert out.read_bytes() == b""


def test_progress_callbacks_end_at_the_total(client, tmp_path):
    content = os.urandom(2 * 1024 * 1024)
    path = make(tmp_path, "big.png", content)
    seen_up: list[tuple[int, int]] = []
    client.files.upload(path, on_progress=lambda done, total: seen_up.append((done, total)))
    assert seen_up and seen_up[-1] == (len(content), len(content))
    assert [d for d, _ in seen_up] == sorted(d for d, _ in seen_up)
    seen_down: list[tuple[int, int]] = []
    out = client.files.download("big.png", tmp_path / "copy.png", on_progress=lambda d, t: seen_down.append((d, t)))
    assert out.read_bytes() == content
    assert seen_down and seen_down[-1] == (len(content), len(content))


def test_progress_arguments_are_checked(emu, client, tmp_path, monkeypatch):
    path = make(tmp_path, "a.txt", "x")
    with pytest.raises(InvalidArgumentError, match="on_progress"):
        client.files.upload(path, on_progress="not callable")  # type: ignore[arg-type]
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)
    monkeypatch.setitem(__import__("sys").modules, "tqdm.auto", None)
    with pytest.raises(InvalidArgumentError, match="tqdm"):
        client.files.upload(path, progress=True)
    assert emu.requests == []


def test_download_of_a_file_deleted_meanwhile_is_not_found(client, tmp_path):
    client.files.upload(make(tmp_path, "tmp.txt", "x"))
    client.files.delete("tmp.txt")
    with pytest.raises(NotFoundError):
        client.files.download("tmp.txt", tmp_path / "tmp-copy.txt")
    assert not (tmp_path / "tmp-copy.txt").exists()
