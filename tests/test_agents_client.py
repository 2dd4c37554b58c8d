"""The agents client on its own: argument checks before sending, how queries and paths go out,
the agents mount, and ``wait``/``cancel`` semantics against a scripted server (the status lag,
a failed run, a timeout, a 409 on cancel). The end-to-end lifecycle against the emulator is in
test_agents.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import pytest

import sensorium
from _helpers import run_on
from _fake_server import FakeServer, response
from sensorium.errors import (
    AgentRunError,
    APIResponseValidationError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    WaitTimeoutError,
)
from sensorium.types import Agent

AGENT = {"id": "agt_1", "name": "b", "bundle_id": "bnd_1", "status": "running", "created_at": "2026-11-23T10:00:00Z",
         "connectors": {"source": [{"type": "file", "id": "a.csv", "format": "csv"}], "sink": None},
         "job_id": "job_1", "started_at": None, "completed_at": None, "error": None, "brand_new_field": 7}


@pytest.fixture
def call(client_kind: str) -> Callable[..., Any]:
    """``call(base_url, lambda client: ...)`` on a ``Client`` or, awaited, an ``AsyncClient``."""
    return lambda base_url, operation, **options: run_on(
        client_kind, operation, **{"api_key": "sk-test", "max_retries": 0, "base_url": base_url, **options})


def routes(table: dict[str, Callable[[], bytes]]) -> Callable[[bytes], list[Any]]:
    """A FakeServer script answering by "METHOD /path" (query ignored)."""

    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
        key = f"{method} {urlsplit(target).path}"
        return [table[key]() if key in table else response(404, b'{"errors": [{"code": "not_found", "message": "?"}]}')]

    return script


def ok(body: Any) -> Callable[[], bytes]:
    return lambda: response(200, json.dumps(body).encode())


# Checks before sending


@pytest.mark.parametrize(
    "operation, argument",
    [
        (lambda c: c.agents.bundles.create("osm", name="x", model="Newton::v"), "model"),
        (lambda c: c.agents.bundles.create("osm", name=""), "name"),
        (lambda c: c.agents.bundles.run("bnd_1"), "source"),
        (lambda c: c.agents.bundles.run("bnd_1", []), "source"),
        (lambda c: c.agents.bundles.run("bnd_1", [{"id": "x"}]), "source"),
        (lambda c: c.agents.blueprints.create("k"), "document"),
        (lambda c: c.agents.blueprints.create("k", yaml_document="graph: [unclosed"), "yaml_document"),
        (lambda c: c.agents.blueprints.create("k", document={"graph": {"edges": []}},
                                              yaml_document="graph:\n  edges: [{from: a, to: b}]\n"), "document"),
        (lambda c: c.agents.blueprints.get(".."), "reference"),
        (lambda c: c.agents.instances.get("agt_\ud800"), "agent_id"),
        (lambda c: c.agents.bundles.list(order="up"), "order"),
        (lambda c: c.agents.bundles.list(sort="size"), "sort"),
        (lambda c: c.agents.optimizations.create("blp_1", objective="f1", validation_examples=["a.csv"],
                                                 max_trials=0), "max_trials"),
        (lambda c: c.agents.evals.create("blp_1", []), "examples"),
        (lambda c: c.agents.instances.wait("agt_1", timeout=-1), "timeout"),
        (lambda c: c.agents.instances.query("agt_1", []), "data"),
        (lambda c: c.agents.instances.query("agt_1", __import__("numpy").array([])), "data"),
        (lambda c: c.agents.instances.query("agt_1", __import__("numpy").zeros((2, 0))), "data"),
    ],
)
def test_bad_arguments_are_refused_before_sending(emu, call, operation, argument):
    def run(client: Any) -> Any:
        result = operation(client)
        return result if not asyncio.iscoroutine(result) else result

    with pytest.raises(InvalidArgumentError) as info:
        call(emu.base_url, run, api_key=emu.api_key)
    assert info.value.argument == argument, str(info.value)
    assert emu.requests == []


def test_list_arguments_are_checked_when_the_list_is_made(emu, client):
    with pytest.raises(InvalidArgumentError) as info:
        client.agents.blueprints.list(after="a", before="b")
    assert info.value.argument == "before"
    with pytest.raises(InvalidArgumentError) as info:
        client.agents.instances.logs("agt_1", limit=1001)
    assert info.value.argument == "limit"
    assert emu.requests == []


def test_yaml_syntax_errors_name_the_line(client):
    text = "graph:\n  edges:\n    - {from: a, to: b\nconnectors: {}\n"
    with pytest.raises(InvalidArgumentError) as info:
        client.agents.blueprints.create("k", yaml_document=text)
    assert "line" in str(info.value) and info.value.argument == "yaml_document"


BLUEPRINT = {"id": "blp_1", "blueprint_key": "k", "document": {"graph": {"edges": []}}, "is_active": True}


def test_document_and_yaml_in_agreement_are_both_sent(call):
    doc = {"graph": {"edges": [{"from": "src", "to": "sink"}]}, "values": {"k": 1}}
    text = "graph:\n  edges:\n    - {from: src, to: sink}\nvalues: {k: 1}\n"
    with FakeServer(routes({"POST /v0.5/agents/blueprints": ok(BLUEPRINT)})) as server:
        bp = call(server.base_url, lambda c: c.agents.blueprints.create("k", document=doc, yaml_document=text))
        assert json.loads(server.bodies[0]) == {"blueprint_key": "k", "document": doc, "yaml_document": text}
    assert bp.id == "blp_1" and bp.is_active


def test_yaml_goes_out_as_given_without_a_local_reading_of_it(call):
    """The spec lets yaml_document come alone and the platform parse it. A local (PyYAML, YAML
    1.1) reading sent beside it as `document` turned `normalize: yes` into true, `0755` into 493
    and a date into a date object, which the platform then refused or stored wrongly."""
    text = "graph:\n  edges: []\nvalues:\n  normalize: yes\n  code: 0755\n  since: 2024-01-01\n"
    with FakeServer(routes({"POST /v0.5/agents/blueprints": ok(BLUEPRINT)})) as server:
        call(server.base_url, lambda c: c.agents.blueprints.create("k", document=text))
        call(server.base_url, lambda c: c.agents.blueprints.create("k", yaml_document=text))
        for body in server.bodies:
            assert json.loads(body) == {"blueprint_key": "k", "yaml_document": text}


# How requests go out


def test_sources_become_data_refs_and_booleans_go_lowercase(emu, client):
    from sensorium.types import FileRecord

    table = {"POST /v0.5/agents/bundles/bnd%201%2Fx/run": ok(AGENT)}
    with FakeServer(routes(table)) as server:
        with sensorium.Client(api_key="k", base_url=server.base_url) as c:
            c.agents.bundles.run("bnd 1/x", ["a.CSV", FileRecord(file_id="v.mp4"), {"type": "dataset", "id": "d1"}],
                                 sink="out.jsonl")
        body = server.bodies[0]
    with pytest.raises(NotFoundError):
        client.agents.bundles.get("bnd_1", include_latest_runs=True)
    (get,) = emu.requests
    assert json.loads(body) == {"connectors": {
        "source": [{"type": "file", "id": "a.CSV", "format": "csv"}, {"type": "file", "id": "v.mp4", "format": "mp4"},
                   {"type": "dataset", "id": "d1"}],
        "sink": {"type": "file", "id": "out.jsonl", "format": "jsonl"}}}
    assert parse_qs(get.query) == {"include_latest_runs": ["true"]}


def test_agents_base_url_moves_only_the_agents_routes(emu, monkeypatch):
    root = emu.base_url.rsplit("/v0.5", 1)[0]
    with emu.client(agents_base_url=root + "/") as client:
        assert client.agents_base_url == root
        with pytest.raises(NotFoundError):
            client.agents.instances.get("agt_1")
        client.models.list().first_page()
    monkeypatch.setenv("SENSORIUM_AGENTS_BASE_URL", root)
    # A client of its own: the emulator's clients give every address, so none comes from the environment.
    with sensorium.Client(api_key=emu.api_key, base_url=emu.base_url) as from_env:
        assert from_env.agents_base_url == root
    assert [r.path for r in emu.requests] == ["/agents/instances/agt_1", "/v0.5/models"]


def test_a_404_that_is_not_the_platform_envelope_suggests_the_mount(call):
    html = lambda: response(404, b"<html>Not Found</html>")  # noqa: E731
    with FakeServer(routes({"GET /v0.5/agents/instances/agt_1": html})) as server:
        with pytest.raises(NotFoundError) as info:
            call(server.base_url, lambda c: c.agents.instances.get("agt_1"))
    assert "agents_base_url" in str(info.value)


def test_records_keep_unknown_fields_and_the_json_as_received(call):
    with FakeServer(routes({"GET /v0.5/agents/instances/agt_1": ok(AGENT)})) as server:
        agent = call(server.base_url, lambda c: c.agents.instances.get("agt_1"))
    assert isinstance(agent, Agent) and agent.status == "running" and agent.started_at is None
    assert agent.extra == {"brand_new_field": 7}
    assert agent.to_dict() == AGENT


def test_a_record_changed_with_dataclasses_replace_says_its_own_values():
    import dataclasses

    from sensorium.types import Bundle

    agent = Agent.from_dict(AGENT)
    changed = dataclasses.replace(agent, status="completed", name="renamed")
    assert changed.to_dict()["status"] == "completed" and changed.to_dict()["name"] == "renamed"
    assert changed.to_dict()["brand_new_field"] == 7  # unknown fields are kept
    assert agent.to_dict() == AGENT  # the original still says what was received
    # Nested records, alone or in a list, come out as JSON.
    bundle = Bundle.from_dict({"id": "bnd_1", "latest_runs": [{"id": "job_1", "status": "RUNNING"}]})
    again = dataclasses.replace(bundle, name="x")
    assert json.loads(json.dumps(again.to_dict()))["latest_runs"] == [{"id": "job_1", "status": "RUNNING"}]


# wait() and cancel() semantics


def _logs(*event_types: str) -> dict[str, Any]:
    rows = [{"id": f"log_{i}", "created_at": f"2026-11-23T10:00:0{i}Z", "level": "ERROR" if t == "job.failed" else "INFO",
             "event_type": t, "message": "boom" if t == "job.failed" else t} for i, t in enumerate(event_types)]
    return {"data": list(reversed(rows)), "has_more": False, "next_cursor": None}


def test_wait_trusts_the_logs_when_the_status_lags(call):
    polls = {"n": 0}

    def logs() -> bytes:
        polls["n"] += 1
        events = ["job.admitted", "job.started"] + (["job.completed"] if polls["n"] >= 2 else [])
        return response(200, json.dumps(_logs(*events)).encode())

    table = {"GET /v0.5/agents/instances/agt_1": ok(AGENT), "GET /v0.5/agents/instances/agt_1/logs": logs}
    with FakeServer(routes(table)) as server:
        agent = call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=30))
    assert agent.status == "completed" and agent.id == "agt_1"
    assert polls["n"] == 2


@pytest.mark.parametrize("status", ["canceled", "cancelled", "completed"])
def test_wait_returns_at_once_on_a_terminal_status(call, status):
    table = {"GET /v0.5/agents/instances/agt_1": ok({**AGENT, "status": status})}
    with FakeServer(routes(table)) as server:
        agent = call(server.base_url, lambda c: c.agents.instances.wait("agt_1"))
        assert agent.status == status and agent.is_terminal
        assert len(server.requests) == 1


def test_a_failed_run_raises_with_the_agent_its_error_and_logs(call, monkeypatch):
    # The record never leaves "running" here: the failure is raised with the lagging record once
    # the bounded re-reading of it ends (at once, with the bound at 0).
    import sensorium._waiting

    monkeypatch.setattr(sensorium._waiting, "FAILED_RECORD_SECONDS", 0.0)
    table = {"GET /v0.5/agents/instances/agt_1": ok({**AGENT, "status": "running"}),
             "GET /v0.5/agents/instances/agt_1/logs": ok(_logs("job.admitted", "job.started", "job.failed"))}
    with FakeServer(routes(table)) as server:
        with pytest.raises(AgentRunError) as info:
            call(server.base_url, lambda c: c.agents.instances.wait("agt_1"))
    assert info.value.agent.status == "failed" and info.value.error == "boom"
    assert "boom" in str(info.value) and info.value.logs[0].event_type == "job.failed"


def test_a_failure_seen_in_the_record_carries_the_logs_as_they_stand(call):
    """The record showed the failure in a round that read no logs: AgentRunError.logs were the
    lines of an earlier round, without the run's own job.failed line."""
    state = {"record_reads": 0}

    def record() -> bytes:
        state["record_reads"] += 1
        failed = state["record_reads"] >= 2
        body = {**AGENT, "status": "failed", "error": "boom"} if failed else AGENT
        return response(200, json.dumps(body).encode())

    def logs() -> bytes:
        events = ["job.admitted", "job.started"] + (["job.failed"] if state["record_reads"] >= 2 else [])
        return response(200, json.dumps(_logs(*events)).encode())

    table = {"GET /v0.5/agents/instances/agt_1": record, "GET /v0.5/agents/instances/agt_1/logs": logs}
    with FakeServer(routes(table)) as server:
        with pytest.raises(AgentRunError) as info:
            call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=30))
    assert state["record_reads"] == 2, "the failure was seen in the record"
    assert info.value.error == "boom" and [log.event_type for log in info.value.logs][0] == "job.failed"


