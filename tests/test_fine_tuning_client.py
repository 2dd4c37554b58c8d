"""The fine-tuning client and ``client.jobs`` on their own (the emulator's fine-tuning surface is
not built yet): the method and file helpers and the shapes refused locally, the `/v0.6` paths,
``wait`` with both spellings of finished and a failed job, and literal records from the spec's
table."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import pytest

import sensorium
from _helpers import run_on
from _fake_server import FakeServer, response
from sensorium import fine_tuning as ft
from sensorium.errors import APIResponseValidationError, InvalidArgumentError, JobFailedError
from sensorium.types import BatchJob, Checkpoint, FineTuningJob

JOB = {"object": "fine_tuning.job", "id": "ftj_1", "name": "tone", "model": "newton", "created_at": 1764000000,
       "org_id": "org_1", "status": "RUNNING", "outcome": None, "training_files": ["t.jsonl"], "validation_files": [],
       "errors": [], "checkpoint_id": None, "fine_tuned_model": None, "finished_at": None, "seed": 7,
       "user_provided_suffix": "x"}


@pytest.fixture
def call(client_kind: str) -> Callable[..., Any]:
    return lambda base_url, operation: run_on(client_kind, operation, api_key="sk-test", base_url=base_url,
                                              max_retries=0)


def routes(table: dict[str, Callable[[], Any]]) -> Callable[[bytes], list[Any]]:
    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
        answer = table.get(f"{method} {urlsplit(target).path}")
        body = answer() if answer else {"code": "not_found", "message": "?", "error_uid": "err-1"}
        return [response(200 if answer else 404, json.dumps(body).encode())]

    return script


def test_helpers_build_the_spec_shapes():
    assert ft.lora(batch_size=8, learning_rate_multiplier=0.5, n_epochs=3) == {
        "type": "lora", "lora": {"hyperparameters": {"batch_size": 8, "learning_rate_multiplier": 0.5, "n_epochs": 3}}}
    assert ft.head(n_epochs=5, window_size=512, step_size=256, data_columns=["a", "b"]) == {
        "type": "head", "head": {"hyperparameters": {"batch_size": "auto", "n_epochs": 5},
                                 "reader": {"data_columns": ["a", "b"], "step_size": 256, "window_size": 512}}}
    knn = ft.knn(n_neighbors=5, metric="cosine", normalize_embeddings=True)
    assert knn["type"] == "knn" and knn["knn"]["hyperparameters"]["n_neighbors"] == 5
    assert ft.plain("t.jsonl", format="jsonl") == {"type": "plain", "file_id": "t.jsonl", "format": "jsonl"}
    assert ft.n_shot("idle.csv", "idle") == {"type": "n_shot", "file_id": "idle.csv", "label": "idle"}


@pytest.mark.parametrize("build, argument", [
    (lambda: ft.lora(n_epochs=0), "n_epochs"),
    (lambda: ft.lora(batch_size=2.5), "batch_size"),
    (lambda: ft.head(data_columns="a,b"), "data_columns"),
    (lambda: ft.knn(normalize_embeddings="yes"), "normalize_embeddings"),
    (lambda: ft.n_shot("idle.csv", ""), "label"),
    (lambda: ft.plain(""), "file_id"),
])
def test_helpers_refuse_bad_values(build, argument):
    with pytest.raises(InvalidArgumentError) as info:
        build()
    assert info.value.argument == argument


@pytest.mark.parametrize("model, method, files, argument, needle", [
    ("newton", ft.head(), [ft.plain("t.jsonl")], "method", "lora"),
    ("omega", ft.lora(), [ft.n_shot("a.csv", "a")], "method", "head"),
    ("omega", ft.head(), [ft.plain("t.jsonl")], "training_files", "n_shot"),
    ("newton", ft.lora(), ["t.jsonl"], "training_files", "plain"),
    ("newton", ft.lora(), [], "training_files", "at least one"),
])
def test_mismatched_shapes_are_refused_before_sending(emu, model, method, files, argument, needle):
    with emu.client() as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.fine_tuning.jobs.create(model, name="x", method=method, training_files=files)
    assert info.value.argument == argument and needle in str(info.value)
    assert emu.requests == []


def test_create_goes_to_v06_with_the_spec_body(call):
    with FakeServer(routes({"POST /v0.6/fine_tuning/jobs": lambda: JOB})) as server:
        job = call(server.base_url, lambda c: c.fine_tuning.jobs.create(
            "newton", name="tone", method=ft.lora(n_epochs=2), training_files=[ft.plain("t.jsonl")], seed=7,
            suffix="x"))
        sent = json.loads(server.bodies[0])
    assert isinstance(job, FineTuningJob) and job.seed == 7
    assert sent == {"model": "newton", "name": "tone", "suffix": "x", "seed": 7, "method": ft.lora(n_epochs=2),
                    "training_files": [{"type": "plain", "file_id": "t.jsonl"}]}


@pytest.mark.parametrize("finished", ["COMPLETED", "SUCCEEDED", "CANCELLED"])
def test_wait_ends_on_either_spelling(call, finished):
    polls = iter([{**JOB, "status": "PENDING"}, {**JOB, "status": "RUNNING"}, {**JOB, "status": finished}])
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: next(polls)})) as server:
        job = call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=30))
    assert job.status == finished and job.is_finished


def test_a_failed_job_raises_with_its_errors(call):
    failed = {**JOB, "status": "FAILED", "errors": [{"code": "oom", "message": "out of memory", "error_uid": "err-2"}]}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: failed})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1"))
    assert info.value.errors == ["out of memory"] and info.value.job.id == "ftj_1" and "out of memory" in str(info.value)


def test_a_completed_job_that_produced_nothing_raises(call):
    """The spec's `outcome: FAILED` on a `COMPLETED` job is "produced nothing": it came back from
    wait() as a success, silently."""
    empty = {**JOB, "status": "COMPLETED", "outcome": "FAILED", "finished_at": 1764000100}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: empty})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=30))
    assert info.value.job.outcome == "FAILED" and info.value.job.status == "COMPLETED"
    assert "produced nothing" in str(info.value) and info.value.errors == []


def test_a_partial_outcome_warns_and_returns_the_job(call):
    partial = {**JOB, "status": "COMPLETED", "outcome": "PARTIAL", "finished_at": 1764000100}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: partial})) as server:
        with pytest.warns(UserWarning, match="PARTIAL"):
            job = call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=30))
    assert job.outcome == "PARTIAL"
    success = {**partial, "outcome": "SUCCESS"}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: success})) as server:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=30)).outcome == "SUCCESS"


def scripted(answers: list[Any]) -> Callable[[bytes], list[Any]]:
    """The job's polls answered in turn by ``answers`` (a status, a body and optionally headers,
    or ``None`` for a connection closed unanswered), the last one again and again."""
    left = list(answers)

    def script(head: bytes) -> list[Any]:
        answer = left.pop(0) if len(left) > 1 else left[0]
        if answer is None:
            return []
        status, body, *headers = answer
        return [response(status, json.dumps(body).encode(), *headers)]

    return script


UNAVAILABLE = (503, {"code": "server_at_capacity", "message": "Try again later.", "error_uid": "err-3"})


def test_a_burst_of_retryable_failures_does_not_end_the_wait(call, caplog):
    """Four 503s in a row (a gateway blip) ended a wait(timeout=600) with the 503, once one poll
    had used the client's retries, although the job was healthy."""
    answers = [(200, JOB), UNAVAILABLE, (429, {"code": "rate_limited", "message": "Slow down."}, {"Retry-After": "1"}),
               None,
               (500, {"code": "internal", "message": "oops"}), (200, {**JOB, "status": "COMPLETED"})]
    caplog.set_level("WARNING", logger="sensorium")
    with FakeServer(scripted(answers)) as server:
        job = call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=600))
        polls = len(server.requests)
    assert job.status == "COMPLETED" and polls == 6
    logged = [r for r in caplog.records if r.name.startswith("sensorium") and "ftj_1" in r.getMessage()]
    assert len(logged) == 4 and all(r.levelname == "WARNING" for r in logged)
    assert "503" in logged[0].getMessage()
    assert "polling again in 1.0s" in logged[1].getMessage(), "the 429's Retry-After is honoured"


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_failure_that_is_not_retried_still_ends_the_wait_at_once(call, status):
    answers = [(200, JOB), (status, {"code": "nope", "message": "No.", "error_uid": "err-4"}), (200, JOB)]
    with FakeServer(scripted(answers)) as server:
        with pytest.raises(sensorium.errors.APIStatusError) as info:
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=600))
        polls = len(server.requests)
    assert info.value.status == status and polls == 2


