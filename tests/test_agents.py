"""Agents end to end through the public API against the emulator, sync and async: the run
lifecycle (bundle -> run -> wait -> results -> download -> read), the Agent state table's 409s and
404s, blueprints (YAML, replacement, versions, roles), pagination, the lagging status, a failed
run, evaluations, optimizations, serving mode and the node registry."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import sensorium
from _helpers import run_on, use_fake_tqdm
from sensorium.errors import (
    AgentRunError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    WaitTimeoutError,
)
from sensorium.testing import Emulator
from sensorium.types import Agent, AgentLog, AgentResult, Blueprint, BlueprintSummary, Bundle

CSV = "timestamp,temperature,vibration\n" + "".join(f"{1700000000 + i},{20 + (i % 7)},{(i * 37) % 11}\n"
                                                     for i in range(200))
DOCUMENT = {
    "graph": {"edges": [{"from": "source", "to": "embed"}, {"from": "embed", "to": "sink"}]},
    "connectors": {"source": {"key": "MultiModalSource", "config": {}},
                   "sink": {"key": "RecordsSink", "config": {"format": "jsonl/per-request"}}},
    "values": {"window_size": 16},
}


@pytest.fixture
def agents_emu():
    with Emulator(work_duration=0.3) as emu:
        yield emu


@pytest.fixture
def run(client_kind: str, agents_emu: Emulator) -> Callable[..., Any]:
    """``run(lambda client: ...)``: the same steps on a ``Client`` or an ``AsyncClient``."""
    return lambda operation, **options: run_on(
        client_kind, operation, **{"api_key": agents_emu.api_key, "base_url": agents_emu.base_url, **options})


def _upload(emu: Emulator, name: str = "line3.csv", text: str = CSV) -> str:
    with emu.client() as client:
        return client.files.upload_base64(name, text.encode()).file_id


def _osm_bundle(emu: Emulator) -> Bundle:
    with emu.client() as client:
        return client.agents.bundles.create("osm", name="Line 3 monitor")


def test_the_whole_run_lifecycle(agents_emu, run, tmp_path):
    file_id = _upload(agents_emu)
    bundle = run(lambda c: c.agents.bundles.create("osm", name="Line 3 monitor", values={"window_size": 20}))
    assert isinstance(bundle, Bundle) and bundle.status == "ready" and bundle.id.startswith("bnd_")
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    assert isinstance(started, Agent) and started.status == "running" and started.id.startswith("agt_")
    assert started.connectors["source"] == [{"type": "file", "id": file_id, "format": "csv"}]
    agent = run(lambda c: c.agents.instances.wait(started.id, timeout=30))
    assert agent.status == "completed" and agent.completed_at
    results = run(lambda c: c.agents.instances.results(agent.id))
    assert len(results) == 1 and isinstance(results[0], AgentResult)
    assert results[0].filename == f"{agent.id}__output_line3.csv"
    paths = run(lambda c: c.agents.instances.download_results(agent.id, tmp_path / "out" / "nested"))
    assert paths == [tmp_path / "out" / "nested" / results[0].filename]
    rows = list(csv.DictReader(io.StringIO(paths[0].read_text())))
    assert rows and {"finish_timestamp", "start_timestamp", "predicted_state"} <= set(rows[0])
    assert not list((tmp_path / "out" / "nested").glob(".*")), "no temporary file left behind"
    logs = run(lambda c: c.agents.instances.logs(agent.id))
    assert isinstance(logs[0], AgentLog) and logs[0].event_type == "job.completed"
    assert {"job.admitted", "job.started"} <= {log.event_type for log in logs}
    assert not [log for log in logs if (log.level or "").upper() == "ERROR"]
    assert run(lambda c: c.agents.instances.events(agent.id))
    latest = run(lambda c: c.agents.bundles.get(bundle.id, include_latest_runs=True))
    assert [r.id for r in latest.latest_runs] == [agent.id]
    assert run(lambda c: c.agents.bundles.get(bundle.id)).latest_runs is None


def test_a_sink_gathers_every_output_in_one_file(agents_emu, run, tmp_path):
    a, b = _upload(agents_emu, "a.csv"), _upload(agents_emu, "b.csv")
    bundle = _osm_bundle(agents_emu)
    started = run(lambda c: c.agents.bundles.run(bundle.id, [a, b], sink="all.csv"))
    run(lambda c: c.agents.instances.wait(started.id, timeout=30))
    results = run(lambda c: c.agents.instances.results(started.id))
    assert [r.filename for r in results] == ["all.csv"]


def test_inputs_sharing_a_stem_keep_one_result_each(agents_emu, run, tmp_path):
    csv_id, txt_id = _upload(agents_emu, "pump.csv"), _upload(agents_emu, "pump.txt", "a free-text shift note")
    bundle = _osm_bundle(agents_emu)
    started = run(lambda c: c.agents.bundles.run(bundle.id, [csv_id, txt_id]))
    run(lambda c: c.agents.instances.wait(started.id, timeout=30))
    results = run(lambda c: c.agents.instances.results(started.id))
    assert len({r.filename for r in results}) == 2
    paths = run(lambda c: c.agents.instances.download_results(started.id, tmp_path))
    assert sorted(p.stat().st_size for p in paths) == sorted(r.num_bytes for r in results)


def test_canceling_stops_the_trial_under_way_and_leaves_examples_canceled():
    with Emulator(work_duration=30.0) as slow:
        labelled = _upload(slow, "labelled.csv")
        with slow.client() as c:
            blueprint = c.agents.blueprints.get("osm")
            opt = c.agents.optimizations.create(blueprint.id, objective="macro_f1", validation_examples=[labelled],
                                                max_trials=3)
            evaluation = c.agents.evals.create(blueprint.id, [labelled], name="stopped")
            deadline = time.monotonic() + 30
            while not any(t.status == "running" for t in c.agents.optimizations.trials(opt.id)):
                assert time.monotonic() < deadline, "the first trial never started"
                time.sleep(0.02)
            c.agents.optimizations.cancel(opt.id)
            c.agents.evals.cancel(evaluation.id)
            trials = list(c.agents.optimizations.trials(opt.id))
            assert trials and all(t.status == "canceled" for t in trials)
            assert c.agents.optimizations.get(opt.id).progress.get("running", 0) == 0
            assert {e["status"] for e in c.agents.evals.examples(evaluation.id)} == {"canceled"}


def test_state_table_conflicts_and_missing_ids(agents_emu, run):
    bundle = _osm_bundle(agents_emu)
    file_id = _upload(agents_emu)
    with agents_emu.client() as client:
        agent = client.agents.bundles.run(bundle.id, file_id)
        paused = client.agents.instances.pause(agent.id)
        assert paused.status == "paused"
        with pytest.raises(ConflictError):
            client.agents.instances.pause(agent.id)
        with pytest.raises(ConflictError):
            client.agents.instances.delete(agent.id)
        assert client.agents.instances.resume(agent.id).status == "running"
        assert client.agents.instances.cancel(agent.id).status == "canceled"
        with pytest.raises(ConflictError):
            client.agents.instances.cancel(agent.id)
        assert client.agents.instances.cancel(agent.id, ok_if_terminal=True).status == "canceled"
        with pytest.raises(ConflictError):
            client.agents.instances.resume(agent.id)
        client.agents.instances.delete(agent.id)
    for operation in [lambda c: c.agents.instances.get(agent.id), lambda c: c.agents.bundles.get("bnd_missing"),
                      lambda c: c.agents.bundles.run("bnd_missing", file_id),
                      lambda c: c.agents.instances.cancel("agt_missing", ok_if_terminal=True)]:
        with pytest.raises(NotFoundError):
            run(operation)


def test_a_paused_run_does_not_finish_until_resumed(agents_emu, run):
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    with agents_emu.client() as client:
        agent = client.agents.bundles.run(bundle.id, file_id)
        client.agents.instances.pause(agent.id)
        time.sleep(0.8)
        assert client.agents.instances.get(agent.id).status == "paused"
        client.agents.instances.resume(agent.id)
    assert run(lambda c: c.agents.instances.wait(agent.id, timeout=30)).status == "completed"


def test_a_failed_run_raises_with_its_agent_error_and_logs(agents_emu, run):
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    agents_emu.fail_next_job("agent", error="GPU fell over")
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    with pytest.raises(AgentRunError) as info:
        run(lambda c: c.agents.instances.wait(started.id, timeout=30))
    assert info.value.agent.status == "failed" and "GPU fell over" in str(info.value)
    assert "GPU fell over" in (info.value.error or "") and info.value.logs


def _control(emu: Emulator, route: str, body: Any) -> Any:
    """POST to the emulator's control surface over HTTP, as a test in another process does."""
    from _raw_http import request

    return request(emu, "POST", f"/_emulator/{route}", json.dumps(body).encode(), key=None)