def test_wait_times_out_with_the_last_record(call):
    table = {"GET /v0.5/agents/instances/agt_1": ok(AGENT),
             "GET /v0.5/agents/instances/agt_1/logs": ok(_logs("job.started"))}
    with FakeServer(routes(table)) as server:
        with pytest.raises(WaitTimeoutError) as info:
            call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=0.5))
    assert isinstance(info.value, TimeoutError) and info.value.record.id == "agt_1"


def test_cancel_ok_if_terminal_turns_only_the_409_into_success(call):
    conflict = lambda: response(409, b'{"errors": [{"code": "conflict", "message": "Agent already terminal."}]}')  # noqa: E731
    done = {**AGENT, "status": "completed"}
    table = {"POST /v0.5/agents/instances/agt_1/cancel": conflict, "GET /v0.5/agents/instances/agt_1": ok(done)}
    with FakeServer(routes(table)) as server:
        with pytest.raises(ConflictError):
            call(server.base_url, lambda c: c.agents.instances.cancel("agt_1"))
        agent = call(server.base_url, lambda c: c.agents.instances.cancel("agt_1", ok_if_terminal=True))
        assert agent.status == "completed"
        with pytest.raises(NotFoundError):
            call(server.base_url, lambda c: c.agents.instances.cancel("agt_2", ok_if_terminal=True))


