"""Downloading every output of a job (``batch.jobs.download_outputs``; agent results take the same
path) against a scripted server: listing order, presigned URLs without the key and relative refs
with it, expired URLs listed afresh, names kept inside the folder, a failed file that costs the
others nothing, byte progress, and arguments refused before anything is sent."""

from __future__ import annotations

import json
import pickle
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import pytest

import sensorium
from _fake_server import FakeServer, response
from _helpers import run_on
from sensorium.errors import (
    APIResponseValidationError, DownloadError, InvalidArgumentError, NotFoundError, PermissionDeniedError, SensoriumError,
)


def content(name: str) -> bytes:
    return (f"timestamp,Prediction\n# {name}\n" + "2026-11-23T10:00:00Z,idle\n" * (len(name) * 40)).encode()


class Storage:
    """A job's output listing plus the storage its presigned URLs point into. URLs listed the
    first time for the names in ``expire`` answer 403 (expired); a second listing signs them
    afresh. ``broken`` names answer 404 for good."""

    def __init__(self, outputs: list[tuple[str, str]], expire: set[str] = frozenset(), broken: set[str] = frozenset()):
        self.outputs = outputs  # (output id, filename); a filename starting "rel:" is served by a relative ref
        self.expire, self.broken = set(expire), set(broken)
        self.listings = 0
        self.server = FakeServer(self.answer)

    def answer(self, head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
        parts = urlsplit(target)
        if parts.path == "/v0.5/batch/jobs/job_1/outputs":
            self.listings += 1
            return [response(200, json.dumps({"data": [self.record(i, n) for i, n in self.outputs],
                                              "has_more": False, "next_cursor": None}).encode())]
        name = parts.path.rsplit("/", 1)[-1]
        signature = parse_qs(parts.query).get("sig", [""])[0]
        if name in self.broken:
            return [response(404, b'{"code": "NOT_FOUND", "message": "gone", "error_uid": "err-1"}')]
        if signature == "old" and name in self.expire:
            return [response(403, b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>")]
        return [response(200, content(name))]

    def record(self, output_id: str, filename: str) -> dict[str, Any]:
        stored = filename.rsplit("/", 1)[-1].removeprefix("rel:")
        if filename.startswith("rel:"):
            ref = f"/batch/jobs/job_1/outputs/{output_id}/{stored}"
        else:
            sig = "old" if self.listings == 1 else "new"
            ref = f"http://127.0.0.1:{self.server.base_url.split(':')[2].split('/')[0]}/store/{stored}?sig={sig}"
        return {"id": output_id, "data": {"ref": ref, "filename": filename.removeprefix("rel:"),
                                          "num_bytes": len(content(stored))}, "expires_at": "2026-11-23T11:00:00Z"}

    def heads(self, path_start: str) -> list[bytes]:
        return [h for h in self.server.requests if h.split(b" ")[1].decode().startswith(path_start)]

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def _outputs_server(names: list[str], body: Callable[[bytes], bytes]) -> FakeServer:
    """A server listing one output per name (ids `out_1`, `out_2`..., refs `/files/download/f0`,
    `/files/download/f1`...) that answers each file with `body(the path asked for)`."""
    listing = {"data": [{"id": f"out_{i + 1}", "data": {"ref": f"/files/download/f{i}", "filename": name}}
                        for i, name in enumerate(names)], "has_more": False}

    def script(head: bytes) -> list[Any]:
        path = head.split(b" ")[1]
        return [response(200, json.dumps(listing).encode() if b"/outputs" in path else body(path))]

    return FakeServer(script)


@pytest.fixture
def call(client_kind: str) -> Callable[..., Any]:
    return lambda base_url, operation: run_on(client_kind, operation, api_key="sk-secret-key", base_url=base_url,
                                              max_retries=0)


def test_outputs_land_in_listing_order_with_expired_urls_fetched_afresh(call, tmp_path):
    outputs = [(f"out_{i}", f"pred_input{i:02d}_part_0.csv") for i in range(40)] + [("out_rel", "rel:summary.csv")]
    expired = {name for i, (_, name) in enumerate(outputs) if i % 3 == 0}
    with Storage(outputs, expire=expired) as storage:
        paths = call(storage.server.base_url,
                     lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "new" / "dir", concurrency=8))
        assert storage.listings == 2  # the expired ones were listed again, once
        presigned = storage.heads("/store/")
        relative = storage.heads("/v0.5/batch/jobs/job_1/outputs/out_rel/")
    names = [name.removeprefix("rel:") for _, name in outputs]
    assert paths == [tmp_path / "new" / "dir" / name for name in names]
    for path in paths:
        assert path.read_bytes() == content(path.name)
    assert sorted(p.name for p in (tmp_path / "new" / "dir").iterdir()) == sorted(names)  # no partial files
    assert len(presigned) == 40 + len(expired)
    assert not any(b"authorization" in h.lower() for h in presigned)  # the key never goes to storage
    assert relative and b"Bearer sk-secret-key" in relative[0]


def test_server_names_stay_in_the_folder_and_never_overwrite_each_other(call, tmp_path):
    outputs = [("out_a", "../../escape.csv"), ("out_b", "same.csv"), ("out_c", "nested/same.csv")]
    with Storage(outputs) as storage:
        paths = call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    assert [p.name for p in paths] == ["escape.csv", "same.csv", "same__out_c.csv"]
    assert all(p.parent == tmp_path for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["escape.csv", "same.csv", "same__out_c.csv"]


@pytest.mark.parametrize("size", [5_000, 6 * 1024 * 1024], ids=["in-memory", "streamed-to-disk"])
def test_a_server_named_file_replaces_a_link_in_the_folder_and_never_writes_through_it(client_kind, tmp_path, size):
    """A link the user keeps in the output folder (`latest.csv -> ../elsewhere/model-config.yaml`)
    had an output the server named `latest.csv` written through it: the bytes (and the temporary
    file) landed outside the folder, over the link's target; a dangling link created its target
    wherever it pointed. A name the server chose stays in the folder: the link itself is
    replaced by the downloaded file."""
    folder, elsewhere = tmp_path / "predictions", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (elsewhere / "model-config.yaml").write_text("precious: true\n")
    (folder / "latest.csv").symlink_to("../elsewhere/model-config.yaml")
    (folder / "gone.csv").symlink_to(elsewhere / "made-by-the-server.txt")
    (folder / "loop.csv").symlink_to("loop.csv")
    names = ["latest.csv", "gone.csv", "loop.csv"]
    with _outputs_server(names, lambda _: b"r" * size) as server:
        paths = run_on(client_kind, lambda c: c.batch.jobs.download_outputs("job_1", folder),
                       api_key="k", base_url=server.base_url, max_retries=0)
    assert paths == [folder / name for name in names]
    for path in paths:
        assert not path.is_symlink() and path.read_bytes() == b"r" * size
    assert [p.name for p in elsewhere.iterdir()] == ["model-config.yaml"], "nothing is written outside the folder"
    assert (elsewhere / "model-config.yaml").read_text() == "precious: true\n"
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


def test_windows_style_server_names_stay_in_the_folder_on_every_system(call, tmp_path):
    outputs = [("out_a", "..\\..\\Windows\\evil.dll"), ("out_b", "C:\\Users\\Public\\drive.csv"), ("out_c", "sub\\x.csv")]
    with Storage(outputs) as storage:
        paths = call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    assert [p.name for p in paths] == ["evil.dll", "drive.csv", "x.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drive.csv", "evil.dll", "x.csv"]


@pytest.mark.parametrize(
    "server_name, on_windows",
    [
        ("aux.csv", "_aux.csv"),  # a device name: opening it opens the device
        ("pred:stream.csv", "pred_stream.csv"),  # an alternate data stream
        ("C:drive-relative.csv", "C_drive-relative.csv"),  # a drive, relative to its current folder
        ('a<b>c"d|e?f*.csv', "a_b_c_d_e_f_.csv"),
        ("trailing. ", "trailing"),  # Windows drops trailing dots and spaces
        ("ok.csv", "ok.csv"),
    ],
)
def test_names_windows_cannot_hold_are_made_safe_there(server_name, on_windows):
    from sensorium._downloads import _local_name

    assert _local_name(server_name, windows=True) == on_windows
    assert _local_name(server_name, windows=False) == server_name


def test_a_file_that_fails_for_good_costs_the_others_nothing(call, tmp_path):
    outputs = [(f"out_{i}", f"part_{i}.csv") for i in range(6)]
    with Storage(outputs, expire={"part_2.csv"}, broken={"part_4.csv"}) as storage:
        with pytest.raises(NotFoundError):
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"part_{i}.csv" for i in (0, 1, 2, 3, 5)]


def test_a_failed_storage_download_names_its_url_without_the_signature(call, tmp_path):
    """A presigned URL's query is its signature: whoever reads a message or a log could use it."""
    with Storage([("out_1", "a.csv")], broken={"a.csv"}) as storage:
        with pytest.raises(NotFoundError) as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    texts = [str(info.value), str(info.value.__cause__), getattr(info.value, "url", "") or ""]
    assert any("/store/a.csv" in t for t in texts), texts
    assert not any("sig=" in t for t in texts), texts


def test_a_storage_download_cut_off_names_its_url_without_the_signature(client_kind, tmp_path):
    from sensorium.errors import APIConnectionError

    def script(head: bytes) -> list[Any]:
        if head.startswith(b"GET /store/"):
            return [response(200, b"x" * 100, length=1000)]
        ref = server.base_url.rsplit("/v0.5", 1)[0] + "/store/a.csv?sig=secret"
        listing = {"data": [{"id": "o1", "data": {"ref": ref, "filename": "a.csv"}}], "has_more": False}
        return [response(200, json.dumps(listing).encode())]

    with FakeServer(script) as server:
        with pytest.raises(APIConnectionError) as info:
            run_on(client_kind, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path),
                   api_key="k", base_url=server.base_url, max_retries=0)
    assert "/store/a.csv" in str(info.value) and "sig=" not in str(info.value), str(info.value)


def test_a_body_without_a_length_that_stops_short_of_the_listed_size_is_not_kept(client_kind, tmp_path):
    """A body the server ends by closing the connection has no length to check: only the size
    the listing gave shows it was cut."""
    from sensorium.errors import APIConnectionError

    def script(head: bytes) -> list[Any]:
        if head.startswith(b"GET /store/"):
            return [b"HTTP/1.0 200 OK\r\nContent-Type: text/csv\r\n\r\n" + b"x" * 400]
        ref = server.base_url.rsplit("/v0.5", 1)[0] + "/store/a.csv"
        listing = {"data": [{"id": "o1", "data": {"ref": ref, "filename": "a.csv", "num_bytes": size}}], "has_more": False}
        return [response(200, json.dumps(listing).encode())]

    size = 1000
    with FakeServer(script) as server:
        with pytest.raises(APIConnectionError, match="after 400 bytes, without a length, where the listing gave 1000"):
            run_on(client_kind, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path),
                   api_key="k", base_url=server.base_url, max_retries=0)
        assert list(tmp_path.iterdir()) == []
        size = 400  # the whole file, as listed
        paths = run_on(client_kind, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path),
                       api_key="k", base_url=server.base_url, max_retries=0)
    assert [p.read_bytes() for p in paths] == [b"x" * 400]