def test_job_controls_work_over_http_for_an_emulator_in_another_process(agents_emu):
    set_up = _control(agents_emu, "fail_next_job", {"kind": "agent", "error": "worker lost"})
    assert set_up.status == 200
    assert set_up.json() == {"kind": "agent", "error": "worker lost", "failed_inputs": [], "outcome": None}
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    with agents_emu.client() as client:
        started = client.agents.bundles.run(bundle.id, file_id)
        with pytest.raises(AgentRunError, match="worker lost"):
            client.agents.instances.wait(started.id, timeout=30)

        assert _control(agents_emu, "lag_agent_status", {"seconds": 30}).json() == {"seconds": 30.0}
        started = client.agents.bundles.run(bundle.id, file_id)
        assert client.agents.instances.wait(started.id, timeout=20).status == "completed", "only one failure was planned"
        assert client.agents.instances.get(started.id).status == "running", "the record lags, as asked over HTTP"

    planned = _control(agents_emu, "fail_next_job", {"kind": "batch", "failed_inputs": ["a.csv", "b.csv"]})
    assert planned.json() == {"kind": "batch", "error": None, "failed_inputs": ["a.csv", "b.csv"], "outcome": None}


@pytest.mark.parametrize(
    "route, body, named",
    [
        ("fail_next_job", {"kind": "agents"}, "optimization"),  # the message lists the kinds it takes
        ("fail_next_job", {}, "'kind'"),
        ("fail_next_job", {"kind": "agent", "error": 5}, "'error'"),
        ("fail_next_job", {"kind": "batch", "failed_inputs": "a.csv"}, "'failed_inputs'"),
        ("fail_next_job", {"kind": "batch", "failed_inputs": [1]}, "'failed_inputs'"),
        ("lag_agent_status", {"seconds": -1}, "'seconds'"),
        ("lag_agent_status", {}, "'seconds'"),
    ],
)
def test_job_controls_over_http_refuse_bad_bodies_naming_the_field(agents_emu, route, body, named):
    reply = _control(agents_emu, route, body)
    assert reply.status == 400 and named in reply.raw.decode()
    with agents_emu.client() as client:  # nothing was planned: a run still completes
        bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
        started = client.agents.bundles.run(bundle.id, file_id)
        assert client.agents.instances.wait(started.id, timeout=20).status == "completed"


def test_wait_sees_the_end_in_the_logs_when_the_status_lags(agents_emu, run):
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    agents_emu.lag_agent_status(30)
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    t0 = time.monotonic()
    agent = run(lambda c: c.agents.instances.wait(started.id, timeout=20))
    assert agent.status == "completed" and time.monotonic() - t0 < 20
    # The record and its JSON agree: to_dict() said "running" while .status said "completed".
    assert agent.to_dict()["status"] == "completed" and agent.id == started.id
    # An ended run has a completed_at (the spec: null only while unfinished): the lagging record
    # has none yet, so the terminal log line's time is taken.
    with agents_emu.client() as client:
        assert client.agents.instances.get(started.id).status == "running", "the record still lags"
        (line,) = [log for log in client.agents.instances.logs(started.id) if log.event_type == "job.completed"]
    assert agent.completed_at == line.created_at and agent.to_dict()["completed_at"] == line.created_at
    # Cancel answers 409 (the run has ended) while the record still says running: the agent
    # returned is the ended one, as wait() returns it, not a "running" one.
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.instances.cancel(started.id))
    canceled = run(lambda c: c.agents.instances.cancel(started.id, ok_if_terminal=True))
    assert canceled.status == "completed" and canceled.is_terminal and canceled.to_dict()["status"] == "completed"
    assert canceled.completed_at == line.created_at