@pytest.mark.parametrize("ended", ["canceled", "completed"])
def test_a_409_after_a_lost_cancel_answer_is_settled_by_the_record(call, ended):
    """The cancel's first answer was cut off and its repeat met 409: a canceled record means the
    lost attempt was the cancel (the record, not ConflictError); a run that ended otherwise keeps
    the 409."""
    cancels = iter([response(200, b'{"id": "agt_1", "status": "canc', length=200),
                    response(409, b'{"errors": [{"code": "conflict", "message": "Agent already terminal."}]}')])
    table = {"POST /v0.5/agents/instances/agt_1/cancel": lambda: next(cancels),
             "GET /v0.5/agents/instances/agt_1": ok({**AGENT, "status": ended})}
    with FakeServer(routes(table)) as server:
        if ended == "canceled":
            agent = call(server.base_url, lambda c: c.agents.instances.cancel("agt_1"), max_retries=1)
            assert isinstance(agent, Agent) and agent.status == "canceled"
        else:
            with pytest.raises(ConflictError) as info:
                call(server.base_url, lambda c: c.agents.instances.cancel("agt_1"), max_retries=1)
            assert info.value.after_lost_response
        assert [line.split(b" ")[0] for line in server.requests] == [b"POST", b"POST", b"GET"]


def test_a_record_missing_its_id_is_a_validation_error_keeping_the_answer(call):
    """A 200 record without its required field raised a bare TypeError from the constructor."""
    table = {"GET /v0.5/agents/instances/agt_1": ok({"status": "running", "note": "x" * 5000}),
             "GET /v0.5/agents/nodes/registry": ok({"data": [{"kind": "source"}], "has_more": False}),
             "GET /v0.5/agents/bundles": ok({"data": [{"name": "no id"}], "has_more": False, "next_cursor": None})}
    with FakeServer(routes(table)) as server:
        for operation, named in [(lambda c: c.agents.instances.get("agt_1"), "'id'"),
                                 (lambda c: c.agents.nodes.registry(), "'key'"),
                                 (lambda c: c.agents.bundles.list(), "'id'")]:
            with pytest.raises(APIResponseValidationError) as info:
                call(server.base_url, operation)
            assert named in str(info.value) and len(str(info.value)) < 500
            assert json.loads(info.value.body)
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.instances.get("agt_1"))
        assert json.loads(info.value.body) == {"status": "running", "note": "x" * 5000}, "the whole answer"