def test_a_url_that_stays_refused_raises_after_one_fresh_listing(call, tmp_path):
    with Storage([("out_1", "a.csv")], expire={"a.csv"}) as storage:
        storage.record = _always_old(storage)  # type: ignore[method-assign]
        with pytest.raises(PermissionDeniedError):
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
        assert storage.listings == 2
    assert list(tmp_path.iterdir()) == []


def _always_old(storage: Storage) -> Callable[[str, str], dict[str, Any]]:
    plain = storage.record

    def record(output_id: str, filename: str) -> dict[str, Any]:
        listed = plain(output_id, filename)
        listed["data"]["ref"] = listed["data"]["ref"].replace("sig=new", "sig=old")
        return listed

    return record


def test_byte_progress_counts_every_file_once(call, tmp_path):
    outputs = [(f"out_{i}", f"p{i}.csv") for i in range(10)]
    seen: list[tuple[int, int]] = []
    with Storage(outputs, expire={"p3.csv", "p7.csv"}) as storage:
        call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs(
            "job_1", tmp_path, on_progress=lambda done, total: seen.append((done, total))))
    everything = sum(len(content(f"p{i}.csv")) for i in range(10))
    assert seen, "no progress was reported"
    assert all(done <= total for done, total in seen)
    # The second round (the two expired files afresh) reports its own bytes.
    assert seen[-1] == (len(content("p3.csv")) + len(content("p7.csv")),) * 2
    assert max(total for _, total in seen) == everything