def test_ctrl_c_interrupts_a_blocking_wait(agents_emu, tmp_path):
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    with agents_emu.client() as client:
        agent = client.agents.bundles.run(bundle.id, file_id)
        client.agents.instances.pause(agent.id)  # it will never end by itself
    script = tmp_path / "wait.py"
    script.write_text(textwrap.dedent(f"""
        import sensorium, sys
        client = sensorium.Client(api_key={agents_emu.api_key!r}, base_url={agents_emu.base_url!r})
        print("waiting", flush=True)
        try:
            client.agents.instances.wait({agent.id!r})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "waiting"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=10) == 3
    assert proc.stdout.read().strip() == "interrupted"


def test_blueprints_yaml_replacement_and_versions(agents_emu, run):
    text = "graph:\n  edges:\n    - {from: source, to: sink}\nconnectors:\n  source: {key: MultiModalSource, config: {}}\n" \
           "  sink: {key: RecordsSink, config: {}}\n"
    first = run(lambda c: c.agents.blueprints.create("line-monitor", yaml_document=text))
    assert isinstance(first, Blueprint) and first.is_active and first.document["connectors"]["source"]["key"]
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.blueprints.create("line-monitor", document=DOCUMENT))
    bundle = run(lambda c: c.agents.bundles.create(first.id, name="pinned"))
    second = run(lambda c: c.agents.blueprints.create("line-monitor", document=DOCUMENT, replacement_of=first.id))
    assert second.is_active and second.id != first.id
    old = run(lambda c: c.agents.blueprints.get(first.id))
    assert not old.is_active and old.blueprint_key.startswith("line-monitor-")
    assert run(lambda c: c.agents.blueprints.get("line-monitor")).id == second.id
    versions = run(lambda c: c.agents.blueprints.versions("line-monitor"))
    assert [v.id for v in versions] == [second.id, first.id]
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.blueprints.create("line-monitor", document=DOCUMENT, replacement_of=first.id))
    # A bundle pinned to the replaced version keeps working.
    started = run(lambda c: c.agents.bundles.run(bundle.id, _upload(agents_emu)))
    assert run(lambda c: c.agents.instances.wait(started.id, timeout=30)).status == "completed"
    with_yaml = run(lambda c: c.agents.blueprints.get(second.id, yaml=True))
    assert with_yaml.yaml_document


def test_an_archived_key_names_its_one_blueprint(agents_emu, run):
    # Two replacements on one day: each replaced version gets its own archived key, and
    # `get` (which takes a blp_ id or a key) finds the version by it.
    v1 = run(lambda c: c.agents.blueprints.create("mine", document=DOCUMENT))
    v2 = run(lambda c: c.agents.blueprints.create("mine", document=DOCUMENT, replacement_of=v1.id))
    v3 = run(lambda c: c.agents.blueprints.create("mine", document=DOCUMENT, replacement_of=v2.id))
    keys = [run(lambda c: c.agents.blueprints.get(v.id)).blueprint_key for v in (v1, v2)]
    assert keys[0] != keys[1] and all(k.startswith("mine-") for k in keys)
    for version, key in zip((v1, v2), keys):
        assert run(lambda c: c.agents.blueprints.get(key)).id == version.id
        assert [b.id for b in run(lambda c: c.agents.blueprints.list(key=key))] == [version.id]
    assert [v.id for v in run(lambda c: c.agents.blueprints.versions(keys[0]))] == [v3.id, v2.id, v1.id]
    assert run(lambda c: c.agents.blueprints.get("mine")).id == v3.id
    with pytest.raises(NotFoundError):
        run(lambda c: c.agents.blueprints.get(keys[0] + "-9"))


def test_blueprint_roles(agents_emu):
    member = agents_emu.client(api_key=agents_emu.new_api_key(role="member"))
    with pytest.raises(PermissionDeniedError):
        member.agents.blueprints.create("mine", document=DOCUMENT)
    with agents_emu.client() as admin:
        assert admin.agents.blueprints.create("mine", document=DOCUMENT).is_canonical is False
        with pytest.raises(PermissionDeniedError):
            admin.agents.blueprints.create("everyone", document=DOCUMENT, canonical=True)
    root = agents_emu.client(api_key=agents_emu.new_api_key(role="super_admin"))
    assert root.agents.blueprints.create("everyone", document=DOCUMENT, canonical=True).is_canonical


def test_canonical_catalogue_and_quick_starts(agents_emu, run):
    keys = {b.blueprint_key for b in run(lambda c: c.agents.blueprints.list())}
    assert {"osm", "red", "ad", "mga", "tva"} <= keys
    quick = run(lambda c: c.agents.bundles.list(query="quick start"))
    assert any(b.name == "OSM Quick Start (Volve Six State)" and b.is_canonical for b in quick)
    nodes = {n.key for n in run(lambda c: c.agents.nodes.registry())}
    assert {"MultiModalSource", "RecordsSink"} <= nodes
    with pytest.raises(BadRequestError):
        run(lambda c: c.agents.blueprints.create("bad", document={"graph": {"edges": []}, "connectors": {
            "source": {"key": "NoSuchNode", "config": {}}}}))


def test_pagination_across_pages(run):
    with Emulator(page_size=3, work_duration=0.1) as emu:
        file_id = _upload(emu)
        with emu.client() as client:
            bundle = client.agents.bundles.create("osm", name="paged")
            ids = [client.agents.bundles.run(bundle.id, file_id).id for _ in range(7)]
            listed = [a.id for a in client.agents.instances.list(bundle_id=bundle.id)]
            assert sorted(listed) == sorted(ids) and len(listed) == 7
            first = client.agents.instances.list(bundle_id=bundle.id).first_page()
            assert len(first.data) == 3 and first.has_more and first.next_cursor
            summaries = list(client.agents.blueprints.list(limit=2))
            assert all(isinstance(s, BlueprintSummary) for s in summaries) and len(summaries) >= 5


def test_a_list_survives_its_items_leaving_it_while_it_is_read():
    # The cursor of the next page is the last item of this one; deleting it (the common cleanup
    # loop) or its leaving a status filter must not turn the next page into 400 invalid_cursor.
    with Emulator(page_size=3, work_duration=0.1) as emu:
        file_id = _upload(emu)
        with emu.client() as client:
            bundle = client.agents.bundles.create("osm", name="cleanup")
            ids = [client.agents.bundles.run(bundle.id, file_id).id for _ in range(7)]
            for agent_id in ids:
                client.agents.instances.wait(agent_id, timeout=60)
            deleted = []
            for agent in client.agents.instances.list(bundle_id=bundle.id):
                client.agents.instances.delete(agent.id)
                deleted.append(agent.id)
            assert sorted(deleted) == sorted(ids)
            assert list(client.agents.instances.list(bundle_id=bundle.id)) == []

            with pytest.raises(BadRequestError) as info:  # a made-up cursor is still refused
                client.agents.blueprints.list(after="nope").first_page()
            assert info.value.code == "invalid_cursor"


@pytest.mark.parametrize("sort, order", [(None, None), ("name", None), ("name", "desc"), ("created_at", "asc")])
def test_deleting_bundles_while_listing_them_sees_every_bundle_once(client_kind, sort, order):
    # Bundles are listed by last run or name, not in their ids' order: the cursor of the next
    # page (a bundle just deleted) must still mark its place by that order.
    with Emulator(page_size=1, work_duration=0.05) as emu:
        file_id = _upload(emu)
        with emu.client() as client:
            own = [client.agents.bundles.create("osm", name=n).id for n in ["d", "c", "b", "a", "e"]]
            client.agents.instances.wait(client.agents.bundles.run(own[2], file_id).id, timeout=30)
            canonical = [b.id for b in client.agents.bundles.list() if b.is_canonical]

        async def drain_async(c: Any) -> list[str]:
            seen = []
            async for b in c.agents.bundles.list(sort=sort, order=order):
                seen.append(b.id)
                if not b.is_canonical:
                    await c.agents.bundles.delete(b.id)
            return seen

        def drain(c: Any) -> list[str]:
            seen = []
            for b in c.agents.bundles.list(sort=sort, order=order):
                seen.append(b.id)
                if not b.is_canonical:
                    c.agents.bundles.delete(b.id)
            return seen

        seen = run_on(client_kind, drain_async if client_kind == "async" else drain,
                      api_key=emu.api_key, base_url=emu.base_url)
        assert sorted(seen) == sorted(own + canonical)
        with emu.client() as client:
            assert sorted(b.id for b in client.agents.bundles.list()) == sorted(canonical)


def test_evaluations_and_optimizations(agents_emu, run):
    labelled = "timestamp,temperature,state\n" + "".join(f"{i},{i % 9},{'idle' if i % 2 else 'running'}\n"
                                                         for i in range(120))
    file_id = _upload(agents_emu, "labelled.csv", labelled)
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    evaluation = run(lambda c: c.agents.evals.create(osm.id, [file_id], name="check"))
    done = run(lambda c: c.agents.evals.wait(evaluation.id, timeout=30))
    assert done.status == "completed"
    state = done.metrics_report["targets"]["state"]
    assert state["class_names"] and state["confusion_matrix"]
    assert run(lambda c: c.agents.evals.examples(evaluation.id))
    opt = run(lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[file_id],
                                                      max_trials=2))
    finished = run(lambda c: c.agents.optimizations.wait(opt.id, timeout=60))
    assert finished.status == "completed"
    trials = run(lambda c: c.agents.optimizations.trials(opt.id))
    assert len(trials) == 2 and all(t.objective_value is not None for t in trials)
    promoted = run(lambda c: c.agents.optimizations.promote(opt.id, trials[0].id))
    assert isinstance(promoted, Blueprint) and promoted.id.startswith("blp_")


def test_optimization_trials_draw_from_the_search_space_and_report_the_objective(agents_emu, run):
    file_id = _upload(agents_emu, "labelled.csv", "t,a,state\n" + "".join(f"{i},{i % 5},{'idle' if i < 40 else 'running'}\n"
                                                                        for i in range(80)))
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    space = {"window_size": [32, 64], "step_size": {"low": 4, "high": 8}}

    def optimize() -> tuple[list[Any], str]:
        opt = run(lambda c: c.agents.optimizations.create("osm", objective="accuracy", validation_examples=[file_id],
                                                          max_trials=3, search_space=space))
        assert run(lambda c: c.agents.optimizations.wait(opt.id, timeout=60)).status == "completed"
        return sorted(run(lambda c: c.agents.optimizations.trials(opt.id)), key=lambda t: t.trial_number), opt.id

    trials, opt_id = optimize()
    assert len(trials) == 3
    for t in trials:
        assert set(t.trial_values) == {"window_size", "step_size"}, t.trial_values
        assert t.trial_values["window_size"] in (32, 64) and 4 <= t.trial_values["step_size"] <= 8
        assert isinstance(t.trial_values["step_size"], int)
        assert t.metrics_report["targets"]["state"] == {"accuracy": t.objective_value}
    assert {t.trial_values["window_size"] for t in trials} == {32, 64}, "the trials cover the choices"
    again, _ = optimize()
    assert [(t.trial_values, t.objective_value) for t in again] == [(t.trial_values, t.objective_value) for t in trials]
    promoted = run(lambda c: c.agents.optimizations.promote(opt_id, trials[-1].id))
    assert promoted.document["values"] == {**osm.document["values"], **trials[-1].trial_values}
    for bad in ({"window_size": []}, {"window_size": {"low": 9, "high": 1}}, {"window_size": {"mode": "auto"}}):
        with pytest.raises(BadRequestError):
            run(lambda c: c.agents.optimizations.create(osm.id, objective="accuracy", validation_examples=[file_id],
                                                        max_trials=1, search_space=bad))


def test_evaluations_and_optimizations_check_their_inputs_at_create(agents_emu, run):
    file_id = _upload(agents_emu, "labelled.csv")
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    missing = "never_uploaded.csv"
    attempts = [
        lambda c: c.agents.evals.create(osm.id, [file_id, missing]),
        lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[missing], max_trials=1),
        lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[file_id],
                                                training_examples=[missing], max_trials=1),
    ]
    for attempt in attempts:
        with pytest.raises(NotFoundError) as info:
            run(attempt)
        assert info.value.code == "file_not_found" and missing in str(info.value)
    assert run(lambda c: c.agents.evals.list()) == [] and run(lambda c: c.agents.optimizations.list()) == []
    # A blueprint key is taken, and the record holds the blueprint's id, as the field's name says.
    evaluation = run(lambda c: c.agents.evals.create("osm", [file_id]))
    opt = run(lambda c: c.agents.optimizations.create("osm", objective="macro_f1", validation_examples=[file_id],
                                                      max_trials=1))
    assert evaluation.blueprint_id == osm.id and opt.blueprint_id == osm.id


def test_serving_mode_answers_queries(agents_emu, run):
    bundle = _osm_bundle(agents_emu)
    agent = run(lambda c: c.agents.bundles.run(bundle.id, mode="serving"))
    answer = run(lambda c: c.agents.instances.query(agent.id, {"text": "status?"}))
    assert answer["status"] == "completed" and "response" in answer
    import numpy as np

    numeric = run(lambda c: c.agents.instances.query(agent.id, np.ones((2, 32))))
    assert numeric["status"] == "completed"


def test_the_version_less_mount(agents_emu):
    root = agents_emu.base_url.rsplit("/v0.5", 1)[0]
    with agents_emu.client(agents_base_url=root) as client:
        assert any(b.is_canonical for b in client.agents.bundles.list())
    assert any(r.path.startswith("/agents/bundles") for r in agents_emu.requests)


def test_results_download_from_the_api_base_on_the_version_less_mount(agents_emu, run, tmp_path):
    """A result ref `/files/download/<name>` is relative to the API's base URL; on the
    version-less agents mount it was fetched under the agents base (no /v0.5) and 404'd."""
    root = agents_emu.base_url.rsplit("/v0.5", 1)[0]
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id), agents_base_url=root)
    run(lambda c: c.agents.instances.wait(started.id, timeout=30), agents_base_url=root)
    paths = run(lambda c: c.agents.instances.download_results(started.id, tmp_path), agents_base_url=root)
    with agents_emu.client() as client:
        [result] = client.agents.instances.results(started.id)
        assert paths == [tmp_path / result.filename]
        assert paths[0].read_bytes() == client.files.download(result.filename, tmp_path / "direct").read_bytes()
    assert [r.path for r in agents_emu.requests if "/files/download/" in r.path][0].startswith("/v0.5/files/")