# A status of the wrong type: 3 is refused, not read as the text "3" (which no wait could end on).
WRONG_STATUSES = [3, {"state": "completed"}, ["completed"], True]


@pytest.mark.parametrize("status", WRONG_STATUSES, ids=repr)
@pytest.mark.parametrize("resource, path, record", [("instances", "instances", "Agent"), ("evals", "evals", "Eval"),
                                                    ("optimizations", "optimizations", "Optimization")])
def test_a_status_of_the_wrong_type_ends_the_wait_naming_it(call, resource, path, record, status):
    """wait() raised a bare AttributeError ('int' object has no attribute 'lower')."""
    body = {"id": "x_1", "status": status}
    table = {f"GET /v0.5/agents/{path}/x_1": ok(body), f"GET /v0.5/agents/{path}/x_1/logs": ok(_logs("job.started"))}
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: getattr(c.agents, resource).wait("x_1", timeout=30))
    assert "'status'" in str(info.value) and record in str(info.value)
    assert json.loads(info.value.body) == body


@pytest.mark.parametrize("status", WRONG_STATUSES, ids=repr)
def test_is_terminal_refuses_a_status_of_the_wrong_type(status):
    agent = Agent.from_dict({"id": "agt_1", "status": status})
    with pytest.raises(APIResponseValidationError, match="'status'") as info:
        agent.is_terminal
    assert json.loads(info.value.body) == {"id": "agt_1", "status": status}
    assert not Agent.from_dict({"id": "agt_1"}).is_terminal, "no status yet is not an end"
    assert not Agent.from_dict({"id": "agt_1", "status": "brand-new-state"}).is_terminal