def test_failing_polls_run_out_with_the_timeout(call):
    """While the deadline allows, failing polls are made again; at it, WaitTimeoutError from the
    last failure (it was the first 503, raised at once)."""
    with FakeServer(scripted([(200, JOB), UNAVAILABLE])) as server:
        with pytest.raises(sensorium.errors.WaitTimeoutError) as info:
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=1))
        polls = len(server.requests)
    assert isinstance(info.value.__cause__, sensorium.errors.InternalServerError) and polls > 2
    assert info.value.record.status == "RUNNING", "the last record read"


def test_a_wait_without_timeout_gives_up_after_a_stretch_of_failures(call, monkeypatch):
    """Waiting forever is not polling a dead platform forever: after a stretch with nothing but
    failed polls (shortened here) the last failure is raised."""
    import sensorium._waiting

    monkeypatch.setattr(sensorium._waiting, "GIVE_UP_AFTER_FAILING_FOR", 1.0)
    with FakeServer(scripted([(200, JOB), UNAVAILABLE])) as server:
        with pytest.raises(sensorium.errors.InternalServerError):
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1"))
        polls = len(server.requests)
    assert polls > 2, "the failing poll was made again before giving up"


def test_logs_filters_and_limit(call):
    page = {"object": "list", "data": [{"id": "ev_2", "created_at": 2, "level": "INFO", "type": "step", "index": 0,
                                        "message": "loss 0.3"}], "has_more": False}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/logs": lambda: page})) as server:
        logs = call(server.base_url, lambda c: c.fine_tuning.jobs.logs("ftj_1", level="INFO", q="loss"))
        query = parse_qs(urlsplit(server.requests[0].split(b"\r\n")[0].decode().split(" ")[1]).query)
    assert [e.message for e in logs] == ["loss 0.3"] and query == {"level": ["INFO"], "q": ["loss"]}
    with sensorium.Client(api_key="k", base_url="http://127.0.0.1:9") as client:
        with pytest.raises(InvalidArgumentError):
            client.fine_tuning.jobs.logs("ftj_1", limit=101)