def _start(emu: Emulator, kind: str) -> Any:
    """A running agent, evaluation or optimization."""
    file_id = _upload(emu)
    with emu.client() as c:
        if kind == "instances":
            return c.agents.bundles.run(c.agents.bundles.create("osm", name="x").id, file_id)
        blueprint = c.agents.blueprints.get("osm").id
        if kind == "evals":
            return c.agents.evals.create(blueprint, [file_id])
        return c.agents.optimizations.create(blueprint, objective="macro_f1", validation_examples=[file_id],
                                             max_trials=2)


@pytest.mark.parametrize("kind", ["instances", "evals", "optimizations"])
def test_a_cancel_whose_answer_was_lost_returns_the_canceled_record(client_kind, kind):
    """The first attempt canceled the work and its answer was cut off; the repeat met 409
    already terminal, which reached the caller as ConflictError although the cancel succeeded."""
    with Emulator(work_duration=30) as emu:
        started = _start(emu, kind)
        emu.inject("POST", f"/agents/{kind}/{started.id}/cancel", action="truncate", times=1)
        canceled = run_on(client_kind, lambda c: getattr(c.agents, kind).cancel(started.id),
                          api_key=emu.api_key, base_url=emu.base_url)
        assert type(canceled) is type(started) and canceled.id == started.id and canceled.status == "canceled"
        assert [r.status for r in emu.requests if r.path.endswith("/cancel")] == [200, 409]
        # A 409 that answers a first attempt is still the caller's to see.
        with pytest.raises(ConflictError):
            run_on(client_kind, lambda c: getattr(c.agents, kind).cancel(started.id),
                   api_key=emu.api_key, base_url=emu.base_url)