@pytest.mark.parametrize("concurrency, error", [(0, InvalidArgumentError), (257, InvalidArgumentError),
                                                (True, TypeError), ("8", TypeError)])
def test_bad_concurrency_is_refused_before_sending(call, tmp_path, concurrency, error):
    with Storage([("out_1", "a.csv")]) as storage:
        with pytest.raises(error, match="concurrency"):
            call(storage.server.base_url,
                 lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "x", concurrency=concurrency))
        assert storage.server.requests == []
    assert not (tmp_path / "x").exists()


def test_a_progress_bar_without_tqdm_is_refused_before_sending(call, tmp_path, monkeypatch):
    """Without tqdm, `progress=True` listed the outputs (a GET) before saying it needs tqdm; the
    README promises argument checks before anything is read or sent."""
    monkeypatch.setitem(__import__("sys").modules, "tqdm", None)  # as if not installed
    monkeypatch.setitem(__import__("sys").modules, "tqdm.auto", None)
    with Storage([("out_1", "a.csv")]) as storage:
        with pytest.raises(InvalidArgumentError, match="tqdm"):
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "x", progress=True))
        assert storage.server.requests == []
    assert not (tmp_path / "x").exists()


def test_a_renamed_duplicate_never_takes_a_name_another_output_has(call, tmp_path):
    """`a.csv` listed twice: the second became `a__out_3.csv` without a look at the other names,
    and overwrote the output the server named so. Names are compared as a case-insensitive file
    system sees them (`A.CSV` is `a.csv` there), so a listing gets the same files everywhere."""
    outputs = [("out_1", "a.csv"), ("out_2", "a__out_3.csv"), ("out_3", "a.csv"), ("out_4", "A.CSV"),
               ("out_5", "a__out_3.csv")]
    with Storage(outputs) as storage:
        paths = call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    names = [p.name for p in paths]
    assert names[:2] == ["a.csv", "a__out_3.csv"], "a name the server gave is kept"
    assert len({n.casefold() for n in names}) == 5 and sorted(names) == sorted(p.name for p in tmp_path.iterdir())
    stored = {name: content(name) for _, name in outputs}
    for (_, listed), path in zip(outputs, paths):
        assert path.read_bytes() == stored[listed], f"{path.name} holds another output's bytes"


