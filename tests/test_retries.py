"""The retry rule under injected faults: what is retried, how often, how long it waits, and
what each attempt sends. Attempts are counted from the emulator's request log."""

from __future__ import annotations

import os
import time

import pytest

from _helpers import REASONER, body_json, calls, header, run_on
from sensorium.errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    GatewayTimeoutError,
    InternalServerError,
    RateLimitError,
)

RETRYABLE = [429, 500, 502, 503, 504]
NOT_RETRYABLE = [400, 401, 403, 404, 409, 413, 422]


@pytest.mark.parametrize("status", RETRYABLE)
def test_retryable_status_then_success(emu, status):
    emu.inject("POST", "/query", status=status, retry_after=0.05, times=2)
    with emu.client(max_retries=2) as client:
        result = client.query(REASONER, "hello")
    assert result.status == "completed"
    attempts = calls(emu, "/query")
    assert [r.attempt for r in attempts] == [1, 2, 3]
    assert [header(r, "x-sensorium-retry-count") for r in attempts] == ["0", "1", "2"]
    assert [r.status for r in attempts] == [status, status, 200]
    # Every attempt re-sends the same body.
    assert len({r.body_len for r in attempts}) == 1
    assert all(body_json(r) == {"model": REASONER, "query": "hello"} for r in attempts)


@pytest.mark.parametrize("status, cls", [(429, RateLimitError), (503, InternalServerError), (504, GatewayTimeoutError)])
def test_retries_are_bounded_by_max_retries(emu, status, cls):
    emu.inject("POST", "/query", status=status, retry_after=0.05, times=10)
    with emu.client(max_retries=2) as client:
        with pytest.raises(cls) as info:
            client.query(REASONER, "hello")
    assert info.value.status == status
    assert info.value.retry_after == pytest.approx(0.05)
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2, 3]


def test_max_retries_zero_makes_one_attempt(emu):
    emu.inject("POST", "/query", status=503, retry_after=0.05, times=3)
    with emu.client(max_retries=0) as client:
        with pytest.raises(InternalServerError):
            client.query(REASONER, "hello")
    assert len(calls(emu, "/query")) == 1


def test_more_retries_when_asked(emu):
    emu.inject("POST", "/query", status=500, retry_after=0.02, times=4)
    with emu.client(max_retries=4) as client:
        assert client.query(REASONER, "hello").status == "completed"
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2, 3, 4, 5]


def test_with_options_max_retries(emu, client):
    emu.inject("POST", "/query", status=503, retry_after=0.02, times=None)
    with pytest.raises(InternalServerError):
        client.with_options(max_retries=1).query(REASONER, "x")
    assert len(calls(emu, "/query")) == 2
    emu.clear_requests()
    with pytest.raises(InternalServerError):
        client.with_options(max_retries=3).query(REASONER, "x")
    assert len(calls(emu, "/query")) == 4
    emu.clear_faults()
    assert client.query(REASONER, "x").status == "completed"


@pytest.mark.parametrize("status", NOT_RETRYABLE)
def test_other_4xx_are_never_retried(emu, status):
    emu.inject("POST", "/query", status=status, retry_after=0.01, times=5)
    with emu.client(max_retries=3) as client:
        with pytest.raises(APIStatusError) as info:
            client.query(REASONER, "hello")
    assert info.value.status == status
    assert len(calls(emu, "/query")) == 1


def test_real_404_and_409_are_not_retried(emu, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("x")
    with emu.client(max_retries=3) as client:
        client.files.upload(path)
        with pytest.raises(APIStatusError):
            client.files.upload(path)
        with pytest.raises(APIStatusError):
            client.files.metadata("absent.txt")
    assert len(calls(emu, "/files", "POST")) == 2
    assert len(calls(emu, "/files/metadata/absent.txt")) == 1


def test_retry_after_is_honoured(emu):
    emu.inject("POST", "/query", status=503, retry_after=1.0, times=1)
    with emu.client(max_retries=1) as client:
        start = time.monotonic()
        client.query(REASONER, "hello")
        elapsed = time.monotonic() - start
    # Without Retry-After the first backoff would be 0.375-0.5 s.
    assert elapsed >= 0.95
    assert len(calls(emu, "/query")) == 2


def test_backoff_without_retry_after(emu):
    emu.inject("POST", "/query", status=502, times=1)
    with emu.client(max_retries=1) as client:
        start = time.monotonic()
        client.query(REASONER, "hello")
        elapsed = time.monotonic() - start
    # The first retry waits 0.5 s nominal with jitter down to 75 %.
    assert elapsed >= 0.37
    assert len(calls(emu, "/query")) == 2


def test_connection_reset_is_retried(emu):
    emu.inject("POST", "/query", action="reset", times=1)
    with emu.client(max_retries=1) as client:
        assert client.query(REASONER, "hello").status == "completed"
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2]