def test_helpers_take_column_lists_of_any_kind():
    """`df.columns[1:]` (a pandas Index) and numpy arrays crashed: `value == "auto"` compared them
    elementwise. Numpy numbers go out as plain JSON numbers."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"time": [1], "vib_x": [1.0], "vib_y": [2.0]})
    for columns in (frame.columns[1:], frame.columns[1:].to_numpy(), np.array(["vib_x", "vib_y"]), ("vib_x", "vib_y")):
        for method in (ft.head(data_columns=columns, n_epochs=np.int64(3)), ft.knn(data_columns=columns)):
            reader = method[method["type"]]["reader"]
            assert reader["data_columns"] == ["vib_x", "vib_y"]
            assert json.loads(json.dumps(method)) == method
    assert ft.head(n_epochs=np.int64(3))["head"]["hyperparameters"]["n_epochs"] == 3


@pytest.mark.parametrize("build, argument, kind", [
    (lambda: ft.plain("t.jsonl", format=3), "format", TypeError),
    (lambda: ft.n_shot("a.csv", "a", format=""), "format", InvalidArgumentError),
    (lambda: ft.lora(learning_rate_multiplier=float("nan")), "learning_rate_multiplier", InvalidArgumentError),
])
def test_helpers_refuse_values_the_spec_rules_out(build, argument, kind):
    with pytest.raises(kind) as info:
        build()
    assert getattr(info.value, "argument", str(info.value).split(":")[0]) == argument


@pytest.mark.parametrize("change, argument, kind", [
    (dict(training_files=None), "training_files", InvalidArgumentError),
    (dict(training_files=5), "training_files", TypeError),
    (dict(suffix=5), "suffix", TypeError),
    (dict(checkpoint_id=5), "checkpoint_id", TypeError),
])
def test_create_refuses_bad_arguments_naming_them(emu, change, argument, kind):
    arguments = {"name": "x", "method": ft.head(), "training_files": [ft.n_shot("a.csv", "a")], **change}
    with emu.client() as client:
        with pytest.raises(kind) as info:
            client.fine_tuning.jobs.create("omega", **arguments)
    assert getattr(info.value, "argument", str(info.value).split(":")[0]) == argument
    assert emu.requests == []


def test_a_failed_job_echoing_the_key_does_not_carry_it(call):
    failed = {**JOB, "status": "FAILED", "errors": [{"code": "auth", "message": "storage refused key sk-test"}]}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1": lambda: failed})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, lambda c: c.fine_tuning.jobs.wait("ftj_1"))
    assert info.value.errors == ["storage refused key <redacted>"]
    assert "sk-test" not in str(info.value) and "sk-test" not in json.dumps(info.value.job.to_dict())


def test_logs_follow_pages_answered_without_a_next_cursor(call):
    """The spec answers logs as `{object, data, has_more}`: no `next_cursor`. The pager read
    such a page as the last; it now goes on from the id of the page's edge event."""
    events = [{"id": f"ev_{i}", "created_at": i, "level": "INFO", "type": "step", "message": f"m{i}"}
              for i in range(5, 0, -1)]  # newest first
    seen: list[dict[str, list[str]]] = []

    def script(head: bytes) -> list[Any]:
        query = parse_qs(urlsplit(head.split(b"\r\n")[0].decode().split(" ")[1]).query)
        seen.append(query)
        ids = [e["id"] for e in events]
        if "before" in query:
            end = ids.index(query["before"][0])
            page, more = events[max(end - 2, 0):end], end - 2 > 0
        else:
            start = ids.index(query["after"][0]) + 1 if "after" in query else 0
            page, more = events[start:start + 2], start + 2 < len(events)
        return [response(200, json.dumps({"object": "list", "data": page, "has_more": more}).encode())]

    with FakeServer(script) as server:
        every = call(server.base_url, lambda c: c.fine_tuning.jobs.logs("ftj_1", limit=2))
        newer = call(server.base_url, lambda c: c.fine_tuning.jobs.logs("ftj_1", before="ev_1", limit=2))
    assert [e.id for e in every] == ["ev_5", "ev_4", "ev_3", "ev_2", "ev_1"]
    assert [e.id for e in newer] == ["ev_2", "ev_3", "ev_4", "ev_5"]
    assert seen[1] == {"limit": ["2"], "after": ["ev_4"]} and seen[-1] == {"limit": ["2"], "before": ["ev_3"]}