def test_an_output_without_a_ref_or_name_costs_only_that_file(call, tmp_path):
    """A listed output with no ref (not ready yet) stopped the whole download before anything was
    fetched, blamed on the caller's `job_id`. It is the server's data: that file fails as an
    APIResponseValidationError naming it, and the others are written."""
    with Storage([("out_1", "a.csv"), ("out_2", "b.csv"), ("out_3", "c.csv")]) as storage:
        plain = storage.record
        unusable = {"out_1": {"filename": "a.csv", "ref": None}, "out_3": {"ref": plain("out_3", "c.csv")["data"]["ref"]}}
        storage.record = lambda i, n: {**plain(i, n), "data": unusable[i]} if i in unusable else plain(i, n)  # type: ignore[method-assign]
        with pytest.raises(APIResponseValidationError, match="out_1") as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "y"))
    assert sorted(p.name for p in (tmp_path / "y").iterdir()) == ["b.csv"]
    assert info.value.written == [tmp_path / "y" / "b.csv"]
    assert list(info.value.failed) == ["out_1", "out_3"] and "2 of 3" in str(info.value)
    assert all(isinstance(e, APIResponseValidationError) for e in info.value.failed.values())
    assert "ref" in str(info.value.failed["out_1"]) and "filename" in str(info.value.failed["out_3"])