def test_wait_goes_on_from_the_status_while_the_logs_feed_fails(agents_emu, run):
    """Only the logs feed failed (500 on every try): wait raised InternalServerError, although the
    record, its primary signal, read fine and said completed."""
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    agents_emu.inject("GET", "/agents/instances/*/logs", status=500, times=None)
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    assert run(lambda c: c.agents.instances.wait(started.id, timeout=30), max_retries=0).status == "completed"
    agents_emu.fail_next_job("agent", error="boom")
    failed = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    with pytest.raises(AgentRunError) as info:
        run(lambda c: c.agents.instances.wait(failed.id, timeout=30), max_retries=0)
    assert info.value.error == "boom" and info.value.agent.status == "failed"
    # The status poll failing is not hidden: polled again while the timeout allows (a 500 is
    # retryable), it ends the wait at the timeout, from that failure.
    third = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    agents_emu.inject("GET", f"/agents/instances/{third.id}", status=500, times=None)
    with pytest.raises(WaitTimeoutError) as timed_out:
        run(lambda c: c.agents.instances.wait(third.id, timeout=1), max_retries=0)
    assert isinstance(timed_out.value.__cause__, InternalServerError)


def test_a_burst_of_failed_record_polls_does_not_end_an_agent_wait(agents_emu, run):
    """Three 503s on the record (with no retries left to the client) ended the wait with the 503;
    the logs feed, read between them, does not decide alone either. A 404 still ends it at once."""
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    agents_emu.inject("GET", f"/agents/instances/{started.id}", status=503, times=3)
    assert run(lambda c: c.agents.instances.wait(started.id, timeout=60), max_retries=0).status == "completed"
    assert [r.status for r in agents_emu.requests if r.path.endswith(started.id)][:3] == [503, 503, 503]
    agents_emu.inject("GET", f"/agents/instances/{started.id}", status=404, times=1)
    with pytest.raises(NotFoundError):
        run(lambda c: c.agents.instances.wait(started.id, timeout=60), max_retries=0)


@pytest.mark.parametrize("lag", [0, 1])
def test_a_failure_reads_the_same_whether_or_not_the_status_lags(agents_emu, run, lag):
    """With the status lagging, the failure was learned from the logs: AgentRunError.error was
    the log line's 'Run failed: boom' (not 'boom'), and its agent had no error or completed_at."""
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    agents_emu.lag_agent_status(lag)
    agents_emu.fail_next_job("agent", error="boom")
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    with pytest.raises(AgentRunError) as info:
        run(lambda c: c.agents.instances.wait(started.id, timeout=30))
    error = info.value
    assert error.error == "boom" and error.agent.error == "boom" and error.agent.status == "failed"
    assert error.agent.completed_at and error.agent.to_dict()["status"] == "failed"
    assert error.logs[0].event_type == "job.failed"


def test_removed_model_field_is_refused_before_sending(agents_emu):
    with agents_emu.client() as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.agents.bundles.create("osm", name="x", model="Newton::c2_4_7b_251215a172f6d7")
    assert "models" in str(info.value) and agents_emu.requests == []


def test_bundle_models_name_declared_slots_and_registry_tags(agents_emu, run):
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    (slot,) = osm.document["models"]
    tag = osm.document["models"][slot]["tag"]
    bundle = run(lambda c: c.agents.bundles.create("osm", name="tagged", models={slot: tag}))
    assert bundle.status == "ready" and bundle.models == {slot: tag}
    for models, named in [({"no_such_slot": tag}, "no_such_slot"), ({slot: "::::"}, "::::"),
                          ({slot: "no-such-tag"}, "no-such-tag"), ({slot: "Newton::no_such_version"}, "no_such_version")]:
        with pytest.raises(BadRequestError) as info:
            run(lambda c: c.agents.bundles.create("osm", name="bad", models=models))
        assert info.value.code == "invalid_request" and named in str(info.value), models
    # The registry is the organization's own: a tag only another organization has is unaddressable.
    small = agents_emu.new_api_key(org="small-co", models=[{"id": "Acme::ft-1", "family": "encoder"}])
    with pytest.raises(BadRequestError):
        run(lambda c: c.agents.bundles.create("osm", name="bad", models={slot: tag}), api_key=small)
    mine = run(lambda c: c.agents.blueprints.create("own-slots", document={**DOCUMENT, "models": {"m": {}}}),
               api_key=small)
    assert run(lambda c: c.agents.bundles.create(mine.id, name="ok", models={"m": "Acme::ft-1"}), api_key=small).models