@pytest.mark.parametrize("listing, path", [
    (lambda c: c.fine_tuning.jobs.events("ftj_1"), "/v0.6/fine_tuning/jobs/ftj_1/events"),
    (lambda c: c.fine_tuning.jobs.checkpoints("ftj_1"), "/v0.6/fine_tuning/jobs/ftj_1/checkpoints"),
    (lambda c: c.fine_tuning.jobs.list(), "/v0.6/fine_tuning/jobs"),
    (lambda c: c.fine_tuning.jobs.checkpoint_options(), "/v0.6/fine_tuning/checkpoint_options"),
    (lambda c: c.fine_tuning.jobs.metrics("ftj_1"), "/v0.6/fine_tuning/jobs/ftj_1/metrics"),
])
def test_every_fine_tuning_list_follows_pages_answered_without_a_next_cursor(call, listing, path):
    """Only `logs` went on from a `{object, data, has_more}` page (the spec's shape, whose items'
    ids are the cursors); the other lists stopped after the first page without a word."""
    items = [{"id": f"item_{i}", "created_at": i, "level": "INFO", "type": "t", "step": i} for i in range(5, 0, -1)]

    def script(head: bytes) -> list[Any]:
        target = urlsplit(head.split(b"\r\n")[0].decode().split(" ")[1])
        if target.path != path:
            return [response(404, b'{"code": "not_found", "message": "?"}')]
        after = parse_qs(target.query).get("after", [None])[0]
        start = 0 if after is None else [i["id"] for i in items].index(after) + 1
        page = {"object": "list", "data": items[start:start + 2], "has_more": start + 2 < len(items)}
        return [response(200, json.dumps(page).encode())]

    with FakeServer(script) as server:
        every = call(server.base_url, listing)
    assert [getattr(i, "id", None) or i["id"] for i in every] == [f"item_{i}" for i in range(5, 0, -1)]