@pytest.mark.parametrize("error, text", [
    ({"code": "oom", "message": "CUDA out of memory"}, "CUDA out of memory"),
    ([{"code": "oom", "message": None}], "oom"),
    (5, "5"),
])
def test_a_failed_runs_error_of_another_shape_reads_as_its_message(call, error, text):
    table = {"GET /v0.5/agents/instances/agt_1": ok({**AGENT, "status": "failed", "error": error}),
             "GET /v0.5/agents/instances/agt_1/logs": ok(_logs("job.started"))}
    with FakeServer(routes(table)) as server:
        with pytest.raises(AgentRunError) as info:
            call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=30))
    assert info.value.error == text and str(info.value) == f"agent agt_1 failed: {text}"


@pytest.mark.parametrize("logs", [
    {"data": None, "has_more": False}, None, {"data": [None, 5]}, {"data": 5}, {"data": {"rows": []}}, "logs",
    {"data": [{"id": "log_1", "event_type": ["job.completed"], "message": {"text": "x"}}]},
], ids=repr)
def test_a_logs_feed_of_odd_shapes_leaves_the_wait_to_the_status(call, logs):
    """`data: null` in the logs answer raised TypeError out of wait(); any answer of the wrong
    shape is now a logs feed that failed: the wait goes on from the record's status."""
    reads = {"record": 0}

    def record() -> bytes:
        reads["record"] += 1
        status = "running" if reads["record"] < 2 else "completed"
        return response(200, json.dumps({**AGENT, "status": status}).encode())

    table = {"GET /v0.5/agents/instances/agt_1": record, "GET /v0.5/agents/instances/agt_1/logs": ok(logs)}
    with FakeServer(routes(table)) as server:
        agent = call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=60))
    assert agent.status == "completed" and reads["record"] == 2


@pytest.mark.parametrize("value", [None, 12345, {"value": "agt_1"}])
def test_a_run_answered_without_a_usable_id_is_refused_saying_it_may_have_started(call, value):
    """`bundles.run` answered `id: null` returned Agent(id=None), and the next call blamed the
    caller's argument. The POST is not sent again: the platform said it ran."""
    table = {"POST /v0.5/agents/bundles/bnd_1/run": ok({"id": value, "status": "running", "bundle_id": "bnd_1"})}
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.bundles.run("bnd_1", "a.csv"))
        assert len(server.requests) == 1
    message = str(info.value)
    assert "'id'" in message and "Agent" in message and "may have" in message
    # A missing id reads the same way.
    table = {"POST /v0.5/agents/bundles/bnd_1/run": ok({"status": "running"})}
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.bundles.run("bnd_1", "a.csv"))
    assert "'id'" in str(info.value) and "may have" in str(info.value)
    # A read changes nothing: no such note.
    table = {"GET /v0.5/agents/instances/agt_1": ok({"id": value, "status": "running"})}
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.instances.get("agt_1"))
    assert "'id'" in str(info.value) and "may have" not in str(info.value)


def test_download_results_with_results_of_the_wrong_shape_writes_the_others(call, tmp_path):
    """A result whose `data` is no object, or whose `filename` or `ref` is of another JSON type,
    raised a bare AttributeError or TypeError and nothing was written: each such result fails
    alone, with a validation error naming the field."""
    results = [{"id": "res_1", "data": "oops"}, {"id": "res_2", "data": {"ref": ["/files/download/a"], "filename": "a"}},
               {"id": "res_3", "data": {"ref": "/files/download/c.csv", "filename": 7}},
               {"id": "res_4", "data": {"ref": "/files/download/d.csv", "filename": "d.csv"}}]
    table = {"GET /v0.5/agents/instances/agt_1/results": ok({"data": results, "has_more": False}),
             "GET /v0.5/files/download/d.csv": lambda: response(200, b"d")}
    with FakeServer(routes(table)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.instances.download_results("agt_1", tmp_path))
    assert info.value.written == [tmp_path / "d.csv"] and (tmp_path / "d.csv").read_bytes() == b"d"
    failed = info.value.failed
    assert list(failed) == ["res_1", "res_2", "res_3"]
    assert "'data'" in str(failed["res_1"]) and "'data.ref'" in str(failed["res_2"])
    assert "'data.filename'" in str(failed["res_3"])


def test_result_fields_of_the_wrong_type_name_the_field():
    from sensorium.types import AgentResult

    for data, field in [("oops", "'data'"), ({"filename": 7}, "'data.filename'"), ({"ref": {"u": 1}}, "'data.ref'")]:
        result = AgentResult.from_dict({"id": "res_1", "data": data})
        with pytest.raises(APIResponseValidationError, match=field):
            result.filename if "ref" not in field else result.ref
    assert AgentResult.from_dict({"id": "res_1", "data": None}).filename is None
    assert AgentResult.from_dict({"id": "res_1", "data": {"num_bytes": "12"}}).num_bytes is None