def test_records_from_the_spec_tables():
    """Literal JSON written from the spec's Bundle, Agent and Blueprint tables."""
    bundle = Bundle.from_dict(json.loads("""{"id": "bnd_01h", "name": "Line 3", "description": "d",
        "blueprint_id": "blp_01h", "values": {"k": 1}, "status": "ready", "is_canonical": false,
        "created_at": "2026-11-01T10:00:00Z", "org_id": "org_1", "artifacts": {},
        "latest_runs": [{"id": "agt_1", "status": "completed", "created_at": "2026-11-01T10:00:00Z",
        "started_at": "2026-11-01T10:00:01Z", "completed_at": "2026-11-01T10:05:00Z", "job_id": "job_1",
        "error": null}]}"""))
    assert bundle.latest_runs and bundle.latest_runs[0].job_id == "job_1" and bundle.latest_runs[0].error is None
    agent = Agent.from_dict(json.loads("""{"id": "agt_1", "name": "Line 3", "org_id": "org_1",
        "bundle_id": "bnd_01h", "blueprint": "osm", "blueprint_id": "blp_01h", "status": "cancelled",
        "created_at": "2026-11-01T10:00:00Z", "connectors": {"source": [{"type": "file", "id": "a.csv",
        "format": "csv"}], "sink": null}, "job_id": "job_1", "started_at": null, "completed_at": null,
        "error": null}"""))
    assert agent.is_terminal and agent.connectors["sink"] is None and agent.to_dict()["error"] is None
    blueprint = Blueprint.from_dict(json.loads("""{"id": "blp_01h", "blueprint_key": "osm", "name": "OSM",
        "description": "d", "document": {"graph": {"edges": []}, "blueprint_id": "blp_01h"},
        "yaml_document": null, "is_canonical": true, "is_active": true, "created_at": "2026-11-01T10:00:00Z",
        "brand_new": 1}"""))
    assert blueprint.document["blueprint_id"] == "blp_01h" and blueprint.extra == {"brand_new": 1}


def test_every_remaining_call(agents_emu, run):
    labelled = "timestamp,temperature,state\n" + "".join(f"{i},{i % 5},{'idle' if i % 3 else 'running'}\n"
                                                         for i in range(64))
    file_id = _upload(agents_emu, "l.csv", labelled)
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    evaluation = run(lambda c: c.agents.evals.create(osm.id, [file_id], name="e1"))
    assert [e.id for e in run(lambda c: c.agents.evals.list())] == [evaluation.id]
    assert run(lambda c: c.agents.evals.get(evaluation.id)).status == "running"
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.evals.delete(evaluation.id))
    assert run(lambda c: c.agents.evals.cancel(evaluation.id)).status == "canceled"
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.evals.cancel(evaluation.id))
    run(lambda c: c.agents.evals.delete(evaluation.id))
    with pytest.raises(NotFoundError):
        run(lambda c: c.agents.evals.get(evaluation.id))
    opt = run(lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[file_id],
                                                      max_trials=3, name="o1"))
    assert [o.id for o in run(lambda c: c.agents.optimizations.list())] == [opt.id]
    assert run(lambda c: c.agents.optimizations.get(opt.id)).progress["pending"] >= 0
    assert run(lambda c: c.agents.optimizations.cancel(opt.id)).status == "canceled"
    run(lambda c: c.agents.optimizations.delete(opt.id))
    with pytest.raises(NotFoundError):
        run(lambda c: c.agents.optimizations.get(opt.id))
    mine = run(lambda c: c.agents.blueprints.create("to-delete", document=DOCUMENT))
    bundle = run(lambda c: c.agents.bundles.create(mine.id, name="b-to-delete"))
    with pytest.raises(ConflictError):
        run(lambda c: c.agents.blueprints.delete(mine.id))  # a bundle is pinned to it
    run(lambda c: c.agents.bundles.delete(bundle.id))
    run(lambda c: c.agents.blueprints.delete(mine.id))
    with pytest.raises(NotFoundError):
        run(lambda c: c.agents.bundles.get(bundle.id))
    names = [b.name for b in run(lambda c: c.agents.bundles.list(sort="name", order="asc"))]
    assert names == sorted(names)


def test_failed_evaluation_and_optimization(agents_emu, run):
    file_id = _upload(agents_emu)
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    agents_emu.fail_next_job("eval", error="labels unreadable")
    evaluation = run(lambda c: c.agents.evals.create(osm.id, [file_id]))
    with pytest.raises(AgentRunError) as info:
        run(lambda c: c.agents.evals.wait(evaluation.id, timeout=30))
    assert "labels unreadable" in str(info.value) and info.value.agent.id == evaluation.id
    agents_emu.fail_next_job("optimization", error="trial crashed")
    opt = run(lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[file_id],
                                                      max_trials=2))
    with pytest.raises(AgentRunError):
        run(lambda c: c.agents.optimizations.wait(opt.id, timeout=30))


def test_instance_filters_and_logs_search(agents_emu, run):
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    first = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    run(lambda c: c.agents.instances.wait(first.id, timeout=30))
    second = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    run(lambda c: c.agents.instances.pause(second.id))
    assert [a.id for a in run(lambda c: c.agents.instances.list(status="paused"))] == [second.id]
    assert [a.id for a in run(lambda c: c.agents.instances.list(status="completed", bundle_id=bundle.id))] == [first.id]
    assert [log.event_type for log in run(lambda c: c.agents.instances.logs(first.id, search="completed"))] == ["job.completed"]
    assert run(lambda c: c.agents.instances.logs(first.id, level="error")) == []
    run(lambda c: c.agents.instances.cancel(second.id))


def test_wait_progress_bar(agents_emu, run, monkeypatch):
    import sys

    bars: list[Any] = []

    class FakeBar:
        """tqdm as the SDK uses it, drawing its line by tqdm's rule: the fields of `bar_format`
        filled in, the postfix after ", " (which the bar read as 'agent agt_1: , running')."""

        def __init__(self, **kwargs: Any) -> None:
            self.kwargs, self.lines, self.closed = kwargs, [], False
            self.desc, self.postfix, self.bar_format = kwargs.get("desc", ""), "", kwargs["bar_format"]
            bars.append(self)

        def draw(self) -> None:
            self.lines.append(self.bar_format.format(desc=self.desc, postfix=", " + self.postfix if self.postfix else "",
                                                     elapsed="00:00"))

        def set_postfix_str(self, text: str, refresh: bool = True) -> None:
            self.postfix = text
            self.draw()

        def set_description_str(self, text: str, refresh: bool = True) -> None:
            self.desc = text
            self.draw()

        def close(self) -> None:
            self.closed = True

    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
    if "tqdm" not in sys.modules:
        with pytest.raises(InvalidArgumentError) as info:
            run(lambda c: c.agents.instances.wait(started.id, progress=True))
        assert info.value.argument == "progress"
    use_fake_tqdm(monkeypatch, FakeBar)
    agent = run(lambda c: c.agents.instances.wait(started.id, timeout=30, progress=True))
    assert agent.status == "completed"
    (bar,) = bars
    assert bar.lines[-1] == f"agent {started.id}: completed [00:00]" and bar.closed
    for line in bar.lines:
        status = line.removeprefix(f"agent {started.id}: ").removesuffix(" [00:00]")
        assert status.isalpha(), line