def test_connection_reset_every_time_raises_connection_error(emu):
    emu.inject("POST", "/query", action="reset", times=None)
    with emu.client(max_retries=1) as client:
        with pytest.raises(APIConnectionError) as info:
            client.query(REASONER, "hello")
    assert not isinstance(info.value, APITimeoutError)
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2]


def test_truncated_body_is_retried(emu):
    emu.inject("POST", "/query", action="truncate", times=1)
    with emu.client(max_retries=1) as client:
        result = client.query(REASONER, "hello")
    assert result.status == "completed" and result.text
    assert [r.attempt for r in calls(emu, "/query")] == [1, 2]


def test_truncated_body_every_time_is_a_connection_error(emu):
    emu.inject("POST", "/query", action="truncate", times=None)
    with emu.client(max_retries=1) as client:
        with pytest.raises(APIConnectionError):
            client.query(REASONER, "hello")
    assert len(calls(emu, "/query")) == 2


@pytest.mark.timeout(30)
def test_stalled_response_times_out_and_is_retried(emu):
    emu.inject("POST", "/query", action="stall", times=1)
    with emu.client(timeout=0.5, max_retries=1) as client:
        start = time.monotonic()
        result = client.query(REASONER, "hello")
        elapsed = time.monotonic() - start
    assert result.status == "completed"
    assert [r.attempt for r in calls(emu, "/query")][-1] == 2
    assert elapsed >= 0.5


@pytest.mark.timeout(30)
def test_stalled_response_every_time_raises_timeout(emu):
    emu.inject("POST", "/query", action="stall", times=None)
    with emu.client(timeout=0.3, max_retries=0) as client:
        start = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.query(REASONER, "hello")
        assert time.monotonic() - start < 10


@pytest.mark.timeout(30)
def test_delayed_answer_past_timeout_is_retried(emu):
    emu.inject("POST", "/query", delay=2.0, times=1)
    with emu.client(timeout=0.4, max_retries=1) as client:
        assert client.query(REASONER, "hello").status == "completed"
    assert len([r for r in calls(emu, "/query") if r.attempt == 2]) == 1