@pytest.mark.parametrize("data, field", [
    ({"filename": 123}, "data.filename"), ({"filename": ["a.csv"]}, "data.filename"), ({"ref": 5}, "data.ref"),
    ({"ref": {"u": 1}}, "data.ref"), ({"ref": ["/files/download/a.csv"]}, "data.ref"), ("hello", "data"),
    (["x"], "data"),
], ids=["filename-int", "filename-list", "ref-int", "ref-dict", "ref-list", "data-str", "data-list"])
def test_an_output_whose_fields_have_the_wrong_json_type_costs_only_that_file(call, tmp_path, data, field):
    """A `filename` or `ref` of another JSON type, or a `data` that is no object, raised a bare
    TypeError or AttributeError from inside the SDK, and nothing was downloaded. It is the
    server's data, as a missing name is: that file fails with a validation error naming the field,
    and the others are written."""
    with Storage([("out_1", "a.csv"), ("out_2", "b.csv")]) as storage:
        plain = storage.record

        def record(output_id: str, filename: str) -> dict[str, Any]:
            listed = plain(output_id, filename)
            if output_id == "out_1":
                listed["data"] = {**listed["data"], **data} if isinstance(data, dict) else data
            return listed

        storage.record = record  # type: ignore[method-assign]
        with pytest.raises(APIResponseValidationError, match="out_1") as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "y"))
    assert info.value.written == [tmp_path / "y" / "b.csv"]
    assert sorted(p.name for p in (tmp_path / "y").iterdir()) == ["b.csv"]
    assert list(info.value.failed) == ["out_1"]
    failure = info.value.failed["out_1"]
    assert isinstance(failure, APIResponseValidationError) and repr(field) in str(failure), str(failure)
    assert "out_1" in (failure.body or ""), "the record's JSON is kept"


def test_a_fresh_listing_with_a_record_of_the_wrong_shape_keeps_the_old_ref(call, tmp_path):
    """An expired URL is listed afresh; a record of that listing whose `ref` is now of another
    type gives no fresh URL (the old one is tried again) rather than a bare TypeError."""
    with Storage([("out_1", "a.csv"), ("out_2", "b.csv")], expire={"b.csv"}) as storage:
        plain = storage.record

        def record(output_id: str, filename: str) -> dict[str, Any]:
            listed = plain(output_id, filename)
            if storage.listings > 1 and output_id == "out_2":
                listed["data"]["ref"] = 7
            return listed

        storage.record = record  # type: ignore[method-assign]
        with pytest.raises(PermissionDeniedError) as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
        assert storage.listings == 2
    assert info.value.written == [tmp_path / "a.csv"] and list(info.value.failed) == ["out_2"]


@pytest.mark.parametrize("name", ["..", ".", "nested/..", "/"])
def test_a_server_name_that_names_no_file_costs_only_that_file(call, tmp_path, name):
    """`..` as a listed filename gave a bare OSError (the folder's parent is a folder); it is the
    server's data, so that output fails with a validation error naming it and the rest are written."""
    with Storage([("out_1", name), ("out_2", "b.csv")]) as storage:
        with pytest.raises(APIResponseValidationError, match="out_1.*names no file") as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path / "z"))
    assert info.value.written == [tmp_path / "z" / "b.csv"]
    assert sorted(p.name for p in (tmp_path / "z").iterdir()) == ["b.csv"]