def test_page_size_applies_to_every_list():
    with Emulator(page_size=2) as emu:
        with emu.client() as client:
            for i in range(5):
                client.files.upload_base64(f"f{i}.txt", b"x")
            first = client.files.list().first_page()
            assert len(first.data) == 2 and first.has_more
            assert len(list(client.files.list())) == 5
            assert len(client.agents.blueprints.list().first_page().data) == 2
            assert len(client.files.list(limit=4).first_page().data) == 4, "an explicit limit wins"


def test_command_line_work_duration_and_page_size():
    from test_model_catalogue import start_cli, stop_cli

    proc, settings = start_cli("--work-duration", "0.1", "--page-size", "2")
    try:
        with sensorium.Client(api_key=settings["SENSORIUM_API_KEY"], base_url=settings["SENSORIUM_BASE_URL"]) as c:
            assert len(c.agents.blueprints.list().first_page().data) == 2
            file_id = c.files.upload_base64("a.csv", CSV.encode()).file_id
            bundle = c.agents.bundles.create("osm", name="cli")
            started = c.agents.bundles.run(bundle.id, file_id)
            assert c.agents.instances.wait(started.id, timeout=20).status == "completed"
    finally:
        stop_cli(proc)


@pytest.mark.parametrize("page_size", [2, 100])
def test_blueprints_listed_before_an_id_are_every_newer_one_once(client_kind, page_size):
    """`before=` lists newer blueprints; page 2 used to send the pager's `after` beside the
    fixed `before`, which the platform refuses (400 'mutually exclusive')."""
    with Emulator(page_size=page_size) as emu:
        run = lambda op: run_on(client_kind, op, api_key=emu.api_key, base_url=emu.base_url)  # noqa: E731
        with emu.client() as client:
            ids = [client.agents.blueprints.create(f"k{i}", document=DOCUMENT).id for i in range(6)]
            newest_first = [b.id for b in client.agents.blueprints.list()]
        pivot = newest_first.index(ids[0])
        for limit in (None, 2):
            newer = [b.id for b in run(lambda c: c.agents.blueprints.list(before=ids[0], limit=limit))]
            # From the pivot outwards, oldest first, in one order across pages (it zig-zagged).
            assert newer == newest_first[:pivot][::-1], limit
            older = [b.id for b in run(lambda c: c.agents.blueprints.list(after=ids[3], limit=limit))]
            assert older == newest_first[newest_first.index(ids[3]) + 1:], limit


def test_optimization_wait_feeds_the_bar_with_its_trials(agents_emu, run, monkeypatch):
    """An optimization's record counts its trials (`progress`, `budget.max_trials`): the bar
    shows done/total instead of the status word alone."""

    bars: list[Any] = []

    class FakeBar:
        def __init__(self, **kwargs: Any) -> None:
            self.total, self.n, self.bar_format, self.counts, self.closed = kwargs.get("total"), 0, "", [], False
            bars.append(self)

        def set_description_str(self, text: str, refresh: bool = True) -> None:
            self.counts.append((self.n, self.total, text.rpartition(": ")[2]))

        def close(self) -> None:
            self.closed = True

    use_fake_tqdm(monkeypatch, FakeBar)
    file_id = _upload(agents_emu)
    osm = run(lambda c: c.agents.blueprints.get("osm"))
    opt = run(lambda c: c.agents.optimizations.create(osm.id, objective="macro_f1", validation_examples=[file_id],
                                                      max_trials=3))
    assert run(lambda c: c.agents.optimizations.wait(opt.id, timeout=60, progress=True)).status == "completed"
    (bar,) = bars
    assert bar.counts[-1] == (3, 3, "completed") and bar.closed
    assert all(total == 3 for _, total, _ in bar.counts)



def _on(client_kind: str, emu: Emulator) -> Callable[..., Any]:
    return lambda operation: run_on(client_kind, operation, api_key=emu.api_key, base_url=emu.base_url)


def test_the_answers_of_cancel_pause_and_resume_do_not_lag(client_kind):
    """The status lag delays what reads of a run that ended by itself say; the answer to a
    cancel said `running` (the spec: cancel returns the agent, status `canceled`)."""
    with Emulator(work_duration=30) as emu:
        call = _on(client_kind, emu)
        bundle, file_id = _osm_bundle(emu), _upload(emu)
        emu.lag_agent_status(30)
        started = call(lambda c: c.agents.bundles.run(bundle.id, file_id))
        assert call(lambda c: c.agents.instances.pause(started.id)).status == "paused"
        assert call(lambda c: c.agents.instances.resume(started.id)).status == "running"
        answer = call(lambda c: c.agents.instances.cancel(started.id))
        assert answer.status == "canceled" and answer.completed_at, answer.to_dict()
        # The caller ended it: reads say so at once, as the answer did.
        assert call(lambda c: c.agents.instances.get(started.id)).status == "canceled"
        assert call(lambda c: c.agents.instances.wait(started.id, timeout=10)).status == "canceled"


MODE_CSV = "time,a,mode\n" + "".join(f"{i},{i % 13},{'idle' if i < 50 else 'running'}\n" for i in range(100))


def test_an_eval_example_takes_its_labels_from_ground_truth(agents_emu, run):
    """CHOICES: labels come from `ground_truth` ({"state": {"from": {"column": ...}}}, as the
    wire notes show it) or from a `state` column; ground_truth was ignored, so the eval failed
    "no labels"."""
    file_id = _upload(agents_emu, "mode.csv", MODE_CSV)
    truth = {"state": {"from": {"column": "mode"}}}
    evaluation = run(lambda c: c.agents.evals.create("osm", [{"inputs": [file_id], "ground_truth": truth}]))
    done = run(lambda c: c.agents.evals.wait(evaluation.id, timeout=30))
    assert {"idle", "running"} <= set(done.metrics_report["targets"]["state"]["class_names"])
    assert [e["status"] for e in run(lambda c: c.agents.evals.examples(evaluation.id))] == ["completed"]
    # A column the CSV does not have fails that example, naming the column.
    missing = {"inputs": [file_id], "ground_truth": {"state": {"from": {"column": "phase"}}}}
    evaluation = run(lambda c: c.agents.evals.create("osm", [{"inputs": [file_id], "ground_truth": truth}, missing]))
    assert run(lambda c: c.agents.evals.wait(evaluation.id, timeout=30)).status == "completed"
    examples = run(lambda c: c.agents.evals.examples(evaluation.id))
    assert [e["status"] for e in examples] == ["completed", "failed"]
    assert "phase" in examples[1]["error"], examples[1]