def test_download_results_follows_presigned_urls_without_the_key(call, tmp_path):
    from urllib.parse import urlsplit as split

    state: dict[str, Any] = {}

    def script(head: bytes) -> list[Any]:
        method, target = head.split(b"\r\n")[0].decode().split(" ")[:2]
        path = split(target).path
        if path == "/v0.5/agents/instances/agt_1/results":
            body = {"data": [
                {"id": "res_1", "port_name": "output", "data": {"filename": "../escape.csv", "num_bytes": 3,
                                                                "ref": state["url"] + "/storage/out.csv?sig=abc"}},
                {"id": "res_2", "port_name": "output", "data": {"filename": "b.json", "num_bytes": 2,
                                                                "ref": "/files/download/b.json"}}],
                "has_more": False, "next_cursor": None}
            return [response(200, json.dumps(body).encode())]
        if path == "/storage/out.csv":
            state["storage_auth"] = b"authorization:" in head.lower()
            return [response(200, b"a,b")]
        if path == "/v0.5/files/download/b.json":
            state["api_auth"] = b"authorization: bearer sk-test" in head.lower()
            return [response(200, b"{}")]
        return [response(404, b"{}")]

    with FakeServer(script) as server:
        state["url"] = server.base_url.rsplit("/v0.5", 1)[0]
        paths = call(server.base_url, lambda c: c.agents.instances.download_results("agt_1", tmp_path / "out"))
    assert [p.name for p in paths] == ["escape.csv", "b.json"], "a server-given name stays inside the folder"
    assert all(p.parent == tmp_path / "out" for p in paths)
    assert (tmp_path / "out" / "escape.csv").read_bytes() == b"a,b"
    assert state == {"url": state["url"], "storage_auth": False, "api_auth": True}


def test_records_from_the_wire_notes():
    """Literal JSON of the shapes public usage shows (wire-notes, Agents)."""
    from sensorium.types import AgentLog, AgentResult, Eval, Optimization, Trial

    result = AgentResult.from_dict(json.loads('{"id": "res_1", "port_name": "output", "data": {"filename": '
                                              '"agt_1__output_a.csv", "num_bytes": 10, "ref": "/files/download/'
                                              'agt_1__output_a.csv", "file_extension": "csv", "expires_at": null}, '
                                              '"created_at": "2026-11-23T10:00:00.000000Z"}'))
    assert result.filename == "agt_1__output_a.csv" and result.ref.startswith("/files/download/")
    log = AgentLog.from_dict(json.loads('{"id": "log_1", "created_at": "2026-11-23T10:00:00.000000Z", '
                                        '"level": "INFO", "event_type": "job.completed", "message": "done"}'))
    assert log.event_type == "job.completed"
    trial = Trial.from_dict(json.loads('{"id": "otr_1", "trial_number": 0, "status": "completed", '
                                       '"objective_value": 0.81, "metrics_report": {}, "trial_values": {"k": 5}}'))
    assert trial.objective_value == 0.81 and trial.trial_values == {"k": 5}
    opt = Optimization.from_dict(json.loads('{"id": "opt_1", "status": "running", "progress": {"completed": 1}, '
                                            '"budget": {"max_trials": 4}}'))
    assert opt.budget == {"max_trials": 4} and opt.progress == {"completed": 1}
    ev = Eval.from_dict(json.loads('{"id": "evl_1", "status": "completed", "metrics_report": {"targets": {"state": '
                                   '{"class_names": ["a"], "confusion_matrix": [[1]]}}}}'))
    assert ev.metrics_report["targets"]["state"]["confusion_matrix"] == [[1]]


# Checks before sending: strict booleans, values the spec fixes


def _with_emulator(emu: Any, client_kind: str) -> Callable[..., Any]:
    return lambda operation: run_on(client_kind, operation, api_key=emu.api_key, base_url=emu.base_url)


DOC = {"graph": {"edges": [{"from": "source", "to": "sink"}]},
       "connectors": {"source": {"key": "MultiModalSource", "config": {}}, "sink": {"key": "RecordsSink", "config": {}}}}


@pytest.mark.parametrize("operation, argument", [
    (lambda c: c.agents.instances.list(status=True), "status"),
    (lambda c: c.agents.blueprints.create("k", document=DOC, replacement_of=5), "replacement_of"),
    (lambda c: c.agents.bundles.create("osm", name="n", description=5), "description"),
    (lambda c: c.agents.blueprints.list(before=5), "before"),
    (lambda c: c.agents.bundles.run("bnd_1", b"a.csv"), "source"),
    (lambda c: c.agents.instances.download_results("agt_1", 5), "directory"),
])
def test_wrong_types_are_refused_naming_the_argument(emu, client_kind, operation, argument):
    with pytest.raises(TypeError) as info:
        _with_emulator(emu, client_kind)(operation)
    assert str(info.value).startswith(f"{argument}:")
    assert emu.requests == []