def test_a_page_with_more_and_no_way_on_is_refused_not_taken_as_the_end(call):
    """`has_more` with no `next_cursor` (and, on a fine-tuning list, no item id to go on from)
    ended the list silently, dropping the rest; it is an APIResponseValidationError now, from
    the core's page reading (files) and from the fine-tuning lists' alike."""
    stuck = {"data": [{"step": 1, "loss": 0.5}], "has_more": True}
    files = {"data": [{"file_id": "a.txt"}], "has_more": True, "next_cursor": None}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/metrics": lambda: stuck,
                            "GET /v0.5/files/metadata": lambda: files})) as server:
        with pytest.raises(APIResponseValidationError, match="has_more"):
            call(server.base_url, lambda c: c.fine_tuning.jobs.metrics("ftj_1"))
        with pytest.raises(APIResponseValidationError, match="has_more"):
            call(server.base_url, lambda c: c.files.list())


@pytest.mark.parametrize("more, pages", [("false", 1), ("False", 1), ("true", 2)])
def test_a_fine_tuning_page_with_has_more_as_text_reads_as_the_boolean_it_spells(call, more, pages):
    """`has_more: "false"` was read as true (`bool("false")`): the list asked for a page that
    does not exist."""
    first = {"object": "list", "data": [{"id": "ev_2"}, {"id": "ev_1"}], "has_more": more}
    answers = iter([first, {"object": "list", "data": [{"id": "ev_0"}], "has_more": False}])
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/events": lambda: next(answers)})) as server:
        events = call(server.base_url, lambda c: c.fine_tuning.jobs.events("ftj_1"))
        assert len(server.requests) == pages
    assert [e.id for e in events] == ["ev_2", "ev_1", "ev_0"][:pages + 1]


@pytest.mark.parametrize("more", [1, "no", ["false"]])
def test_a_fine_tuning_page_whose_has_more_is_no_boolean_is_refused(call, more):
    page = {"object": "list", "data": [{"id": "ev_2"}], "has_more": more}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/events": lambda: page})) as server:
        with pytest.raises(APIResponseValidationError, match="has_more"):
            call(server.base_url, lambda c: c.fine_tuning.jobs.events("ftj_1"))


# The two job waits (fine-tuning and batch) read status and errors alike.
JOB_WAITS = [
    pytest.param(lambda c: c.fine_tuning.jobs.wait("x_1", timeout=30), "/v0.6/fine_tuning/jobs/x_1", "FineTuningJob",
                 id="fine_tuning"),
    pytest.param(lambda c: c.batch.jobs.wait("x_1", timeout=30), "/v0.5/batch/jobs/x_1", "BatchJob", id="batch"),
]


@pytest.mark.parametrize("status", [3, {"state": "COMPLETED"}, ["COMPLETED"], True], ids=repr)
@pytest.mark.parametrize("wait, path, record", JOB_WAITS)
def test_a_job_status_of_the_wrong_type_ends_the_wait_naming_it(call, wait, path, record, status):
    """wait() raised a bare AttributeError ('int' object has no attribute 'upper')."""
    body = {"id": "x_1", "status": status}
    with FakeServer(routes({f"GET {path}": lambda: body})) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, wait)
    assert "'status'" in str(info.value) and record in str(info.value)
    assert json.loads(info.value.body) == body


def test_is_finished_refuses_a_status_of_the_wrong_type():
    with pytest.raises(APIResponseValidationError, match="'status'"):
        FineTuningJob.from_dict({**JOB, "status": 3}).is_finished
    assert not FineTuningJob.from_dict({**JOB, "status": None}).is_finished
    assert FineTuningJob.from_dict({**JOB, "status": "succeeded"}).is_finished


@pytest.mark.parametrize("errors, texts", [
    ([{"code": "oom", "message": "CUDA out of memory"}, {"code": "x", "message": "then this"}],
     ["CUDA out of memory", "then this"]),
    ({"code": "oom", "message": "CUDA out of memory", "error_uid": "err-1"}, ["CUDA out of memory"]),
    ("CUDA out of memory", ["CUDA out of memory"]),
    (["CUDA out of memory", "retry later"], ["CUDA out of memory", "retry later"]),
    ([{"code": "oom", "message": None}], ["oom"]),
    ([{"code": "oom", "message": ""}], ["oom"]),
    (5, ["5"]),
    (None, []),
    ([], []),
], ids=repr)
@pytest.mark.parametrize("wait, path, record", JOB_WAITS)
def test_a_failed_jobs_errors_read_in_every_shape(call, wait, path, record, errors, texts):
    """One error object gave "code; message" (its keys), a string was split into its characters,
    a number raised TypeError, and a batch error with `message: null` read "None"."""
    body = {"id": "x_1", "status": "FAILED", "errors": errors}
    with FakeServer(routes({f"GET {path}": lambda: body})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, wait)
    assert info.value.errors == texts
    assert str(info.value).endswith(f"failed: {'; '.join(texts) or '(no error given)'}")