def test_a_sink_naming_the_runs_own_source_is_refused_when_the_run_is_made(agents_emu, run, tmp_path):
    """The run's output silently replaced its own input file. Now that run is refused (409
    file_already_exists, as an upload of a taken name is) and the file keeps its content; a sink
    written by one run is replaced by the next run's output."""
    file_id = _upload(agents_emu, "pump.csv")
    bundle = _osm_bundle(agents_emu)
    with pytest.raises(ConflictError) as info:
        run(lambda c: c.agents.bundles.run(bundle.id, file_id, sink="pump.csv"))
    assert info.value.code == "file_already_exists" and "pump.csv" in str(info.value)
    assert run(lambda c: c.agents.instances.list()) == [], "no run was made"
    run(lambda c: c.files.download("pump.csv", tmp_path / "after.csv"))
    assert (tmp_path / "after.csv").read_text() == CSV
    for _ in range(2):
        started = run(lambda c: c.agents.bundles.run(bundle.id, file_id, sink="states.csv"))
        assert run(lambda c: c.agents.instances.wait(started.id, timeout=30)).status == "completed"
    assert [f.file_id for f in run(lambda c: c.files.list())].count("states.csv") == 1


def test_two_planned_failures_of_one_kind_fail_two_jobs_in_order(agents_emu, run):
    """The second fail_next_job() replaced the first: only one run failed."""
    bundle, file_id = _osm_bundle(agents_emu), _upload(agents_emu)
    agents_emu.fail_next_job("agent", error="first failure")
    agents_emu.fail_next_job("agent", error="second failure")
    ends = []
    for _ in range(3):
        started = run(lambda c: c.agents.bundles.run(bundle.id, file_id))
        try:
            ends.append(run(lambda c: c.agents.instances.wait(started.id, timeout=30)).status)
        except AgentRunError as e:
            ends.append(e.error)
    assert ends == ["first failure", "second failure", "completed"]


def test_a_run_paused_while_queued_starts_only_once_resumed():
    """A pause during admission left the run to log job.admitted and job.started (and get a
    started_at) after job.paused."""
    with Emulator(work_duration=0.2) as emu:
        bundle, file_id = _osm_bundle(emu), _upload(emu)
        with emu.client() as client:
            started = client.agents.bundles.run(bundle.id, file_id)
            client.agents.instances.pause(started.id)
            time.sleep(0.5)  # ample for the old executor to admit and start it
            paused = client.agents.instances.get(started.id)
            events = [log.event_type for log in client.agents.instances.logs(started.id)][::-1]
            assert paused.status == "paused"
            if events.index("job.paused") == 0:  # paused before it was admitted (the usual case)
                assert events == ["job.paused"] and paused.started_at is None, (events, paused.started_at)
            else:  # the pause came late: it had started already, and nothing followed the pause
                assert events[-1] == "job.paused", events
            client.agents.instances.resume(started.id)
            assert client.agents.instances.wait(started.id, timeout=30).status == "completed"
            events = [log.event_type for log in client.agents.instances.logs(started.id)][::-1]
            after_resume = events[events.index("job.resumed"):]
            assert after_resume[-1] == "job.completed"
            assert "job.started" in events and events.index("job.started") != events.index("job.paused") + 1


def test_ended_optimizations_and_evals_count_consistently(client_kind):
    """A canceled optimization counted its canceled trial nowhere and every trial `pending`
    for ever (its cancel's answer still one `running`); a failed one kept trials `pending`; an
    eval failed by fail_next_job listed its example as completed with metrics."""
    labelled = "time,a,state\n" + "".join(f"{i},{i % 7},{'idle' if i < 50 else 'run'}\n" for i in range(100))
    with Emulator(work_duration=30) as emu:
        call = _on(client_kind, emu)
        file_id = _upload(emu, "lab.csv", labelled)
        opt = call(lambda c: c.agents.optimizations.create("osm", objective="accuracy", validation_examples=[file_id],
                                                           max_trials=3))
        deadline = time.monotonic() + 30
        while not any(t.status == "running" for t in call(lambda c: c.agents.optimizations.trials(opt.id))):
            assert time.monotonic() < deadline, "the first trial never started"
            time.sleep(0.02)
        answer = call(lambda c: c.agents.optimizations.cancel(opt.id))
        ended = {"pending": 0, "running": 0, "completed": 0, "failed": 0, "canceled": 1}
        assert answer.status == "canceled" and answer.progress == ended, answer.progress
        assert call(lambda c: c.agents.optimizations.get(opt.id)).progress == ended
    with Emulator(work_duration=0.2) as emu:
        call = _on(client_kind, emu)
        file_id = _upload(emu, "lab.csv", labelled)
        emu.fail_next_job("optimization", error="boom")
        opt = call(lambda c: c.agents.optimizations.create("osm", objective="accuracy", validation_examples=[file_id],
                                                           max_trials=3))
        with pytest.raises(AgentRunError):
            call(lambda c: c.agents.optimizations.wait(opt.id, timeout=30))
        failed = call(lambda c: c.agents.optimizations.get(opt.id))
        assert failed.progress == {"pending": 0, "running": 0, "completed": 0, "failed": 1, "canceled": 0}
        opt = call(lambda c: c.agents.optimizations.create("osm", objective="accuracy", validation_examples=[file_id],
                                                           max_trials=2))
        done = call(lambda c: c.agents.optimizations.wait(opt.id, timeout=30))
        assert done.progress == {"pending": 0, "running": 0, "completed": 2, "failed": 0, "canceled": 0}
        emu.fail_next_job("eval", error="eval boom")
        evaluation = call(lambda c: c.agents.evals.create("osm", [file_id, file_id]))
        with pytest.raises(AgentRunError) as info:
            call(lambda c: c.agents.evals.wait(evaluation.id, timeout=30))
        assert info.value.agent.metrics_report is None
        examples = call(lambda c: c.agents.evals.examples(evaluation.id))
        assert [(e["status"], e["error"], e["metrics"]) for e in examples] == [("failed", "eval boom", None)] * 2


def test_work_duration_help_names_every_kind_of_job():
    from sensorium.emulator import _parser

    (action,) = [a for a in _parser()._actions if a.dest == "work_duration"]
    assert "batch" in action.help and "fine-tuning" in action.help
    doc = " ".join((Emulator.__init__.__doc__ or "").split())
    assert "batch job" in doc and "fine-tuning job" in doc