@pytest.mark.parametrize("operation, argument", [
    # Booleans are True or False only: canonical="false" is truthy, and published the blueprint
    # to every organization.
    (lambda c: c.agents.blueprints.create("k", document=DOC, canonical="false"), "canonical"),
    (lambda c: c.agents.blueprints.list(bundles_count="yes"), "bundles_count"),
    (lambda c: c.agents.blueprints.get("osm", yaml="no"), "yaml"),
    (lambda c: c.agents.bundles.get("bnd_1", include_latest_runs="no"), "include_latest_runs"),
    (lambda c: c.agents.evals.create("blp_1", "a.csv", emit_predictions="yes"), "emit_predictions"),
    (lambda c: c.agents.instances.cancel("agt_1", ok_if_terminal="no"), "ok_if_terminal"),
    (lambda c: c.agents.instances.wait("agt_1", progress="no"), "progress"),
    (lambda c: c.batch.jobs.cancel("job_1", ok_if_terminal=1), "ok_if_terminal"),
    (lambda c: c.lens.sessions.stream("lsn-1", heartbeats="no"), "heartbeats"),
    (lambda c: c.agents.bundles.run("bnd_1", "a.csv", mode="batch"), "mode"),  # CHOICES: mode is "serving"
    (lambda c: c.agents.bundles.run("bnd_1", "a.csv", mode="Serving"), "mode"),
    (lambda c: c.agents.instances.list(status="done"), "status"),  # not a state of the Agent table
    (lambda c: c.agents.bundles.create("osm", name="n", models={"classifier": 5}), "models"),
    (lambda c: c.agents.bundles.create("osm", name=" "), "name"),
    (lambda c: c.agents.optimizations.create("blp_1", objective=None, validation_examples="a.csv", max_trials=1),
     "objective"),
    (lambda c: c.agents.blueprints.list(after=""), "after"),
    (lambda c: c.agents.blueprints.create("k", document=DOC, replacement_of=""), "replacement_of"),
    (lambda c: c.agents.blueprints.create(" ", document=DOC), "blueprint_key"),
    (lambda c: c.agents.evals.create("blp_1", {"inputs": []}), "examples"),
])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the lens case warns that lens is deprecated
def test_values_the_spec_rules_out_are_refused_before_sending(emu, client_kind, operation, argument):
    with pytest.raises(InvalidArgumentError) as info:
        _with_emulator(emu, client_kind)(operation)
    assert info.value.argument == argument, str(info.value)
    assert emu.requests == []


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), float("-inf"), -1, "5", True])
def test_wait_refuses_a_timeout_that_is_not_finite_seconds(emu, client_kind, timeout):
    """NaN never compares as expired: a wait given it never timed out."""
    waits = [lambda c: c.agents.instances.wait("agt_1", timeout=timeout),
             lambda c: c.agents.evals.wait("evl_1", timeout=timeout),
             lambda c: c.agents.optimizations.wait("opt_1", timeout=timeout),
             lambda c: c.batch.jobs.wait("job_1", timeout=timeout),
             lambda c: c.fine_tuning.jobs.wait("ftj_1", timeout=timeout)]
    for wait in waits:
        with pytest.raises(InvalidArgumentError) as info:
            _with_emulator(emu, client_kind)(wait)
        assert info.value.argument == "timeout"
    assert emu.requests == []


def test_yaml_and_document_that_agree_as_the_platform_reads_yaml_are_sent(call):
    """`yes`, `0755` and a date are text to the platform (YAML 1.2); PyYAML's YAML 1.1 reading
    (true, 493, a date) made the client call this document and YAML different."""
    doc = {"graph": {"edges": []}, "values": {"normalize": "yes", "code": "0755", "since": "2024-01-01"}}
    text = "graph: {edges: []}\nvalues:\n  normalize: yes\n  code: 0755\n  since: 2024-01-01\n"
    with FakeServer(routes({"POST /v0.5/agents/blueprints": ok(BLUEPRINT)})) as server:
        call(server.base_url, lambda c: c.agents.blueprints.create("k", document=doc, yaml_document=text))
        assert json.loads(server.bodies[0]) == {"blueprint_key": "k", "document": doc, "yaml_document": text}


# wait() under a timeout whose polls fail


