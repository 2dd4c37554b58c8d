"""Batch against the emulator through the public SDK, sync and async: create with every input
form, wait, outputs fetched with no Authorization header and read, both list styles across
pages, filters, per-input and whole-job failures, cancel and retry, the error shapes, the
checkpoint window rule, expired output URLs, GET /jobs with both kinds, literal JSON of the
records, and the --list-style flag."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable

import pytest

import sensorium
from _helpers import run_on
from _raw_http import request
from sensorium import fine_tuning as ft
from sensorium.errors import ConflictError, InvalidArgumentError, JobFailedError, NotFoundError
from sensorium.testing import Emulator
from sensorium.types import BatchEvent, BatchJob, BatchOutput, FileRecord, Pipeline

MACHINE_STATE = "machine-state-classification"
WINDOW = {"worker": {"config": {"reader_config": {"window_size": 4, "timestamp_column": "time"}}}}


def recording(rows: int, busy: bool, start: int = 0) -> bytes:
    """A CSV of `rows` rows: flat (`busy` false) or swinging hard, one timestamp column."""
    lines = ["time,a,b"]
    for i in range(rows):
        v = (10.0 if i % 2 == 0 else -10.0) if busy else 1.0
        lines.append(f"2026-01-01T00:{(start + i) // 60:02d}:{(start + i) % 60:02d},{v},{-v}")
    return ("\n".join(lines) + "\n").encode()


def upload_examples(emu: Emulator) -> None:
    with emu.client() as c:
        c.files.upload_base64("pump_quiet.csv", recording(8, busy=False))
        c.files.upload_base64("pump_loud.csv", recording(8, busy=True))
        c.files.upload_base64("idle.csv", recording(8, busy=False))
        c.files.upload_base64("busy.csv", recording(8, busy=True))


N_SHOTS = [{"file_id": "idle.csv", "metadata": {"class": "idle"}}, {"file_id": "busy.csv", "metadata": {"class": "busy"}}]


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET with the standard library and no Authorization header, as public scripts do."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def batch_emu():
    with Emulator(work_duration=0.2) as emu:
        upload_examples(emu)
        yield emu


@pytest.fixture
def run(client_kind: str, batch_emu: Emulator) -> Callable[..., Any]:
    return lambda operation: run_on(client_kind, operation, api_key=batch_emu.api_key, base_url=batch_emu.base_url)


def create_machine_state(client: Any, inputs: Any = None, parameters: Any = WINDOW) -> Any:
    return client.batch.jobs.create("line 3", pipeline_key=MACHINE_STATE, parameters=parameters,
                                    inputs=inputs or {"worker.inference": ["pump_quiet.csv"], "worker.n_shots": N_SHOTS})


def test_every_input_form_runs_and_outputs_read_without_auth(run, batch_emu):
    job = run(lambda c: create_machine_state(c, {
        "worker.inference": ["pump_quiet.csv", FileRecord(file_id="pump_loud.csv")],
        "worker.n_shots": N_SHOTS}))
    assert isinstance(job, BatchJob) and job.id.startswith("job_") and job.status == "PENDING"
    assert job.pipeline_version == "1.4.0" and job.pipeline_key == MACHINE_STATE and job.created_at.endswith("Z")
    done = run(lambda c: c.batch.jobs.wait(job.id, timeout=30))
    assert done.status == "COMPLETED" and done.started_at and done.completed_at and done.failed_at is None
    outputs = run(lambda c: c.batch.jobs.outputs(job.id))
    assert all(isinstance(o, BatchOutput) and o.id.startswith("out_") for o in outputs)
    assert [o.data["filename"] for o in outputs] == ["pred_pump_quiet_part_0.csv", "pred_pump_loud_part_1.csv"]
    expected = {"pred_pump_quiet_part_0.csv": "idle", "pred_pump_loud_part_1.csv": "busy"}
    for output in outputs:
        assert output.data["ref"].startswith("http://127.0.0.1:") and output.expires_at
        status, body = fetch(output.data["ref"])
        assert status == 200 and len(body) == output.data["num_bytes"]
        rows = body.decode().splitlines()
        # 8 rows in windows of 4, stamped with each window's last row; the nearest example's class.
        label = expected[output.data["filename"]]
        assert rows == ["time,Prediction", f"2026-01-01T00:00:03,{label}", f"2026-01-01T00:00:07,{label}"]
    messages = [e.message for e in run(lambda c: c.batch.jobs.events(job.id))]
    assert "Processing input 0: pump_quiet.csv" in messages and "Processing input 1: pump_loud.csv" in messages
    assert "SUCCESS Processed 1 items (1 success, 0 failed) from pump_loud.csv" in messages
    assert messages[-1].startswith("SUCCESS Job completed in ") and messages[-1].endswith("s")
    entries = run(lambda c: c.batch.jobs.progress(job.id))["entries"]
    assert entries and all({"kind", "step", "message"} <= set(e) for e in entries)
    assert run(lambda c: c.batch.jobs.failed_inputs(job.id)) == []


def test_activity_detection_answers_every_record(run, batch_emu, tmp_path):
    records = tmp_path / "shift.jsonl"
    records.write_bytes(b'{"prompt": "what now?"}\n{"instruction": "x", "inputs": [1]}\n\n{}\n')
    with batch_emu.client() as c:
        c.files.upload(records)
    job = run(lambda c: c.batch.jobs.create("acts", pipeline_key="activity-detection",
                                            inputs={"worker.data": [{"file_id": "shift.jsonl"}]}))
    assert run(lambda c: c.batch.jobs.wait(job.id, timeout=30)).status == "COMPLETED"
    (output,) = run(lambda c: c.batch.jobs.outputs(job.id))
    assert output.data["filename"] == "pred_shift_part_0.jsonl"
    rows = [json.loads(line) for line in fetch(output.data["ref"])[1].decode().splitlines()]
    assert [r["line_index"] for r in rows] == [0, 1, 2]
    assert all(isinstance(r["prediction"], str) and r["prediction"] for r in rows)


@pytest.mark.parametrize("style", ["cursor", "offset"])
def test_a_job_created_while_the_list_is_walked_gives_no_job_twice(style, client_kind):
    """Offset style: the new job pushes every job one place down, so the one at a page boundary
    comes again on the next page; the walk leaves it out."""
    with Emulator(page_size=2, list_style=style) as emu:
        with emu.client() as admin:
            admin.files.upload_base64("a.csv", recording(4, busy=False))
            create = lambda name: admin.batch.jobs.create(name, pipeline_key=MACHINE_STATE,  # noqa: E731
                                                          inputs={"worker.inference": ["a.csv"]})
            before = [create(f"j{i}").id for i in range(6)]

            def walk(c: Any) -> Any:
                if isinstance(c, sensorium.Client):
                    seen = []
                    for k, job in enumerate(c.batch.jobs.list()):
                        seen.append(job.id)
                        if k == 1:
                            create("late")
                    return seen

                async def walk_async() -> list[str]:
                    seen = []
                    async for job in c.batch.jobs.list():
                        seen.append(job.id)
                        if len(seen) == 2:
                            create("late 2")
                    return seen

                return walk_async()

            seen = run_on(client_kind, walk, api_key=emu.api_key, base_url=emu.base_url)
            assert len(seen) == len(set(seen)), seen
            assert set(before) <= set(seen)
            # Walks of one pager, one after another or interleaved, each give every job (the
            # ids seen are per walk).
            pager = admin.batch.jobs.list()
            assert len(list(pager)) == len(list(pager)) == 7
            assert len(list(zip(pager, pager))) == 7
            first = iter(pager)
            assert next(first) is not None and len(list(pager)) == 7 and len(list(first)) == 6


@pytest.mark.parametrize("style", ["cursor", "offset"])
def test_both_list_styles_across_pages(style, client_kind):
    with Emulator(page_size=2, list_style=style, work_duration=0.1) as emu:
        with emu.client() as c:
            names = [f"rec_{i}.csv" for i in range(5)]
            for name in names:
                c.files.upload_base64(name, recording(4, busy=False))
        call = lambda op: run_on(client_kind, op, api_key=emu.api_key, base_url=emu.base_url)  # noqa: E731
        jobs = [call(lambda c: c.batch.jobs.create(f"j{i}", pipeline_key=MACHINE_STATE,
                                                   inputs={"worker.inference": names})) for i in range(3)]
        for job in jobs:
            call(lambda c: c.batch.jobs.wait(job.id, timeout=30))
        job_id = jobs[0].id
        assert [j.id for j in call(lambda c: c.batch.jobs.list())] == [j.id for j in reversed(jobs)]
        assert len(call(lambda c: c.batch.jobs.events(job_id))) == 1 + 1 + 2 * 5 + 1
        assert [i["file_id"] for i in call(lambda c: c.batch.jobs.inputs(job_id))] == names
        assert len(call(lambda c: c.batch.jobs.outputs(job_id))) == 5
        assert len(call(lambda c: c.batch.pipelines.list())) == 3
        # The wire shape of each style, and its paging by hand.
        first = request(emu, "GET", f"/batch/jobs/{job_id}/outputs").json()
        if style == "offset":
            assert set(first) == {"job_id", "total", "offset", "limit", "outputs"}
            assert (first["job_id"], first["total"], first["offset"], first["limit"]) == (job_id, 5, 0, 2)
            last = request(emu, "GET", f"/batch/jobs/{job_id}/outputs?offset=4&limit=2").json()
            assert len(last["outputs"]) == 1
            assert set(request(emu, "GET", "/batch/jobs").json()) == {"total", "offset", "limit", "jobs"}
            for key, path in [("events", f"/batch/jobs/{job_id}/events"), ("inputs", f"/batch/jobs/{job_id}/inputs"),
                              ("pipelines", "/batch/registry/pipelines")]:
                assert key in request(emu, "GET", path).json(), path
        else:
            assert set(first) == {"data", "has_more", "next_cursor"} and first["has_more"]
            second = request(emu, "GET", f"/batch/jobs/{job_id}/outputs?limit=2&cursor={first['next_cursor']}").json()
            assert not {o["id"] for o in second["data"]} & {o["id"] for o in first["data"]}
            bad = request(emu, "GET", f"/batch/jobs/{job_id}/events?cursor=made-up")
            assert bad.status == 400 and bad.json()["code"] == "invalid_cursor" and "error_uid" in bad.json()


def test_filters(run, batch_emu):
    batch_emu.fail_next_job("batch", failed_inputs=["pump_loud.csv"])
    job = run(lambda c: create_machine_state(c, {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"],
                                                 "worker.n_shots": N_SHOTS}))
    with pytest.warns(UserWarning, match="1 failed input"):
        run(lambda c: c.batch.jobs.wait(job.id, timeout=30))
    success = run(lambda c: c.batch.jobs.events(job.id, level="SUCCESS"))
    assert success and all(e.level == "SUCCESS" for e in success)
    assert run(lambda c: c.batch.jobs.events(job.id, level="SUCC")) == [], "level matches exactly"
    failed = run(lambda c: c.batch.jobs.events(job.id, event_type="inference.failed"))
    assert [e.message for e in failed] == ["FAILED Processing failed for pump_loud.csv"]
    by_input = run(lambda c: c.batch.jobs.events(job.id, input_id=failed[0].input_id))
    assert {e.input_id for e in by_input} == {failed[0].input_id} and len(by_input) == 2
    assert [i["file_id"] for i in run(lambda c: c.batch.jobs.inputs(job.id, port="worker.n_shots"))] == ["idle.csv", "busy.csv"]
    assert [i["file_id"] for i in run(lambda c: c.batch.jobs.inputs(job.id, status="FAILED"))] == ["pump_loud.csv"]
    assert [i["file_id"] for i in run(lambda c: c.batch.jobs.inputs(job.id, search="PUMP"))] == ["pump_quiet.csv", "pump_loud.csv"]
    assert run(lambda c: c.batch.jobs.inputs(job.id, search="pump", port="worker.n_shots")) == []
    assert [j.id for j in run(lambda c: c.batch.jobs.list(status="COMPLETED"))] == [job.id]
    assert run(lambda c: c.batch.jobs.list(status="RUNNING")) == []


def test_failed_inputs_leave_the_job_completed_without_their_outputs(run, batch_emu):
    batch_emu.fail_next_job("batch", failed_inputs=["pump_quiet.csv"])
    job = run(lambda c: create_machine_state(c, {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"],
                                                 "worker.n_shots": N_SHOTS}))
    with pytest.warns(UserWarning, match="failed_inputs"):
        done = run(lambda c: c.batch.jobs.wait(job.id, timeout=30))
    assert done.status == "COMPLETED"
    (failure,) = run(lambda c: c.batch.jobs.failed_inputs(job.id))
    assert failure["message"] == "FAILED Processing failed for pump_quiet.csv" and failure["input_id"].startswith("inp_")
    assert [o.data["filename"] for o in run(lambda c: c.batch.jobs.outputs(job.id))] == ["pred_pump_loud_part_1.csv"]


def test_the_failed_inputs_warning_names_the_callers_line(batch_emu):
    """It pointed into sensorium's runner (_endpoints.py), on both clients."""
    import warnings

    def warned_at(call: Callable[[], Any]) -> tuple[str, int]:
        batch_emu.fail_next_job("batch", failed_inputs=["pump_quiet.csv"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = call()
        (warning,) = [w for w in caught if "failed input" in str(w.message)]
        assert warning.filename == __file__, warning.filename
        return warning.lineno, line

    inputs = {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"], "worker.n_shots": N_SHOTS}
    with batch_emu.client() as client:
        def blocking() -> int:
            job = create_machine_state(client, inputs)
            client.batch.jobs.wait(job.id, timeout=30); return sys._getframe().f_lineno  # noqa: E702
        assert len(set(warned_at(blocking))) == 1

    async def awaited() -> int:
        async with sensorium.AsyncClient(api_key=batch_emu.api_key, base_url=batch_emu.base_url) as c:
            job = await create_machine_state(c, inputs)
            await c.batch.jobs.wait(job.id, timeout=30); return sys._getframe().f_lineno  # noqa: E702

    assert len(set(warned_at(lambda: asyncio.run(awaited())))) == 1


def test_a_job_failure_that_echoes_the_key_does_not_carry_it(client_kind):
    import pickle

    key = "sk-SECRET-abcdef0123456789"
    with Emulator(work_duration=0.1, api_key=key) as emu:
        upload_examples(emu)
        emu.fail_next_job("batch", error=f"auth to storage failed with key {key}")
        job = run_on(client_kind, create_machine_state, api_key=key, base_url=emu.base_url)
        with pytest.raises(JobFailedError) as info:
            run_on(client_kind, lambda c: c.batch.jobs.wait(job.id, timeout=30), api_key=key, base_url=emu.base_url)
    error = info.value
    assert error.errors == ["auth to storage failed with key <redacted>"]
    for text in (str(error), repr(error), repr(error.job), json.dumps(error.job.to_dict())):
        assert key not in text
    assert key.encode() not in pickle.dumps(error)


@pytest.mark.parametrize("change, argument, kind", [
    (dict(parameters="x"), "parameters", TypeError),
    (dict(pipeline_type=""), "pipeline_type", InvalidArgumentError),
    (dict(inputs={"worker.inference": [{"file_id": ""}]}), "inputs", InvalidArgumentError),
    (dict(inputs={"worker.inference": []}), "inputs", InvalidArgumentError),
    (dict(inputs={"worker.inference": ["pump_quiet.csv"], "worker.n_shots": []}), "inputs", InvalidArgumentError),
])
def test_create_refuses_what_cannot_run_before_sending(batch_emu, change, argument, kind):
    arguments = {"pipeline_key": MACHINE_STATE, "inputs": {"worker.inference": ["pump_quiet.csv"]}, **change}
    batch_emu.clear_requests()
    with batch_emu.client() as client:
        with pytest.raises(kind) as info:
            client.batch.jobs.create("b", **arguments)
    assert getattr(info.value, "argument", str(info.value).split(":")[0]) == argument
    assert batch_emu.requests == []


def test_a_failed_job_raises_and_retry_runs_it_again(run, batch_emu):
    batch_emu.fail_next_job("batch", error="BackoffLimitExceeded")
    job = run(create_machine_state)
    with pytest.raises(JobFailedError) as info:
        run(lambda c: c.batch.jobs.wait(job.id, timeout=30))
    assert info.value.errors == ["BackoffLimitExceeded"] and info.value.job.status == "FAILED"
    assert info.value.job.failed_at
    failed = run(lambda c: c.batch.jobs.events(job.id, level="FAILED"))
    assert [e.message for e in failed] == ["FAILED Job failed: BackoffLimitExceeded"]
    assert run(lambda c: c.batch.jobs.outputs(job.id)) == []
    again = run(lambda c: c.batch.jobs.retry(job.id))
    assert isinstance(again, BatchJob) and again.status == "PENDING" and again.failed_at is None
    assert run(lambda c: c.batch.jobs.wait(job.id, timeout=30)).status == "COMPLETED"
    assert len(run(lambda c: c.batch.jobs.outputs(job.id))) == 1
    with pytest.raises(ConflictError):
        run(lambda c: c.batch.jobs.retry(job.id))


def test_fail_next_job_fails_the_next_job_made_not_one_already_running():
    with Emulator(work_duration=1.0) as emu:
        upload_examples(emu)
        with emu.client() as c:
            running = create_machine_state(c)
            emu.fail_next_job("batch", error="planned for the next one")
            following = create_machine_state(c)
            with pytest.raises(JobFailedError) as info:
                c.batch.jobs.wait(following.id, timeout=30)
            assert info.value.errors == ["planned for the next one"]
            assert c.batch.jobs.wait(running.id, timeout=30).status == "COMPLETED"


def test_a_cancel_whose_answer_was_lost_returns_the_cancelled_job(client_kind):
    """The first attempt cancelled the job and its answer was cut off; the repeat met 409
    already terminal, which reached the caller as ConflictError although the cancel succeeded."""
    with Emulator(work_duration=30) as emu:
        upload_examples(emu)
        with emu.client() as client:
            job = create_machine_state(client)
        emu.inject("POST", f"/batch/jobs/{job.id}/cancel", action="truncate", times=1)
        cancelled = run_on(client_kind, lambda c: c.batch.jobs.cancel(job.id), api_key=emu.api_key,
                           base_url=emu.base_url)
        assert isinstance(cancelled, BatchJob) and cancelled.id == job.id and cancelled.status == "CANCELLED"
        assert [r.status for r in emu.requests if r.path.endswith("/cancel")] == [200, 409]


@pytest.mark.parametrize("kind, plan, error, named", [
    ("batch", dict(failed_inputs="pump_loud.csv"), TypeError, "failed_inputs"),  # it was read as its letters
    ("fine_tuning", dict(failed_inputs=["idle.csv"]), ValueError, "failed_inputs"),  # no inputs to fail
    ("batch", dict(), ValueError, "error"),  # nothing to fail at all
    ("batch", dict(failed_inputs=[]), ValueError, "error"),
    ("agent", dict(error=""), ValueError, "error"),
])
def test_fail_next_job_refuses_a_plan_that_would_fail_nothing(batch_emu, kind, plan, error, named):
    """These were accepted and did nothing, so a test of a failure passed on a job that succeeded."""
    with pytest.raises(error, match=named):
        batch_emu.fail_next_job(kind, **plan)
    body = {"kind": kind, **plan}
    reply = request(batch_emu, "POST", "/_emulator/fail_next_job", json.dumps(body).encode(), key=None)
    assert reply.status == 400 and named in reply.raw.decode(), "the control route refuses it too"
    with batch_emu.client() as client:  # nothing was planned: the next job has no failed input
        job = create_machine_state(client, {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"],
                                            "worker.n_shots": N_SHOTS})
        assert client.batch.jobs.wait(job.id, timeout=30).status == "COMPLETED"
        assert client.batch.jobs.failed_inputs(job.id) == []


def test_cancel_running_then_terminal_with_and_without_ok_if_terminal(client_kind):
    with Emulator(work_duration=30) as emu:
        upload_examples(emu)
        call = lambda op: run_on(client_kind, op, api_key=emu.api_key, base_url=emu.base_url)  # noqa: E731
        job = call(create_machine_state)
        deadline = time.monotonic() + 10
        while call(lambda c: c.batch.jobs.get(job.id)).status != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(ConflictError):
            call(lambda c: c.batch.jobs.delete(job.id))
        # The record whichever way the cancel goes: the POST's answer on a running job, as the
        # GET's record on a terminal one (it was a raw dict here, so `.status` failed).
        answer = call(lambda c: c.batch.jobs.cancel(job.id, ok_if_terminal=True))
        assert isinstance(answer, BatchJob) and answer.id == job.id and answer.status == "CANCELLED"
        assert answer.to_dict()["cancelled_at"].endswith("Z")
        assert call(lambda c: c.batch.jobs.get(job.id)).status == "CANCELLED"
        with pytest.raises(ConflictError):
            call(lambda c: c.batch.jobs.cancel(job.id))
        assert call(lambda c: c.batch.jobs.cancel(job.id, ok_if_terminal=True)).status == "CANCELLED"
        with pytest.raises(NotFoundError):
            call(lambda c: c.batch.jobs.cancel("job_missing", ok_if_terminal=True))
        assert {i["status"] for i in call(lambda c: c.batch.jobs.inputs(job.id))} == {"CANCELLED"}
        assert call(lambda c: c.batch.jobs.retry(job.id)).status == "PENDING"
        assert call(lambda c: c.batch.jobs.cancel(job.id)).status == "CANCELLED"
        call(lambda c: c.batch.jobs.delete(job.id))
        with pytest.raises(NotFoundError):
            call(lambda c: c.batch.jobs.get(job.id))


def test_error_shapes(batch_emu):
    emu = batch_emu
    missing = request(emu, "GET", "/batch/jobs/job_nope")
    body = missing.json()
    assert missing.status == 404 and body["code"] == "NOT_FOUND" and body["error_uid"].startswith("err-")
    assert "job_nope" in body["message"] and "errors" not in body
    for key in (None, "sk-emu-not-issued"):
        refused = request(emu, "GET", "/batch/jobs", key=key)
        assert refused.status == 401 and set(refused.json()) == {"detail"}
    assert request(emu, "GET", "/batch/registry/pipelines/nope").status == 404

    def create(**fields: Any) -> Any:
        body = {"name": "x", "pipeline_key": MACHINE_STATE, "inputs": {"worker.inference": [{"file_id": "pump_quiet.csv"}]}}
        return request(emu, "POST", "/batch/jobs", json.dumps({**body, **fields}).encode())

    too_many = create(inputs={"worker.inference": [{"file_id": f"f{i}.csv"} for i in range(10_001)]})
    assert too_many.status == 413
    cases = {
        "Pipeline 'nope' has no active versions": create(pipeline_key="nope"),
        "Pipeline 'anomaly-scoring' has no active versions": create(pipeline_key="anomaly-scoring"),
        "'missing.csv'": create(inputs={"worker.inference": [{"file_id": "missing.csv"}]}),
        "no port 'worker.data'": create(inputs={"worker.data": [{"file_id": "pump_quiet.csv"}]}),
        "port 'worker.inference'": create(inputs={"worker.n_shots": N_SHOTS}),
        "metadata {class}": create(inputs={"worker.inference": [{"file_id": "pump_quiet.csv"}],
                                           "worker.n_shots": [{"file_id": "idle.csv"}]}),
        "no active version '9.9'": create(pipeline_version="9.9"),
        "Checkpoint 'ckp_unknown'": create(inputs={"worker.inference": [{"file_id": "pump_quiet.csv"}],
                                                   "worker.fine_tune_checkpoint": [{"kind": "checkpoint", "checkpoint_id": "ckp_unknown"}]}),
    }
    for needle, answer in cases.items():
        assert answer.status == 400, needle
        assert needle in answer.json()["message"] and answer.json()["error_uid"].startswith("err-"), answer.json()
    with emu.client() as c:
        with pytest.raises(NotFoundError) as info:
            c.batch.jobs.get("job_nope")
        assert info.value.code == "NOT_FOUND"
        with pytest.raises(InvalidArgumentError):
            c.batch.jobs.create("x", pipeline_key=MACHINE_STATE, inputs={"worker.inference": [f"f{i}" for i in range(10_001)]})


def test_checkpoint_window_must_equal_the_training_window(run, batch_emu):
    tuning = run(lambda c: c.fine_tuning.jobs.create(
        "omega", name="pump", method=ft.head(window_size=8),
        training_files=[ft.n_shot("idle.csv", "idle"), ft.n_shot("busy.csv", "busy")]))
    run(lambda c: c.fine_tuning.jobs.wait(tuning.id, timeout=30))
    checkpoint = run(lambda c: c.fine_tuning.jobs.checkpoints(tuning.id))[-1]

    def with_window(window: int) -> Any:
        parameters = {"worker": {"config": {"reader_config": {"window_size": window, "timestamp_column": "time"}}}}
        return run(lambda c: create_machine_state(c, {"worker.inference": ["pump_quiet.csv"],
                                                      "worker.fine_tune_checkpoint": checkpoint}, parameters))

    wrong = with_window(4)
    with pytest.raises(JobFailedError) as info:
        run(lambda c: c.batch.jobs.wait(wrong.id, timeout=30))
    assert "window_size is 4" in str(info.value) and "8" in info.value.errors[0] and checkpoint.id in str(info.value)
    right = with_window(8)
    assert run(lambda c: c.batch.jobs.wait(right.id, timeout=30)).status == "COMPLETED"
    (output,) = run(lambda c: c.batch.jobs.outputs(right.id))
    rows = fetch(output.data["ref"])[1].decode().splitlines()
    # No n-shot examples: the classes are the checkpoint's training labels.
    assert rows[0] == "time,Prediction" and len(rows) == 2 and rows[1].split(",")[1] in {"idle", "busy"}


def test_expired_output_urls_answer_403_until_listed_again(batch_emu):
    emu = batch_emu
    with emu.client() as c:
        job = create_machine_state(c)
        c.batch.jobs.wait(job.id, timeout=30)
        (old,) = c.batch.jobs.outputs(job.id)
        status, whole = fetch(old.data["ref"])
        assert status == 200
        assert fetch(old.data["ref"], {"Range": "bytes=5-"}) == (206, whole[5:])
        status, body = fetch(old.data["ref"], {"Authorization": f"Bearer {emu.api_key}"})
        assert status == 400 and emu.api_key.encode() not in body, "storage refuses a second auth mechanism"
        emu.expire_output_urls()
        status, body = fetch(old.data["ref"])
        assert status == 403 and b"expired" in body
        (fresh,) = c.batch.jobs.outputs(job.id)
        assert fresh.data["ref"] != old.data["ref"] and fetch(fresh.data["ref"]) == (200, whole)
        tampered = fresh.data["ref"].replace("signature=", "signature=0")
        assert fetch(tampered)[0] == 403
    assert request(emu, "POST", "/_emulator/expire_output_urls").status == 200
    assert fetch(fresh.data["ref"])[0] == 403, "the control route expires them too"


def test_download_outputs_fetches_the_emulators_presigned_urls(batch_emu, tmp_path):
    with batch_emu.client() as c:
        job = create_machine_state(c, {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"], "worker.n_shots": N_SHOTS})
        c.batch.jobs.wait(job.id, timeout=30)
        batch_emu.expire_output_urls()
        paths = c.batch.jobs.download_outputs(job.id, tmp_path / "out")
    assert [p.name for p in paths] == ["pred_pump_quiet_part_0.csv", "pred_pump_loud_part_1.csv"]
    assert paths[1].read_text().splitlines()[1].endswith(",busy")


def test_jobs_list_has_both_kinds(run, batch_emu):
    tuning = run(lambda c: c.fine_tuning.jobs.create("omega", name="pump", method=ft.head(),
                                                     training_files=[ft.n_shot("idle.csv", "idle")]))
    batch = run(create_machine_state)
    listed = [j.id for j in run(lambda c: c.jobs.list())]
    assert listed[:2] == [batch.id, tuning.id], "newest first, both kinds"
    for status in ("PAUSED", "INTERRUPTED", "paused"):
        assert run(lambda c: c.jobs.list(status=status)) == []
    assert request(batch_emu, "GET", "/jobs?status=SLEEPING").status == 400
    run(lambda c: c.batch.jobs.wait(batch.id, timeout=30))
    assert batch.id in [j.id for j in run(lambda c: c.jobs.list(status="completed"))]


def test_jobs_list_walks_past_jobs_deleted_while_listing(batch_emu):
    """QA's repro: cleaning up batch jobs while walking the mixed list answered 400 invalid_cursor
    on the next page (the cursor's job had left a list of `job_` and `ftj_` ids)."""
    with batch_emu.client() as c:
        tuning = c.fine_tuning.jobs.create("omega", name="pump", method=ft.head(),
                                           training_files=[ft.n_shot("idle.csv", "idle")])
        made = [create_machine_state(c) for _ in range(3)]
        for job in made:
            c.batch.jobs.wait(job.id, timeout=30)
        seen = []
        for job in c.jobs.list(limit=1):
            seen.append(job.id)
            if job.id in {j.id for j in made}:
                c.batch.jobs.delete(job.id)
        assert seen == [j.id for j in reversed(made)] + [tuning.id], "every job once, newest first"
        assert [j.id for j in c.jobs.list(limit=1)] == [tuning.id]


def test_jobs_list_is_served_on_both_api_versions(run, batch_emu):
    """The spec: `GET /jobs` status filter accepts PAUSED and INTERRUPTED in both API versions."""
    tuning = run(lambda c: c.fine_tuning.jobs.create("omega", name="pump", method=ft.head(),
                                                     training_files=[ft.n_shot("idle.csv", "idle")]))
    batch = run(create_machine_state)
    for version in ("/v0.5", "/v0.6"):
        listed = request(batch_emu, "GET", f"{version}/jobs")
        assert listed.status == 200, listed.raw
        assert [j["id"] for j in listed.json()["data"]][:2] == [batch.id, tuning.id]
        for status in ("PAUSED", "INTERRUPTED"):
            reply = request(batch_emu, "GET", f"{version}/jobs?status={status}")
            assert reply.status == 200 and reply.json()["data"] == [], reply.raw
        assert request(batch_emu, "GET", f"{version}/jobs?status=SLEEPING").status == 400
        assert request(batch_emu, "GET", f"{version}/jobs", key="sk-nobody").status == 401


def test_queue_and_registry(run):
    queue = run(lambda c: c.batch.jobs.queue())
    assert queue["queues"]["batch"] == {"pending": 0, "running": 0}
    pipelines = run(lambda c: c.batch.pipelines.list())
    assert all(isinstance(p, Pipeline) for p in pipelines)
    assert [p.key for p in pipelines] == [MACHINE_STATE, "activity-detection", "anomaly-scoring"]
    machine = run(lambda c: c.batch.pipelines.get(pipelines[0].id))
    assert machine.key == MACHINE_STATE and machine.version == "1.4.0"
    assert run(lambda c: c.batch.pipelines.get(MACHINE_STATE)).id == machine.id, "a key finds it too"
    schema = run(lambda c: c.batch.pipelines.schema(machine.id))
    ports = {p["name"]: p for p in schema["ports"]}
    assert set(ports) == {"worker.inference", "worker.n_shots", "worker.fine_tune_checkpoint"}
    assert ports["worker.n_shots"]["metadata"] == ["class"] and ports["worker.inference"]["required"]
    assert "reader_config" in schema["parameters"]["worker"]["config"]
    assert run(lambda c: c.batch.pipelines.get("anomaly-scoring")).to_dict()["status"] == "retired"


def test_records_from_literal_json_and_the_emulators_fields(batch_emu):
    job = BatchJob.from_dict({"id": "job_1", "name": "line 3", "pipeline_type": "batch",
                              "pipeline_key": MACHINE_STATE, "pipeline_version": "1.2.0", "status": "COMPLETED",
                              "created_at": "2026-11-23T10:00:00Z", "started_at": "2026-11-23T10:00:01Z",
                              "completed_at": "2026-11-23T10:05:50Z", "failed_at": None})
    assert (job.status, job.pipeline_version, job.completed_at) == ("COMPLETED", "1.2.0", "2026-11-23T10:05:50Z")
    event = BatchEvent.from_dict({"id": 7, "event_type": "inference.failed", "level": "FAILED", "message":
                                  "FAILED Processing failed for b.csv", "payload": {}, "input_id": "inp_2", "index": 1,
                                  "created_at": "2026-11-23T10:00:00Z"})
    assert (event.id, event.input_id, event.index) == (7, "inp_2", 1)
    output = BatchOutput.from_dict({"id": "out_1", "data": {"ref": "https://storage/x?sig=1", "filename": "pred_a_part_0.csv",
                                                            "num_bytes": 12}, "expires_at": "2026-11-23T11:00:00Z"})
    assert output.data["filename"] == "pred_a_part_0.csv"
    # The emulator's records carry every field the wire notes name, with the types they give.
    with batch_emu.client() as c:
        created = create_machine_state(c)
        c.batch.jobs.wait(created.id, timeout=30)
    raw = request(batch_emu, "GET", f"/batch/jobs/{created.id}").json()
    assert {"id", "name", "pipeline_type", "pipeline_key", "pipeline_version", "status", "created_at", "started_at",
            "completed_at", "failed_at"} <= set(raw)
    events = request(batch_emu, "GET", f"/batch/jobs/{created.id}/events").json()["data"]
    assert all(isinstance(e["id"], int) and isinstance(e["message"], str) and e["created_at"].endswith("Z")
               and isinstance(e["payload"], dict) for e in events)
    (out,) = request(batch_emu, "GET", f"/batch/jobs/{created.id}/outputs").json()["data"]
    assert set(out["data"]) == {"ref", "filename", "num_bytes"} and out["expires_at"].endswith("Z")
    cancel = request(batch_emu, "POST", f"/batch/jobs/{created.id}/cancel")
    assert cancel.status == 409 and cancel.json()["error_uid"].startswith("err-")


def test_command_line_list_style():
    from test_model_catalogue import start_cli, stop_cli

    proc, settings = start_cli("--list-style", "offset", "--page-size", "2")
    try:
        base_url, key = settings["SENSORIUM_BASE_URL"], settings["SENSORIUM_API_KEY"]
        page = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{base_url}/batch/registry/pipelines", headers={"Authorization": f"Bearer {key}"}), timeout=10).read())
        assert (page["total"], page["offset"], page["limit"], len(page["pipelines"])) == (3, 0, 2, 2)
        with sensorium.Client(api_key=key, base_url=base_url) as c:
            assert len(list(c.batch.pipelines.list())) == 3
    finally:
        stop_cli(proc)


def test_the_whole_path_fine_tune_checkpoint_batch_download_read(run, batch_emu, tmp_path):
    """What the public examples do: train a head, pick the best checkpoint, feed it to batch
    inference over several recordings, download every output and read the predictions."""
    with batch_emu.client() as c:
        for i in range(3):
            c.files.upload_base64(f"shift_{i}.csv", recording(16, busy=i % 2 == 1, start=i * 16))
    tuning = run(lambda c: c.fine_tuning.jobs.create(
        "omega", name="pump states", method=ft.head(window_size=4, n_epochs=2),
        training_files=[ft.n_shot("idle.csv", "idle"), ft.n_shot("busy.csv", "busy")]))
    done = run(lambda c: c.fine_tuning.jobs.wait(tuning.id, timeout=30))
    assert done.status == "COMPLETED"
    checkpoints = run(lambda c: c.fine_tuning.jobs.checkpoints(tuning.id))
    best = min(checkpoints, key=lambda ckp: ckp.metrics["loss"])
    job = run(lambda c: c.batch.jobs.create(
        "score shifts", pipeline_key=MACHINE_STATE, parameters=WINDOW,
        inputs={"worker.inference": [f"shift_{i}.csv" for i in range(3)], "worker.fine_tune_checkpoint": best}))
    assert run(lambda c: c.batch.jobs.wait(job.id, timeout=30)).status == "COMPLETED"
    paths = run(lambda c: c.batch.jobs.download_outputs(job.id, tmp_path / "predictions"))
    assert [p.name for p in paths] == [f"pred_shift_{i}_part_{i}.csv" for i in range(3)]
    for i, path in enumerate(paths):
        rows = path.read_text().splitlines()
        assert rows[0] == "time,Prediction" and len(rows) == 1 + 16 // 4
        labels = {row.split(",")[1] for row in rows[1:]}
        assert labels == {"busy" if i % 2 else "idle"}, (path.name, labels)


def test_planned_failures_of_one_kind_queue_each_failing_one_job():
    """An error plan and then a failed_inputs plan for batch: the second replaced the first,
    so the first job completed although its failure was planned."""
    with Emulator(work_duration=0.2) as emu:
        upload_examples(emu)
        emu.fail_next_job("batch", error="whole job fails")
        emu.fail_next_job("batch", failed_inputs=["pump_loud.csv"])
        with emu.client() as c:
            inputs = {"worker.inference": ["pump_quiet.csv", "pump_loud.csv"], "worker.n_shots": N_SHOTS}
            first, second, third = (create_machine_state(c, inputs) for _ in range(3))
            with pytest.raises(JobFailedError) as info:
                c.batch.jobs.wait(first.id, timeout=30)
            assert info.value.errors == ["whole job fails"]
            with pytest.warns(UserWarning):
                assert c.batch.jobs.wait(second.id, timeout=30).status == "COMPLETED"
            (failed,) = c.batch.jobs.failed_inputs(second.id)
            assert "pump_loud.csv" in failed["message"]
            assert c.batch.jobs.wait(third.id, timeout=30).status == "COMPLETED"
            assert c.batch.jobs.failed_inputs(third.id) == []


def test_a_retry_is_a_new_execution_and_takes_the_next_plan():
    """fail_next_job's plan goes to the next job of its kind to run, and a retry runs the job
    again: the retried job fails, and the job made after it does not."""
    with Emulator(work_duration=0.3) as emu:
        upload_examples(emu)
        with emu.client() as c:
            old = create_machine_state(c)
            c.batch.jobs.cancel(old.id)
            emu.fail_next_job("batch", error="planned")
            c.batch.jobs.retry(old.id)
            new = create_machine_state(c)
            with pytest.raises(JobFailedError, match="planned"):
                c.batch.jobs.wait(old.id, timeout=30)
            assert c.batch.jobs.wait(new.id, timeout=30).status == "COMPLETED"