@pytest.mark.parametrize("wait, path, record", JOB_WAITS)
def test_an_error_of_no_known_shape_is_shown_bounded(call, wait, path, record):
    body = {"id": "x_1", "status": "FAILED", "errors": [{"detail": "x" * 100_000}, [1, 2]]}
    with FakeServer(routes({f"GET {path}": lambda: body})) as server:
        with pytest.raises(JobFailedError) as info:
            call(server.base_url, wait)
    first, second = info.value.errors
    assert first.startswith('{"detail": "xxx') and len(first) < 1000
    assert second == "[1, 2]" and len(str(info.value)) < 2000


def test_metrics_convert_with_to_pandas(call):
    """Issue 7: "fine-tuning metrics ... convert with `.to_pandas()`"; metrics() was a plain list."""
    rows = {"data": [{"step": 1, "loss": 0.9}, {"step": 2, "loss": 0.4}], "has_more": False}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/metrics": lambda: rows})) as server:
        metrics = call(server.base_url, lambda c: c.fine_tuning.jobs.metrics("ftj_1"))
    assert metrics == rows["data"] and metrics[0]["loss"] == 0.9
    frame = metrics.to_pandas()
    assert list(frame["loss"]) == [0.9, 0.4] and list(frame.columns) == ["step", "loss"]


@pytest.mark.parametrize("row", ["ab", 5, ["ab"], None])
def test_a_metrics_row_that_is_no_object_is_a_validation_error(call, row):
    """A row of another JSON type raised a bare ValueError or TypeError from inside the SDK, and a
    list of pairs came back as a dict the server never sent."""
    rows = {"data": [{"step": 1, "loss": 0.9}, row], "has_more": False}
    with FakeServer(routes({"GET /v0.6/fine_tuning/jobs/ftj_1/metrics": lambda: rows})) as server:
        with pytest.raises(APIResponseValidationError, match="metrics row"):
            call(server.base_url, lambda c: c.fine_tuning.jobs.metrics("ftj_1"))


def test_create_takes_a_checkpoint_record_as_checkpoint_id(call):
    """The batch checkpoint port takes a `Checkpoint`; `create(checkpoint_id=best)` was a TypeError."""
    with FakeServer(routes({"POST /v0.6/fine_tuning/jobs": lambda: JOB})) as server:
        call(server.base_url, lambda c: c.fine_tuning.jobs.create(
            "newton", name="tone", method=ft.lora(), training_files=[ft.plain("t.jsonl")],
            checkpoint_id=Checkpoint(id="ckp_7", step=30)))
        sent = json.loads(server.bodies[0])
    assert sent["checkpoint_id"] == "ckp_7"


def test_jobs_list_types_each_kind(call):
    page = {"data": [JOB, {"id": "job_1", "name": "b", "pipeline_type": "batch", "status": "PAUSED"}],
            "has_more": False, "next_cursor": None}
    with FakeServer(routes({"GET /v0.5/jobs": lambda: page})) as server:
        jobs = call(server.base_url, lambda c: c.jobs.list(status="PAUSED"))
    assert [type(j) for j in jobs] == [FineTuningJob, BatchJob] and jobs[1].status == "PAUSED"


@pytest.mark.parametrize("arguments, kind, argument", [
    (dict(limit=0), InvalidArgumentError, "limit"), (dict(limit="5"), TypeError, "limit"),
    (dict(status=5), TypeError, "status"),
])
def test_jobs_list_checks_its_arguments_before_sending(emu, arguments, kind, argument):
    """`client.jobs.list(limit=0)` and `status=5` went to the server; `batch.jobs.list` refuses them."""
    with emu.client() as client:
        with pytest.raises(kind, match=argument):
            list(client.jobs.list(**arguments))
    assert emu.requests == []


def test_fine_tuning_job_record_from_the_spec_table():
    job = FineTuningJob.from_dict(dict(JOB, status="MADE_UP_STATUS"))
    assert job.status == "MADE_UP_STATUS" and not job.is_finished and job.outcome is None
    assert job.to_dict()["fine_tuned_model"] is None
