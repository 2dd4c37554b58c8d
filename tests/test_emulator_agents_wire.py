"""The emulator's agents routes on the wire, with the standard library only: status codes, record
fields from the spec's tables, the error envelope, lowercase booleans, list limits and cursors,
both mounts."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from _raw_http import Reply, request
from sensorium.testing import Emulator

# Fields of the spec's tables.
AGENT_FIELDS = {"id", "name", "org_id", "bundle_id", "blueprint", "blueprint_id", "status", "created_at",
                "connectors", "job_id", "started_at", "completed_at", "error"}
BUNDLE_FIELDS = {"id", "name", "description", "blueprint_id", "values", "status", "is_canonical", "created_at"}
SUMMARY_FIELDS = {"id", "blueprint_key", "name", "description", "is_canonical", "is_active", "created_at"}
RUN_SUMMARY_FIELDS = {"id", "status", "created_at", "started_at", "completed_at", "job_id", "error"}


@pytest.fixture
def emu():
    with Emulator(work_duration=0.2) as emulator:
        yield emulator


def call(emu: Emulator, method: str, path: str, body: Any = None, *, key: str = "default", mount: str = "/v0.5") -> Reply:
    raw = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if raw is not None else {}
    if mount == "/v0.5":
        return request(emu, method, path, raw, key=key, headers=headers)
    # The version-less mount: /_emulator paths are sent as they are, so borrow that branch.
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=30)
    try:
        h = dict(headers)
        h["Authorization"] = f"Bearer {emu.api_key}"
        conn.request(method, path, body=raw, headers=h)
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def envelope(reply: Reply, status: int, code: str) -> dict[str, Any]:
    assert reply.status == status, reply.raw
    body = reply.json()
    assert list(body) == ["errors"] and body["errors"][0]["code"] == code, body
    assert body["errors"][0]["error_uid"].startswith("err-")
    return body["errors"][0]


def upload(emu: Emulator, name: str, text: str) -> None:
    with emu.client() as client:
        client.files.upload_base64(name, text.encode())


def test_run_lifecycle_on_the_wire(emu):
    upload(emu, "a.csv", "timestamp,v\n" + "".join(f"{i},{i % 4}\n" for i in range(40)))
    created = call(emu, "POST", "/agents/bundles", {"blueprint": "osm", "name": "wire"})
    assert created.status == 201 and BUNDLE_FIELDS <= set(created.json())
    bundle = created.json()
    assert bundle["status"] == "ready" and bundle["id"].startswith("bnd_") and bundle["org_id"]
    run = call(emu, "POST", f"/agents/bundles/{bundle['id']}/run",
               {"connectors": {"source": [{"type": "file", "id": "a.csv", "format": "csv"}]}})
    assert run.status == 202
    agent = run.json()
    assert set(agent) >= AGENT_FIELDS and agent["status"] == "running"
    assert agent["started_at"] is None and agent["completed_at"] is None and agent["job_id"].startswith("job_")
    assert agent["connectors"] == {"source": [{"type": "file", "id": "a.csv", "format": "csv"}], "sink": None}
    deadline = time.monotonic() + 20
    while call(emu, "GET", f"/agents/instances/{agent['id']}").json()["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done = call(emu, "GET", f"/agents/instances/{agent['id']}").json()
    assert done["status"] == "completed" and done["completed_at"] and done["started_at"]
    logs = call(emu, "GET", f"/agents/instances/{agent['id']}/logs").json()
    assert set(logs) == {"data", "has_more", "next_cursor"}
    rows = logs["data"]
    assert [r["event_type"] for r in rows] == ["job.completed", "job.started", "job.admitted"]
    stamps = [r["created_at"] for r in reversed(rows)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3 and len({len(s) for s in stamps}) == 1
    results = call(emu, "GET", f"/agents/instances/{agent['id']}/results").json()["data"]
    (result,) = results
    assert set(result["data"]) == {"filename", "num_bytes", "ref", "file_extension", "expires_at"}
    assert result["data"]["filename"] == f"{agent['id']}__output_a.csv"
    content = request(emu, "GET", result["data"]["ref"])
    assert content.status == 200 and content.raw.startswith(b"finish_timestamp,start_timestamp,predicted_state,invalid,p_")
    assert len(content.raw) == result["data"]["num_bytes"]
    latest = call(emu, "GET", f"/agents/bundles/{bundle['id']}?include_latest_runs=true").json()["latest_runs"]
    assert set(latest[0]) == RUN_SUMMARY_FIELDS
    assert "latest_runs" not in call(emu, "GET", f"/agents/bundles/{bundle['id']}").json()
    assert call(emu, "DELETE", f"/agents/instances/{agent['id']}").status == 204
    envelope(call(emu, "GET", f"/agents/instances/{agent['id']}"), 404, "not_found")


def test_state_table_answers(emu):
    upload(emu, "a.csv", "t,v\n1,2\n")
    bundle = call(emu, "POST", "/agents/bundles", {"blueprint": "osm", "name": "s"}).json()
    agent = call(emu, "POST", f"/agents/bundles/{bundle['id']}/run",
                 {"connectors": {"source": [{"type": "file", "id": "a.csv"}]}}).json()
    path = f"/agents/instances/{agent['id']}"
    assert call(emu, "POST", path + "/pause").json()["status"] == "paused"
    envelope(call(emu, "POST", path + "/pause"), 409, "conflict")
    envelope(call(emu, "DELETE", path), 409, "conflict")
    assert call(emu, "POST", path + "/cancel").json()["status"] == "canceled"
    for action in ("/cancel", "/pause", "/resume"):
        envelope(call(emu, "POST", path + action), 409, "conflict")
    assert envelope(call(emu, "POST", "/agents/instances/agt_nope/cancel"), 404, "not_found")["message"] == "Agent not found."
    assert envelope(call(emu, "GET", "/agents/bundles/bnd_nope"), 404, "not_found")["message"] == "Bundle not found."
    envelope(call(emu, "POST", f"/agents/bundles/{bundle['id']}/run",
                  {"connectors": {"source": [{"type": "file", "id": "missing.csv"}]}}), 404, "file_not_found")
    envelope(call(emu, "POST", f"/agents/bundles/{bundle['id']}/run", {"connectors": {"source": []}}), 400,
             "invalid_request")


def test_lists_limits_cursors_and_booleans(emu):
    envelope(call(emu, "GET", "/agents/blueprints?limit=0"), 400, "invalid_request")
    envelope(call(emu, "GET", "/agents/blueprints?limit=1001"), 400, "invalid_request")
    envelope(call(emu, "GET", "/agents/blueprints?after=a&before=b"), 400, "invalid_request")
    envelope(call(emu, "GET", "/agents/blueprints?after=made-up"), 400, "invalid_cursor")
    envelope(call(emu, "GET", "/agents/blueprints/osm?yaml=True"), 400, "invalid_request")
    first = call(emu, "GET", "/agents/blueprints?limit=2").json()
    assert set(first["data"][0]) == SUMMARY_FIELDS and first["has_more"] and first["next_cursor"]
    rest = call(emu, "GET", f"/agents/blueprints?limit=1000&after={first['next_cursor']}").json()
    keys = [b["blueprint_key"] for b in first["data"] + rest["data"]]
    assert sorted(keys) == ["ad", "mga", "osm", "red", "tva"] and rest["next_cursor"] is None
    counted = call(emu, "GET", "/agents/blueprints?key=ad&bundles_count=true").json()["data"]
    assert counted[0]["bundles_count"] == 2
    osm = call(emu, "GET", "/agents/blueprints/osm?yaml=true").json()
    assert osm["yaml_document"] and osm["document"]["blueprint_id"] == osm["id"]


def test_blueprint_rules_on_the_wire(emu):
    doc = {"graph": {"edges": []}, "connectors": {"source": {"key": "MultiModalSource", "config": {}}}}
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k"}), 400, "invalid_request")
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "document": doc,
                                                      "yaml_document": "graph: {edges: [{from: a, to: b}]}"}),
             400, "invalid_request")
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "yaml_document": "graph: [unclosed"}),
             400, "invalid_request")
    member = emu.new_api_key(role="member")
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "document": doc}, key=member), 403,
             "forbidden")
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "document": doc, "canonical": True}),
             403, "forbidden")
    created = call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "yaml_document": "graph: {edges: []}\n"})
    assert created.status == 201 and created.json()["yaml_document"] == "graph: {edges: []}\n"
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "k", "document": doc,
                                                      "replacement_of": "blp_nope"}), 404, "not_found")
    envelope(call(emu, "POST", "/agents/blueprints", {"blueprint_key": "other", "document": doc,
                                                      "replacement_of": created.json()["id"]}), 400, "invalid_request")
    envelope(call(emu, "POST", "/agents/bundles", {"blueprint": "osm", "name": "x", "model": "Newton::v"}), 400,
             "invalid_request")


def test_both_mounts_serve_the_same_store(emu):
    via_version = call(emu, "GET", "/agents/bundles?query=quick%20start").json()["data"]
    via_root = call(emu, "GET", "/agents/bundles?query=quick%20start", mount="/").json()["data"]
    assert via_version == via_root and any(b["name"] == "OSM Quick Start (Volve Six State)" for b in via_root)
    assert all("org_id" not in b and b["is_canonical"] for b in via_root)
    registry = call(emu, "GET", "/agents/nodes/registry", mount="/").json()["data"]
    assert {"MultiModalSource", "RecordsSink"} <= {n["key"] for n in registry}
    envelope(call(emu, "GET", "/agents/bundles", key="sk-wrong"), 401, "unauthorized_request")