def test_a_wait_timeout_bounds_the_retries_of_its_polls(emu, client_kind):
    """503 with Retry-After: 10 on every status read: wait(timeout=1) used to sleep through the
    core's retries (20 s) and raise the 503. It now gives up when the server asks to come back
    after the deadline: WaitTimeoutError, from the 503, after one request."""
    from sensorium.errors import InternalServerError

    emu.inject("GET", "/agents/instances/*", 503, retry_after=10, times=None)
    with pytest.raises(WaitTimeoutError) as info:
        _with_emulator(emu, client_kind)(lambda c: c.agents.instances.wait("agt_1", timeout=1))
    assert isinstance(info.value.__cause__, InternalServerError) and info.value.__cause__.status == 503
    assert len(emu.requests) == 1


def test_a_poll_that_fails_once_is_retried_within_the_timeout(call):
    answers = iter([response(503, b'{"errors": [{"code": "server_at_capacity", "message": "busy"}]}'),
                    response(200, json.dumps({**AGENT, "status": "completed"}).encode())])
    with FakeServer(routes({"GET /v0.5/agents/instances/agt_1": lambda: next(answers)})) as server:
        agent = call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=30), max_retries=2)
        assert agent.status == "completed" and len(server.requests) == 2


def test_a_poll_that_runs_out_of_retries_is_made_again_until_the_timeout(call):
    """Under a timeout, each poll follows the client's retry rule; a poll whose retries are spent
    on a retryable error (it used to end the wait with that error) is made again at the next
    poll interval, until the deadline: then WaitTimeoutError, from the poll's own error."""
    from sensorium.errors import InternalServerError, WaitTimeoutError

    busy = lambda: response(503, b'{"errors": [{"code": "server_at_capacity", "message": "busy"}]}',  # noqa: E731
                            headers={"Retry-After": "0"})
    with FakeServer(routes({"GET /v0.5/agents/instances/agt_1": busy})) as server:
        with pytest.raises(WaitTimeoutError) as info:
            call(server.base_url, lambda c: c.agents.instances.wait("agt_1", timeout=2), max_retries=2)
        assert len(server.requests) > 3, "more than one poll's three attempts"
    assert isinstance(info.value.__cause__, InternalServerError)


# Records under the lagging status; the key in failures


def test_a_failure_echoing_the_key_does_not_carry_it(client_kind):
    """The run's error text (a 200 answer, not redacted like error bodies) quoted the key; it
    reached AgentRunError's message, its error, its logs, its agent and its pickle."""
    import pickle

    from sensorium.testing import Emulator

    with Emulator(work_duration=0.1) as emu:
        key = emu.api_key
        with emu.client() as client:
            client.files.upload_base64("a.csv", b"t,x\n1,2\n3,4\n")
            bundle = client.agents.bundles.create("osm", name="x")
        emu.fail_next_job("agent", error=f"upstream refused Authorization: Bearer {key}")
        started = _with_emulator(emu, client_kind)(lambda c: c.agents.bundles.run(bundle.id, "a.csv"))
        with pytest.raises(AgentRunError) as info:
            _with_emulator(emu, client_kind)(lambda c: c.agents.instances.wait(started.id, timeout=30))
    error = info.value
    assert "Bearer <redacted>" in str(error) and error.error and "<redacted>" in error.error
    for text in (str(error), repr(error), error.error, repr(error.agent), json.dumps(error.agent.to_dict()),
                 json.dumps([log.to_dict() for log in error.logs])):
        assert key not in text
    assert key.encode() not in pickle.dumps(error)
    assert any(log.event_type == "job.failed" for log in error.logs)


def test_the_async_resources_are_the_classes_the_stubs_name():
    """agents.pyi spelled AsyncBlueprints, AsyncInstances, ... which did not exist at runtime: an
    import of them (or an isinstance check) failed."""
    from sensorium.resources import agents, batch, fine_tuning

    client = sensorium.AsyncClient(api_key="sk-test", base_url="http://127.0.0.1:9")
    assert isinstance(client.agents.blueprints, agents.AsyncBlueprints)
    assert isinstance(client.agents.bundles, agents.AsyncBundles)
    assert isinstance(client.agents.instances, agents.AsyncInstances)
    assert isinstance(client.agents.evals, agents.AsyncEvals)
    assert isinstance(client.agents.optimizations, agents.AsyncOptimizations)
    assert isinstance(client.agents.nodes, agents.AsyncNodes)
    assert isinstance(client.batch.jobs, batch.AsyncJobs) and isinstance(client.batch.pipelines, batch.AsyncPipelines)
    assert isinstance(client.fine_tuning.jobs, fine_tuning.AsyncFineTuningJobs)
    blocking = sensorium.Client(api_key="sk-test", base_url="http://127.0.0.1:9")
    assert not isinstance(blocking.agents.instances, agents.AsyncInstances)