def test_every_failure_is_told_and_the_written_files_listed(call, tmp_path):
    """Two files failing for good: only the first was raised, with nothing saying a second was
    missing or which files were written. The first failure's class is kept (its catchers still
    catch it); its message counts and names every failed file, `written` and `failed` list them."""
    outputs = [(f"out_{i}", f"part_{i}.csv") for i in range(5)]
    with Storage(outputs, broken={"part_1.csv", "part_3.csv"}) as storage:
        with pytest.raises(NotFoundError) as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    error = info.value
    assert "2 of 5" in str(error) and "part_1.csv" in str(error) and "part_3.csv" in str(error)
    assert error.message == str(error) and error.status == 404
    assert error.written == [tmp_path / f"part_{i}.csv" for i in (0, 2, 4)]
    assert list(error.failed) == ["out_1", "out_3"] and all(isinstance(e, NotFoundError) for e in error.failed.values())
    assert not any("of 5" in str(e) for e in error.failed.values()), "each failure is kept as it came"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"part_{i}.csv" for i in (0, 2, 4)]
    # A worker's error reaches its caller pickled (Dask, multiprocessing): the outcome goes with it.
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and isinstance(again, NotFoundError) and isinstance(again, DownloadError)
    assert str(again) == str(error) and again.written == error.written and again.status == 404
    assert list(again.failed) == ["out_1", "out_3"] and all(isinstance(e, NotFoundError) for e in again.failed.values())


def test_a_multi_file_failure_is_a_download_error_and_keeps_its_class(call, tmp_path):
    """`written` and `failed` were set at runtime on whatever class the first failure had and
    declared nowhere, so typed code could not reach them. The error raised is now the first
    failure's class made a DownloadError too (which declares them): `except NotFoundError` and
    `except DownloadError` both catch it."""
    with Storage([("out_1", "a.csv"), ("out_2", "b.csv")], broken={"a.csv"}) as storage:
        with pytest.raises(DownloadError) as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    error = info.value
    assert isinstance(error, NotFoundError) and error.status == 404 and error.code == "NOT_FOUND"
    assert type(error).__name__ == "NotFoundError" and repr(error).startswith("NotFoundError(")
    assert error.written == [tmp_path / "b.csv"] and list(error.failed) == ["out_1"]
    assert not isinstance(error.failed["out_1"], DownloadError), "each failure is kept as it came"
    assert isinstance(pickle.loads(pickle.dumps(error)), DownloadError)


def test_an_error_before_any_file_is_fetched_is_not_a_download_error(call, tmp_path):
    """The docstring's recovery example caught SensoriumError and read `e.written`: an unknown job
    (404 on the listing) raised AttributeError from inside the handler. Nothing was downloaded, so
    that error is not a DownloadError; the documented `except DownloadError` lets it through."""
    with Storage([], broken={"outputs"}) as storage:
        with pytest.raises(NotFoundError) as info:
            try:
                call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_2", tmp_path / "p"))
            except DownloadError as e:  # the docstring's handler
                print(len(e.written), "written;", list(e.failed), "to fetch again")
    assert not isinstance(info.value, DownloadError) and isinstance(info.value, SensoriumError)
    assert not (tmp_path / "p").exists() or list((tmp_path / "p").iterdir()) == []


def test_a_file_system_failure_stays_an_oserror_with_its_errno(call, tmp_path):
    """A file that cannot be written (its name is taken by a folder) fails alone: the error is
    the OSError subclass with its errno, and a DownloadError listing the file written."""
    (tmp_path / "a.csv").mkdir()
    (tmp_path / "a.csv" / "keep").write_text("x")
    with Storage([("out_1", "a.csv"), ("out_2", "b.csv")]) as storage:
        with pytest.raises(OSError) as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path))
    error = info.value
    assert isinstance(error, DownloadError) and error.errno is not None
    assert error.written == [tmp_path / "b.csv"] and list(error.failed) == ["out_1"]
    assert "1 of 2" in str(error) and str(error.errno) in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and again.errno == error.errno and again.written == error.written
    assert isinstance(again.failed["out_1"], OSError)