def test_gets_are_retried_too(emu, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("x")
    with emu.client(max_retries=2) as client:
        client.files.upload(path)
        emu.inject("GET", "/files/metadata", status=503, retry_after=0.02, times=2)
        assert [f.file_id for f in client.files.list()] == ["a.txt"]
        emu.inject("GET", "/models", status=429, retry_after=0.02, times=1)
        assert list(client.models.list())
        emu.inject("DELETE", "/files/delete/a.txt", status=500, retry_after=0.02, times=1)
        assert client.files.delete("a.txt").file_id == "a.txt"
    assert [r.attempt for r in calls(emu, "/files/metadata")] == [1, 2, 3]
    assert [r.attempt for r in calls(emu, "/models")] == [1, 2]
    assert [r.status for r in calls(emu, "/files/delete/a.txt")] == [500, 200]


def test_upload_retry_resends_the_whole_file(emu, tmp_path):
    content = os.urandom(300_000)
    path = tmp_path / "frame.png"
    path.write_bytes(content)
    emu.inject("POST", "/files", status=503, retry_after=0.02, times=1)
    with emu.client(max_retries=1) as client:
        record = client.files.upload(path)
        assert record.file_id == "frame.png"
        assert client.files.metadata("frame.png").num_bytes == len(content)
        assert client.files.download("frame.png", tmp_path / "back.png").read_bytes() == content
    attempts = calls(emu, "/files", "POST")
    assert [r.status for r in attempts] == [503, 200]
    assert attempts[0].body_len == attempts[1].body_len >= len(content)


def test_upload_reset_is_retried_and_stored_once(emu, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    emu.inject("POST", "/files", action="reset", times=1)
    with emu.client(max_retries=2) as client:
        assert client.files.upload(path).file_id == "notes.txt"
        assert [f.file_id for f in client.files.list()] == ["notes.txt"]


@pytest.mark.timeout(10)
def test_stalled_upload_response_times_out(emu, tmp_path):
    """A dead upload connection must not hang forever: the stall (read) timeout bounds it."""
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    emu.inject("POST", "/files", action="stall", times=1)
    with emu.client(max_retries=0, read_timeout=0.5, timeout=1.0) as client:
        start = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.files.upload(path)
        assert time.monotonic() - start < 10


@pytest.mark.timeout(30)
def test_silent_upload_server_times_out(emu, tmp_path):
    """A server that sends nothing for longer than read_timeout (and timeout) ends the upload."""
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    emu.inject("POST", "/files", delay=4.0, times=1)
    with emu.client(max_retries=0, read_timeout=0.5, timeout=1.0) as client:
        start = time.monotonic()
        with pytest.raises(APITimeoutError):
            client.files.upload(path)
        assert time.monotonic() - start < 3.5


def test_download_retried_on_server_error(emu, tmp_path):
    with emu.client(max_retries=1) as client:
        client.files.upload_base64("x.txt", b"payload")
        emu.inject("GET", "/files/download/x.txt", status=500, retry_after=0.02, times=1)
        assert client.files.download("x.txt", tmp_path / "x.txt").read_bytes() == b"payload"
    assert [r.status for r in calls(emu, "/files/download/x.txt")] == [500, 200]


def test_fault_on_one_route_leaves_others_alone(emu):
    emu.inject("POST", "/query", status=503, times=None)
    with emu.client(max_retries=0) as client:
        assert client.files.info()["num_files"] == 0
        with pytest.raises(InternalServerError):
            client.query(REASONER, "x")
        emu.clear_faults()
        assert client.query(REASONER, "x").status == "completed"


def test_upload_whose_response_was_lost_is_taken_as_ours(emu, tmp_path):
    """The first attempt stored the file but its answer was cut off; the retry's 409 is our own
    upload, so the call succeeds."""
    path = tmp_path / "notes.txt"
    path.write_text("stored on the first attempt")
    emu.inject("POST", "/files", action="truncate", times=1)
    with emu.client(max_retries=2) as client:
        record = client.files.upload(path)
        assert record.file_id == "notes.txt"
        assert [f.file_id for f in client.files.list()] == ["notes.txt"]
        assert client.files.metadata("notes.txt").num_bytes == path.stat().st_size
    assert len(calls(emu, "/files", "POST")) == 2


def test_base64_upload_whose_response_was_lost_is_taken_as_ours(emu):
    emu.inject("POST", "/files/base64", action="truncate", times=1)
    with emu.client(max_retries=2) as client:
        record = client.files.upload_base64("notes.txt", b"stored on the first attempt")
        assert record.file_id == "notes.txt"
        assert [f.file_id for f in client.files.list()] == ["notes.txt"]


# ---------------------------------------------------------------------------------------------
# Calls that are not safe to repeat. The platform has no idempotency keys: a POST that creates
# something (a bundle, a run, a blueprint, a lens) and whose answer was lost may have been carried
# out, so it is not sent again; failures that prove nothing was done are still retried.

def _quick_start(emu):
    with emu.client() as client:
        return next(iter(client.agents.bundles.list(query="Quick Start")))


def _doc(emu):
    with emu.client() as client:
        return client.agents.blueprints.get("osm").document


LENS_PIPELINE = [{"processor_name": "lens_noop_processor", "processor_config": {}}]


def _run(emu):
    bundle_id = _quick_start(emu).id
    return lambda c: c.agents.bundles.run(bundle_id, mode="serving")


def _create_blueprint(emu):
    document = _doc(emu)
    return lambda c: c.agents.blueprints.create("k1", document=document)


# name: (the route the fault is put on, the call under test, given the emulator)
CREATES = {
    "bundles.run": ("/agents/bundles/*", _run),
    "bundles.create": ("/agents/bundles", lambda emu: lambda c: c.agents.bundles.create("osm", name="Line 3 monitor")),
    "blueprints.create": ("/agents/blueprints", _create_blueprint),
    "lens.register": ("/lens/register", lambda emu: lambda c: c.lens.register("echo", model_pipeline=LENS_PIPELINE)),
}


def _on(emu, kind, operation, **options):
    from _helpers import run_on

    return run_on(kind, operation, api_key=emu.api_key, base_url=emu.base_url, **options)


def _posts(emu, route):
    """The POSTs the emulator received on ``route`` (``*`` matches any id)."""
    from fnmatch import fnmatchcase

    return [r for r in emu.requests if r.method.upper() == "POST" and fnmatchcase(r.path.rstrip("/"), "*" + route)]


@pytest.mark.parametrize("name", list(CREATES))
@pytest.mark.parametrize("action", ["truncate", "reset"])
def test_a_post_whose_answer_was_lost_is_not_sent_again(emu, client_kind, name, action):
    route, create = CREATES[name]
    operation = create(emu)
    emu.inject("POST", route, action=action, times=1)
    with pytest.raises(APIConnectionError) as info:
        _on(emu, client_kind, operation, max_retries=2)
    assert not isinstance(info.value, APITimeoutError)
    assert info.value.may_have_been_processed is True
    assert "may have been carried out" in str(info.value) and "not repeated" in str(info.value)
    assert len(_posts(emu, route)) == 1, [r.path for r in _posts(emu, route)]


def test_one_run_makes_one_agent_when_its_answer_is_cut(emu, client_kind):
    """QA's repro: ``bundles.run`` whose answer was cut off made two agents from one call."""
    run = _run(emu)
    emu.inject("POST", "/agents/bundles/*", action="truncate", times=1)
    with pytest.raises(APIConnectionError):
        _on(emu, client_kind, run)
    assert len(_on(emu, client_kind, lambda c: c.agents.instances.list())) == 1
    create = _create_blueprint(emu)
    emu.inject("POST", "/agents/blueprints", action="truncate", times=1)
    with pytest.raises(APIConnectionError) as info:  # was ConflictError: its own blueprint
        _on(emu, client_kind, create)
    assert info.value.may_have_been_processed
    assert _on(emu, client_kind, lambda c: c.agents.blueprints.get("k1")).blueprint_key == "k1"


@pytest.mark.timeout(30)
def test_a_post_that_timed_out_is_not_sent_again(emu, client_kind):
    emu.inject("POST", "/agents/bundles", action="stall", times=1)
    with pytest.raises(APITimeoutError) as info:
        _on(emu, client_kind, CREATES["bundles.create"][1](emu), timeout=0.5, max_retries=2)
    assert info.value.may_have_been_processed is True
    assert len(_posts(emu, "/agents/bundles")) == 1


@pytest.mark.parametrize("status", RETRYABLE)
def test_a_post_answered_with_a_retryable_status_is_retried(emu, client_kind, status):
    """The server answered, so nothing was done twice: the spec's rule applies to every call."""
    emu.inject("POST", "/agents/bundles", status=status, retry_after=0.01, times=1)
    bundle = _on(emu, client_kind, CREATES["bundles.create"][1](emu), max_retries=1)
    assert [r.status for r in _posts(emu, "/agents/bundles")] == [status, 201]
    mine = [b for b in _on(emu, client_kind, lambda c: c.agents.bundles.list()) if b.name == "Line 3 monitor"]
    assert [b.id for b in mine] == [bundle.id]


def test_calls_safe_to_repeat_are_still_retried_after_a_lost_answer(emu, client_kind):
    """GET/DELETE, a cancel (a repeat meets 409 already-terminal) and an agent's query (a repeated
    query changes nothing) are sent again."""
    agent = _on(emu, client_kind, _run(emu))
    emu.inject("GET", "/agents/bundles", action="reset", times=1)
    assert _on(emu, client_kind, lambda c: c.agents.bundles.list())
    emu.inject("POST", "/agents/instances/*/query", action="truncate", times=1)
    assert _on(emu, client_kind, lambda c: c.agents.instances.query(agent.id, {"text": "status?"}))
    emu.inject("POST", "/agents/instances/*/cancel", action="truncate", times=1)
    canceled = _on(emu, client_kind, lambda c: c.agents.instances.cancel(agent.id, ok_if_terminal=True))
    assert canceled.status == "canceled"
    assert len(_posts(emu, "/agents/instances/*/query")) == 2
    assert len(_posts(emu, "/agents/instances/*/cancel")) == 2


def test_a_connection_error_on_a_call_safe_to_repeat_does_not_say_it_was_not_repeated(emu):
    emu.inject("GET", "/models", action="reset", times=None)
    with emu.client(max_retries=1) as client:
        with pytest.raises(APIConnectionError) as info:
            list(client.models.list())
    assert info.value.may_have_been_processed is False
    assert "not repeated" not in str(info.value)


@pytest.mark.filterwarnings("ignore:the lens runtime is deprecated")
def test_a_connect_timeout_is_a_timeout_that_never_reached_the_server(client_kind):
    """No answer to connecting (an address that drops packets): nothing was sent, so even a POST
    that creates something is retried, and the error says so (``may_have_been_processed`` False)."""
    import socket

    from _helpers import run_on

    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())  # takes the queue's one place; nothing is accepted
        base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(APITimeoutError) as info:
            run_on(client_kind, lambda c: c.lens.register("echo", model_pipeline=LENS_PIPELINE),
                   api_key="k-local", base_url=base_url, connect_timeout=0.2, max_retries=1)
    assert info.value.may_have_been_processed is False
    assert "timed out" in str(info.value) and "not repeated" not in str(info.value)
    assert "k-local" not in str(info.value)


# Defect: a wait(timeout=20) whose poll met a 503 asking for 30 s ended at once, saying the job was
# "still unfinished after 20s".

def test_a_wait_ended_early_by_a_retry_after_past_its_timeout_says_so():
    from sensorium.errors import WaitTimeoutError
    from sensorium.testing import Emulator

    with Emulator(work_duration=30) as emu, emu.client() as client:
        client.files.upload_base64("in.csv", b"time,a\n" + b"".join(b"%d,%d\n" % (i, i % 7) for i in range(50)))
        run = client.agents.bundles.run(client.agents.bundles.create("osm", name="x").id, "in.csv")
        emu.inject("GET", "/agents/instances/*", status=503, retry_after=30, times=1)
        with pytest.raises(WaitTimeoutError, match=r"asked to be polled again in 30s, past the 20s left of the wait's timeout of 20s"):
            client.agents.instances.wait(run.id, timeout=20)
        # A short Retry-After on every poll: the wait ran its whole timeout, and says just that.
        emu.inject("GET", "/agents/instances/*", status=503, retry_after=1, times=None)
        with pytest.raises(WaitTimeoutError, match=r"is still \w+ after 3s") as info:
            client.agents.instances.wait(run.id, timeout=3)
        assert "asked to be polled again" not in str(info.value)


# Defect: a query's own wait (max_wait_time_sec) expiring as 504 was retried like a gateway blip:
# the model ran three times and the caller waited three times the deadline they set.

def test_a_query_whose_own_wait_expires_is_not_sent_again(client_kind):
    from sensorium.errors import GatewayTimeoutError
    from sensorium.testing import Emulator

    with Emulator(query_delay=2.0) as emu:
        with pytest.raises(GatewayTimeoutError):
            run_on(client_kind, lambda c: c.query(REASONER, "hi", max_wait_time_sec=0.5),
                   api_key=emu.api_key, base_url=emu.base_url)
        assert [r.status for r in emu.requests if r.path.endswith("/query")] == [504]
        # Without a wait of its own, a 504 is the gateway's, and the retry rule retries it.
        emu.set_query_delay(0.0)
        emu.inject("POST", "/query", status=504, times=1)
        run_on(client_kind, lambda c: c.query(REASONER, "hi"), api_key=emu.api_key, base_url=emu.base_url)
        assert [r.status for r in emu.requests if r.path.endswith("/query")][-2:] == [504, 200]


def test_callers_refused_together_by_a_rate_limit_do_not_all_come_back_together():
    """Thirty threads sharing a client, one query each, against 20 requests/s: the 429's
    `retry-after-ms` was slept exactly, so the refused callers came back at the same instant,
    were refused together again, and 8 of them spent their retries in 0.1 s. The backoff's
    jitter now goes on top of the server's wait, and every caller gets its answer."""
    from concurrent.futures import ThreadPoolExecutor

    from sensorium.testing import Emulator

    with Emulator(rate_limit=20) as emu, emu.client() as client:
        with ThreadPoolExecutor(30) as pool:
            answers = list(pool.map(lambda i: client.query(REASONER, f"q{i}").text, range(30)))
        refused = [r for r in emu.requests if r.path.endswith("/query") and r.status == 429]
    assert len(answers) == 30 and all(answers)
    assert refused, "the limit never refused a request: the test no longer tests the stampede"


def test_polls_of_waits_started_together_are_spread():
    """A hundred gathered waits polled in lockstep: a hundred GETs at each step."""
    from itertools import islice

    from sensorium._waiting import FIRST_POLL_SECONDS, POLL_GROWTH, _poll_delays

    first, second = list(islice(_poll_delays(), 8)), list(islice(_poll_delays(), 8))
    assert first != second
    for step, delay in enumerate(first):
        nominal = FIRST_POLL_SECONDS * POLL_GROWTH ** step
        assert 0.75 * nominal <= delay <= nominal
