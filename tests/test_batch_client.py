"""The batch client on its own (the emulator's batch surface is not built yet): inputs checked
before sending, both list styles read by one pager, wait with a failed job and with failed
inputs, cancel with and without ok_if_terminal."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import pytest

import sensorium
from _fake_server import FakeServer, response
from _helpers import run_on
from sensorium.errors import (
    APIResponseValidationError,
    ConflictError,
    InvalidArgumentError,
    JobFailedError,
    NotFoundError,
)
from sensorium.types import BatchEvent, BatchJob, Checkpoint, FileRecord

JOB = {"id": "job_1", "name": "line 3", "pipeline_type": "batch", "pipeline_key": "machine-state-classification",
       "pipeline_version": "1.2.0", "status": "RUNNING", "created_at": "2026-11-23T10:00:00Z", "started_at": None,
       "completed_at": None, "failed_at": None}


@pytest.fixture
def call(client_kind: str) -> Callable[..., Any]:
    return lambda base_url, operation: run_on(client_kind, operation, api_key="sk-test", base_url=base_url,
                                              max_retries=0)


def routes(table: dict[str, Callable[[dict[str, list[str]]], Any]]) -> Callable[[bytes], list[Any]]:
    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
        parts = urlsplit(target)
        answer = table.get(f"{method} {parts.path}")
        if answer is None:
            return [response(404, b'{"code": "NOT_FOUND", "message": "Job not found.", "error_uid": "err-1"}')]
        status, body = answer(parse_qs(parts.query))
        return [response(status, json.dumps(body).encode())]

    return script


def test_inputs_take_every_form_and_are_checked_before_sending(emu, call):
    with FakeServer(routes({"POST /v0.5/batch/jobs": lambda q: (201, JOB)})) as server:
        job = call(server.base_url, lambda c: c.batch.jobs.create(
            "line 3", pipeline_key="machine-state-classification",
            inputs={"worker.inference": ["a.csv", FileRecord(file_id="b.csv")],
                    "worker.n_shots": [{"file_id": "idle.csv", "metadata": {"class": "idle"}}],
                    "worker.fine_tune_checkpoint": Checkpoint(id="ckp_1")}))
        # A checkpoint id as a string, on the checkpoint port: it was sent as `{file_id}` (a 400).
        call(server.base_url, lambda c: c.batch.jobs.create(
            "line 3", pipeline_key="machine-state-classification",
            inputs={"worker.inference": ["ckp_named_file.csv"], "worker.fine_tune_checkpoint": "ckp_2"}))
        sent, by_id = (json.loads(body) for body in server.bodies[:2])
    assert isinstance(job, BatchJob) and job.pipeline_version == "1.2.0"
    assert sent["inputs"] == {"worker.inference": [{"file_id": "a.csv"}, {"file_id": "b.csv"}],
                              "worker.n_shots": [{"file_id": "idle.csv", "metadata": {"class": "idle"}}],
                              "worker.fine_tune_checkpoint": [{"kind": "checkpoint", "checkpoint_id": "ckp_1"}]}
    assert sent["pipeline_type"] == "batch"
    assert by_id["inputs"] == {"worker.inference": [{"file_id": "ckp_named_file.csv"}],
                               "worker.fine_tune_checkpoint": [{"kind": "checkpoint", "checkpoint_id": "ckp_2"}]}
    with emu.client() as client:
        for bad in ({}, {"worker.inference": [3]}, {"worker.inference": [f"f{i}.csv" for i in range(10_001)]}):
            with pytest.raises(InvalidArgumentError) as info:
                client.batch.jobs.create("x", pipeline_key="k", inputs=bad)
            assert info.value.argument == "inputs"
    assert emu.requests == []


def test_one_pager_reads_both_list_styles(call):
    events = [{"id": i, "event_type": "inference.success", "level": "INFO", "message": f"m{i}",
               "created_at": "2026-11-23T10:00:00Z"} for i in range(5)]

    def offset_style(q: dict[str, list[str]]) -> Any:
        offset = int(q.get("offset", ["0"])[0])
        return 200, {"job_id": "job_1", "total": 5, "offset": offset, "limit": 2, "events": events[offset:offset + 2]}

    def cursor_style(q: dict[str, list[str]]) -> Any:
        start = int(q.get("cursor", ["0"])[0])
        more = start + 2 < 5
        return 200, {"data": events[start:start + 2], "has_more": more, "next_cursor": str(start + 2) if more else None}

    for style in (offset_style, cursor_style):
        with FakeServer(routes({"GET /v0.5/batch/jobs/job_1/events": style})) as server:
            got = call(server.base_url, lambda c: c.batch.jobs.events("job_1"))
        assert [e.message for e in got] == ["m0", "m1", "m2", "m3", "m4"], style.__name__
        assert all(isinstance(e, BatchEvent) for e in got)


def test_an_offset_style_page_with_its_counts_as_text_keeps_its_style(call):
    """`total: "5", offset: "0"` lost the offset style: the list ended after its first page."""
    events = [{"id": i, "event_type": "inference.success", "message": f"m{i}"} for i in range(5)]

    def offset_style(q: dict[str, list[str]]) -> Any:
        offset = int(q.get("offset", ["0"])[0])
        return 200, {"job_id": "job_1", "total": "5", "offset": str(offset), "limit": 2,
                     "events": events[offset:offset + 2]}

    with FakeServer(routes({"GET /v0.5/batch/jobs/job_1/events": offset_style})) as server:
        got = call(server.base_url, lambda c: c.batch.jobs.events("job_1"))
    assert [e.message for e in got] == ["m0", "m1", "m2", "m3", "m4"]


@pytest.mark.parametrize("total, offset", [("five", 0), (5, "-1"), (5, 1.5), (5, [0]), (True, 0)])
def test_an_offset_style_page_with_counts_of_the_wrong_type_is_refused(call, total, offset):
    page = {"job_id": "job_1", "total": total, "offset": offset, "limit": 2, "events": [{"id": 1}]}
    with FakeServer(routes({"GET /v0.5/batch/jobs/job_1/events": lambda q: (200, page)})) as server:
        with pytest.raises(APIResponseValidationError, match="total|offset"):
            call(server.base_url, lambda c: c.batch.jobs.events("job_1"))


def test_items_with_whole_number_ids_are_given_once_in_either_style(call):
    """Batch events have whole-number ids: an offset-style list that grew while walked (an event
    moving down past a page boundary), or a cursor page repeating one, gave them twice."""
    def offset_style(q: dict[str, list[str]]) -> Any:
        offset = int(q.get("offset", ["0"])[0])
        ids = {0: [0, 1], 2: [1, 2], 4: [3]}[offset]  # 1 moved down into the second page
        return 200, {"total": 5, "offset": offset, "limit": 2, "events": [{"id": i, "message": f"m{i}"} for i in ids]}

    def cursor_style(q: dict[str, list[str]]) -> Any:
        start = int(q.get("cursor", ["0"])[0])
        ids = {0: [0, 1], 2: [1, 2, 3]}[start]
        return 200, {"data": [{"id": i, "message": f"m{i}"} for i in ids], "has_more": start == 0,
                     "next_cursor": "2" if start == 0 else None}

    for style in (offset_style, cursor_style):
        with FakeServer(routes({"GET /v0.5/batch/jobs/job_1/events": style})) as server:
            got = call(server.base_url, lambda c: c.batch.jobs.events("job_1"))
        assert [e.id for e in got] == [0, 1, 2, 3], style.__name__


def test_wait_raises_for_a_failed_job_and_warns_for_failed_inputs(call):
    failed = {**JOB, "status": "FAILED", "errors": ["Job failed: BackoffLimitExceeded"]}
    with FakeServer(routes({"GET /v0.5/batch/jobs/job_1": lambda q: (200, failed)})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, lambda c: c.batch.jobs.wait("job_1"))
    assert info.value.errors == ["Job failed: BackoffLimitExceeded"]
    done = {**JOB, "status": "COMPLETED"}
    failures = {"data": [{"id": 7, "event_type": "inference.failed", "level": "FAILED", "input_id": "inp_2",
                          "message": "FAILED Processing failed for b.csv"}], "has_more": False, "next_cursor": None}
    table = {"GET /v0.5/batch/jobs/job_1": lambda q: (200, done),
             "GET /v0.5/batch/jobs/job_1/events": lambda q: (200, failures if q.get("level") == ["FAILED"] else {})}
    with FakeServer(routes(table)) as server:
        with pytest.warns(UserWarning, match="1 failed input"):
            job = call(server.base_url, lambda c: c.batch.jobs.wait("job_1"))
        assert job.status == "COMPLETED"
        assert call(server.base_url, lambda c: c.batch.jobs.failed_inputs("job_1")) == [
            {"input_id": "inp_2", "message": "FAILED Processing failed for b.csv"}]


@pytest.mark.parametrize("status", [500, 404])
def test_wait_returns_the_completed_job_when_its_events_cannot_be_read(call, status):
    """The failed-inputs check only warns: its failure replaced the record with the error. A 404
    is a platform older than 1.1.0, which has no batch events."""
    done = {**JOB, "status": "COMPLETED"}
    table = {"GET /v0.5/batch/jobs/job_1": lambda q: (200, done),
             "GET /v0.5/batch/jobs/job_1/events": lambda q: (status, {"code": "x", "message": "no events here"})}
    with FakeServer(routes(table)) as server:
        with pytest.warns(UserWarning, match="failed inputs could not be checked") as warned:
            job = call(server.base_url, lambda c: c.batch.jobs.wait("job_1", timeout=60))
    assert isinstance(job, BatchJob) and job.status == "COMPLETED"
    (warning,) = [w for w in warned if "could not be checked" in str(w.message)]
    assert f"answered {status}" in str(warning.message), "the warning says why"


def test_the_failed_inputs_check_ends_with_the_waits_timeout(call):
    """The events list had no deadline: a slow feed held `wait(timeout=...)` past its timeout.
    The job did finish, so the record comes back, with the warning that the check ran out."""
    done = {**JOB, "status": "COMPLETED"}
    failures = {"data": [{"id": 7, "event_type": "inference.failed", "level": "FAILED", "input_id": "inp_2",
                          "message": "FAILED Processing failed for b.csv"}], "has_more": False, "next_cursor": None}

    def script(head: bytes) -> list[Any]:
        if b"/events" in head.split(b"\r\n")[0]:
            return [30.0, response(200, json.dumps(failures).encode())]  # answered long after the timeout
        return [response(200, json.dumps(done).encode())]

    with FakeServer(script) as server:
        with pytest.warns(UserWarning, match="failed inputs could not be checked") as warned:
            job = call(server.base_url, lambda c: c.batch.jobs.wait("job_1", timeout=1))
    assert job.status == "COMPLETED"
    assert not [w for w in warned if "1 failed input" in str(w.message)], "the slow answer was not awaited"
    assert any("timeout" in str(w.message) for w in warned)


def test_cancelling_a_wait_during_the_failed_inputs_check_still_cancels_it():
    """The check's failures become a warning; a cancellation is not one of them."""
    done = {**JOB, "status": "COMPLETED"}

    def script(head: bytes) -> list[Any]:
        if b"/events" in head.split(b"\r\n")[0]:
            return [30.0]
        return [response(200, json.dumps(done).encode())]

    async def main(base_url: str, server: FakeServer) -> None:
        async with sensorium.AsyncClient(api_key="sk-test", base_url=base_url, max_retries=0) as c:
            task = asyncio.ensure_future(c.batch.jobs.wait("job_1"))
            while not any(b"/events" in r for r in server.requests):
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    with FakeServer(script) as server:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "could not be checked" warning either
            asyncio.run(main(server.base_url, server))


def test_cancel_ok_if_terminal(call):
    conflict = (409, {"errors": [{"code": "conflict", "message": "Job already terminal."}]})
    table = {"POST /v0.5/batch/jobs/job_1/cancel": lambda q: conflict,
             "GET /v0.5/batch/jobs/job_1": lambda q: (200, {**JOB, "status": "COMPLETED"})}
    with FakeServer(routes(table)) as server:
        with pytest.raises(ConflictError):
            call(server.base_url, lambda c: c.batch.jobs.cancel("job_1"))
        assert call(server.base_url, lambda c: c.batch.jobs.cancel("job_1", ok_if_terminal=True)).status == "COMPLETED"
        with pytest.raises(NotFoundError) as info:
            call(server.base_url, lambda c: c.batch.jobs.cancel("job_2", ok_if_terminal=True))
    assert info.value.code == "NOT_FOUND", "the bare batch 404 object is read"
