"""The platform's official Python client (``archetypeai``, pinned in requirements-dev.txt), given
the emulator's base URL as its endpoint, runs its agents calls unchanged: bundles, run,
``wait_until_done``, results, logs, events, delete, evals, optimizations and the node registry.

Its ``blueprints.get(..., include_yaml=True)`` sends ``yaml=True``, which the agents service
answers with 400 (booleans must be lowercase): the emulator does the same, as checked below."""

from __future__ import annotations

import pytest

from sensorium.testing import Emulator

archetypeai = pytest.importorskip("archetypeai")

CSV = "timestamp,temperature,state\n" + "".join(f"{i},{i % 9},{'idle' if i % 2 else 'running'}\n" for i in range(96))


@pytest.fixture
def emu():
    with Emulator(work_duration=0.2) as emulator:
        yield emulator


def test_official_client_agents_calls(emu):
    official = archetypeai.ArchetypeAI(emu.api_key, api_endpoint=emu.base_url)
    with emu.client() as client:
        file_id = client.files.upload_base64("line.csv", CSV.encode()).file_id
        bundle = official.agents.bundles.create("osm", "Official client bundle", values={"window_size": 16})
        assert bundle["id"].startswith("bnd_") and bundle["status"] == "ready"
        assert official.agents.bundles.get(bundle["id"])["name"] == "Official client bundle"
        assert any(b["id"] == bundle["id"] for b in official.agents.bundles.list(query="Official")["data"])
    run = official.agents.bundles.run(bundle["id"], [file_id])
    assert run["status"] == "running"
    agent = official.agents.instances.wait_until_done(run["id"], poll_interval_sec=0.1, timeout_sec=30)
    assert agent["status"] == "completed"
    results = official.agents.instances.get_results(run["id"])["data"]
    assert results and results[0]["data"]["ref"].startswith("/files/download/")
    logs = official.agents.instances.get_logs(run["id"])["data"]
    assert logs[0]["event_type"] == "job.completed"
    assert official.agents.instances.get_events(run["id"])["data"]
    assert [a["id"] for a in official.agents.instances.list(bundle_id=bundle["id"])["data"]] == [run["id"]]
    official.agents.instances.delete(run["id"])
    assert official.agents.instances.list(bundle_id=bundle["id"])["data"] == []
    with pytest.raises(archetypeai.ApiError):
        official.agents.blueprints.get("osm", include_yaml=True)

    osm = official.agents.blueprints.get("osm")
    evaluation = official.agents.evals.create(osm["id"], [file_id], name="official eval")
    done = official.agents.evals.wait_until_done(evaluation["id"], poll_interval_sec=0.1, timeout_sec=30)
    assert done["status"] == "completed" and done["metrics_report"]["targets"]["state"]["confusion_matrix"]
    assert official.agents.evals.list_examples(evaluation["id"])["data"]

    opt = official.agents.optimizations.create(osm["id"], "macro_f1", [file_id], max_trials=2)
    finished = official.agents.optimizations.wait_until_done(opt["id"], poll_interval_sec=0.1, timeout_sec=60)
    assert finished["status"] == "completed"
    trials = official.agents.optimizations.list_trials(opt["id"])["data"]
    promoted = official.agents.optimizations.promote_trial(opt["id"], trials[0]["id"])
    assert promoted["id"].startswith("blp_")
    assert {"MultiModalSource", "RecordsSink"} <= {n["key"] for n in official.agents.get_node_registry()["data"]}