def test_an_empty_directory_is_refused_not_read_as_the_current_one(call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Storage([("out_1", "a.csv")]) as storage:
        with pytest.raises(InvalidArgumentError, match="directory") as info:
            call(storage.server.base_url, lambda c: c.batch.jobs.download_outputs("job_1", ""))
        assert storage.server.requests == []
    assert info.value.argument == "directory" and list(tmp_path.iterdir()) == []



_HANGING_DOWNLOAD = r"""
import sys, sensorium
client = sensorium.Client(api_key="k", base_url=sys.argv[1], read_timeout=120, max_retries=0)
client.files.download("big.csv", sys.argv[2])
"""


def _partials(folder: Any) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".sensorium-download-"))


def _wait_for_partial(folder: Any, child: Any) -> list[str]:
    import time

    deadline = time.monotonic() + 60  # a generous bound on the child's start-up, not a measurement
    while not _partials(folder):
        assert child.poll() is None, "the child download ended early"
        assert time.monotonic() < deadline, "the child never started writing"
        time.sleep(0.05)
    return _partials(folder)


_DOWNLOAD_INTO = r"""
import sys, sensorium
with sensorium.Client(api_key="k", base_url=sys.argv[1], max_retries=0) as client:
    client.files.download("small.txt", sys.argv[2])
"""


def test_a_listed_name_like_a_download_partial_is_renamed_and_survives_the_next_download(client_kind, tmp_path):
    """An output listed as `.sensorium-download-q1.partial` was written under that name, and the
    next process to download into the folder deleted it as a dead download's temporary file. The
    prefix is sensorium's own: such a name is renamed (with the output's id, as a duplicate is)."""
    import subprocess
    import sys

    names = [".sensorium-download-q1.partial", ".sensorium-download-", "sensorium-download-q1__out_1.partial"]
    with _outputs_server(names, lambda ref: ref.rsplit(b"/", 1)[-1]) as server:
        paths = run_on(client_kind, lambda c: c.batch.jobs.download_outputs("job_1", tmp_path),
                       api_key="k", base_url=server.base_url, max_retries=0)
        assert not any(p.name.startswith(".sensorium-download-") for p in paths), paths
        assert len({p.name for p in paths}) == 3 and paths[2].name == names[2], "a name the server gave is kept"
        assert all("out_" in p.name for p in paths[:2])
        subprocess.run([sys.executable, "-c", _DOWNLOAD_INTO, server.base_url, str(tmp_path)], check=True, timeout=120)
    assert [p.read_bytes() for p in paths] == [b"f0", b"f1", b"f2"], "the next download removed none of them"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in paths] + ["small.txt"])


def test_partials_of_killed_downloads_are_removed_and_live_ones_kept(tmp_path):
    """A download killed with SIGKILL cannot remove its temporary file; the next download into
    that folder does, but never the one a live download (another process) is writing."""
    import signal
    import subprocess
    import sys

    def script(head: bytes) -> list[Any]:
        if b"/files/download/big.csv" in head:
            return [response(200, b"x" * (8 << 20), length=64 << 20), 120.0]
        return [response(200, b"small")]

    with FakeServer(script) as server:
        killed, live = tmp_path / "killed", tmp_path / "live"
        killed.mkdir()
        live.mkdir()
        children = []
        try:
            for folder in (killed, live):
                children.append(subprocess.Popen([sys.executable, "-c", _HANGING_DOWNLOAD, server.base_url, str(folder)]))
                _wait_for_partial(folder, children[-1])
            children[0].send_signal(signal.SIGKILL)
            children[0].wait(timeout=30)
            assert len(_partials(killed)) == 1
            live_partial = _partials(live)
            with sensorium.Client(api_key="k", base_url=server.base_url) as client:
                client.files.download("small.txt", killed)
                client.files.download("small.txt", live)
            assert _partials(killed) == [], "the dead download's file is gone"
            assert _partials(live) == live_partial, "the live download's file is kept"
            assert children[1].poll() is None
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait(timeout=30)
