"""The emulator's model catalogue: the ids production code sends (live family names) as well as
the spec's neutral ones, per organization and configurable, from Python and the command line;
the suggestion on an unknown id; and the timing fields of a query answer."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
from typing import Any, Iterator

import numpy as np
import pytest

from _raw_http import request
from sensorium import AsyncClient, Client, Model, QueryResult, events
from sensorium.errors import BadRequestError, InvalidArgumentError
from sensorium.testing import DEFAULT_MODELS, Emulator

# Written from the spec (Direct query, `model`) and the wire notes (Direct query: live ids).
SPEC_IDS = [
    "Reasoner::c2_4_7b_251215a172f6d7",
    "Reasoner::c2_5_8b_260413b723a9ab",
    "Encoder::encoder_embeddings_01",
]
LIVE_IDS = [
    "Newton::c2_6_8b_fp8_260424d7a55d5e",
    "Newton::c2_5_8b_260413b723a9ab",
    "Newton::c2_4_7b_251215a172f6d7",
    "Newton::c2_4_3b_251215dfe6a746",
    "Newton::c2_3_7b_2508014e10af56",
    "OmegaEncoder::omega_embeddings_1_4",
    "OmegaEncoder::omega_embeddings_01",
    "OmegaEncoder::omega_embeddings_surface_01",
]
SPELLINGS = {"Reasoner": "Newton", "Newton": "Reasoner", "Encoder": "OmegaEncoder", "OmegaEncoder": "Encoder"}
REASONING_PREFIXES = {"Reasoner", "Newton"}
WINDOW = np.sin(np.linspace(0, 6, 2 * 64)).reshape(2, 64)


def other_spelling(model_id: str) -> str:
    prefix, version = model_id.split("::", 1)
    return f"{SPELLINGS[prefix]}::{version}"


def is_reasoning(model_id: str) -> bool:
    return model_id.split("::", 1)[0] in REASONING_PREFIXES


def suggested_ids(err: BadRequestError) -> list[str]:
    return re.findall(r"'([^']+)'", err.suggestion or "")


class Caller:
    """One client, sync or async, behind awaitable methods, so a test body runs for both."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client
        self.is_async = isinstance(client, AsyncClient)

    async def query(self, model: str, query: str = "", **params: Any) -> QueryResult:
        result = self.client.query(model, query, **params)
        return await result if self.is_async else result

    async def embed(self, model: str, data: Any) -> Any:
        result = self.client.embed(model, data)
        return await result if self.is_async else result

    async def models(self, **filters: Any) -> list[Model]:
        pager = self.client.models.list(**filters)
        if self.is_async:
            return [m async for m in pager]
        return list(pager)


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``connect(emu, api_key=None)``: a :class:`Caller` of the parametrized kind."""
    clients: list[Client | AsyncClient] = []

    def make(emulator: Emulator, api_key: str | None = None) -> Caller:
        key = api_key or emulator.api_key
        client = emulator.client(api_key=key) if request.param == "sync" else emulator.async_client(api_key=key)
        clients.append(client)
        return Caller(client)

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def caller(emu: Emulator, connect: Any) -> Caller:
    return connect(emu)


# --- The default catalogue --------------------------------------------------------------------


def test_default_catalogue_has_every_spec_and_live_id_under_both_spellings() -> None:
    expected = set(SPEC_IDS) | set(LIVE_IDS)
    expected |= {other_spelling(i) for i in expected}
    assert set(DEFAULT_MODELS) == expected
    assert len(DEFAULT_MODELS) == len(expected) == 18


async def test_every_default_id_answers(caller: Caller) -> None:
    for model in DEFAULT_MODELS:
        if is_reasoning(model):
            result = await caller.query(model, "Which model?")
            assert result.status == "completed", model
            assert result.text.startswith(f"[emulated {model}]"), model
        else:
            emb = await caller.embed(model, WINDOW)
            assert emb.vectors.shape == (2, 768), model
            answer = await caller.query(model, events=[events.numeric(WINDOW)])
            assert answer.status == "completed", model
            assert len(answer.to_dict()["response"]["response"]) == 2, model


async def test_models_list_shows_the_default_catalogue(caller: Caller) -> None:
    assert [m.id for m in await caller.models()] == list(DEFAULT_MODELS)
    newton = await caller.models(model_family="newton")
    assert {m.id for m in newton} == {m for m in DEFAULT_MODELS if is_reasoning(m)}
    assert {m.model_family for m in newton} == {"Reasoner", "Newton"}  # each record keeps its own prefix
    assert [m.id for m in await caller.models(model_family="ENCODER")] == [
        m.id for m in await caller.models(model_family="OmegaEncoder")
    ]
    assert {m.scope for m in await caller.models()} == {"platform"}
    assert await caller.models(scope="org") == []


async def test_wrong_family_keeps_its_clear_error(caller: Caller) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        await caller.embed("Newton::c2_4_7b_251215a172f6d7", WINDOW)
    assert info.value.argument == "model" and "encoder" in str(info.value)
    with pytest.raises(BadRequestError) as bad:
        await caller.query("OmegaEncoder::omega_embeddings_01", "What is this?")
    assert bad.value.code == "invalid_request"
    assert "'OmegaEncoder::omega_embeddings_01' is an encoder model" in (bad.value.message or "")


# --- Unknown ids -----------------------------------------------------------------------------


async def test_near_miss_is_400_with_the_closest_ids_same_family_first(caller: Caller) -> None:
    with pytest.raises(BadRequestError) as info:
        await caller.query("Newton::c2_5_8b_260413b723a9ac", "hi")  # last character off
    assert info.value.status == 400 and info.value.code == "invalid_model_version"
    ids = suggested_ids(info.value)
    assert ids[:2] == ["Newton::c2_5_8b_260413b723a9ab", "Reasoner::c2_5_8b_260413b723a9ab"]
    assert len(ids) == 3 and all(is_reasoning(i) for i in ids)

    with pytest.raises(BadRequestError) as info:
        await caller.embed("OmegaEncoder::omega_embedings_01", WINDOW)  # a letter missing
    assert info.value.code == "invalid_model_version"
    assert suggested_ids(info.value)[0] == "OmegaEncoder::omega_embeddings_01"
    assert all(not is_reasoning(i) for i in suggested_ids(info.value))


# --- Emulator(models=...) --------------------------------------------------------------------


async def test_custom_entries_work_for_both_calls_and_the_filters(connect: Any) -> None:
    own = [
        {"id": "Acme::ft-reason-1", "family": "reasoner"},
        {"id": "Acme::ft-embed-1", "family": "encoder"},
    ]
    with Emulator(models=[*DEFAULT_MODELS, *own]) as emu:
        caller = connect(emu)
        result = await caller.query("Acme::ft-reason-1", "hello")
        assert result.text.startswith("[emulated Acme::ft-reason-1]")
        assert (await caller.embed("Acme::ft-embed-1", WINDOW)).vectors.shape == (2, 768)
        # The client refuses no family it does not know; the answer's shape tells it apart.
        with pytest.raises(InvalidArgumentError, match="encoder"):
            await caller.embed("Acme::ft-reason-1", WINDOW)

        assert len(await caller.models()) == len(DEFAULT_MODELS) + 2
        reasoners = {m.id for m in await caller.models(model_family="Reasoner")}
        assert "Acme::ft-reason-1" in reasoners and "Acme::ft-embed-1" not in reasoners
        acme = await caller.models(model_family="acme")
        assert [m.id for m in acme] == ["Acme::ft-reason-1", "Acme::ft-embed-1"]
        assert {m.model_family for m in acme} == {"Acme"}
        assert [m.id for m in await caller.models(scope="org")] == [e["id"] for e in own]
        assert not {e["id"] for e in own} & {m.id for m in await caller.models(scope="platform")}
        assert [m.id for m in await caller.models(variant="FT-EMBED-1")] == ["Acme::ft-embed-1"]
        assert [m.id for m in await caller.models(model_family="Acme", search="embed")] == ["Acme::ft-embed-1"]
        with pytest.raises(BadRequestError):
            await caller.models(model_family="Globex")


async def test_models_option_replaces_the_catalogue(connect: Any) -> None:
    with Emulator(models=["Newton::c2_4_7b_251215a172f6d7"]) as emu:
        caller = connect(emu)
        assert (await caller.query("Newton::c2_4_7b_251215a172f6d7", "hi")).status == "completed"
        with pytest.raises(BadRequestError) as info:
            await caller.query("Reasoner::c2_4_7b_251215a172f6d7", "hi")
        assert info.value.code == "invalid_model_version"
        assert suggested_ids(info.value) == ["Newton::c2_4_7b_251215a172f6d7"]
        assert [m.id for m in await caller.models()] == ["Newton::c2_4_7b_251215a172f6d7"]
        # Every organization without its own list gets the emulator's.
        other = connect(emu, emu.new_api_key())
        assert [m.id for m in await other.models()] == ["Newton::c2_4_7b_251215a172f6d7"]


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (["Acme::ft-1"], "family"),  # a prefix the emulator does not know needs its family
        ([{"id": "Acme::ft-1", "family": "vision"}], "vision"),
        ([{"id": "Newton::x", "family": "encoder"}], "prefix"),
        ([{"id": "Acme::a", "family": "reasoner"}, {"id": "Acme::a", "family": "encoder"}], "twice"),
        ([{"family": "reasoner"}], "id"),
        ([{"id": "Acme::a", "family": "reasoner", "scope": "org"}], "scope"),
        ([3], "model entry"),
        ("Newton::c2_4_7b_251215a172f6d7", "list"),
    ],
)
def test_bad_entries_are_value_errors(models: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Emulator(models=models)


# --- Per organization ------------------------------------------------------------------------


async def test_an_organization_with_its_own_catalogue(emu: Emulator, connect: Any) -> None:
    own = ["Newton::c2_4_3b_251215dfe6a746", "OmegaEncoder::omega_embeddings_01"]
    small = connect(emu, emu.new_api_key(org="small-co", models=own))
    assert (await small.query(own[0], "hi")).status == "completed"
    assert (await small.embed(own[1], WINDOW)).vectors.shape == (2, 768)
    for other in ("Newton::c2_4_7b_251215a172f6d7", "Reasoner::c2_4_3b_251215dfe6a746"):
        with pytest.raises(BadRequestError) as info:
            await small.query(other, "hi")
        assert info.value.code == "invalid_model_version"
        assert set(suggested_ids(info.value)) <= set(own)
    with pytest.raises(BadRequestError) as info:
        await small.embed("Encoder::encoder_embeddings_01", WINDOW)
    assert info.value.code == "invalid_model_version"
    assert [m.id for m in await small.models()] == own
    assert [m.id for m in await small.models(model_family="reasoner")] == own[:1]

    # Another key of that organization (any role) shares its list; other organizations do not.
    colleague = connect(emu, emu.new_api_key(org="small-co", role="member"))
    assert [m.id for m in await colleague.models()] == own
    default = connect(emu)
    assert (await default.query("Newton::c2_4_7b_251215a172f6d7", "hi")).status == "completed"
    assert len(await default.models()) == len(DEFAULT_MODELS)


def test_roles_are_checked(emu: Emulator) -> None:
    for role in ("member", "admin", "super_admin"):
        assert emu.new_api_key(role=role).startswith("sk-emu-")
    with pytest.raises(ValueError, match="role"):
        emu.new_api_key(role="owner")


def test_control_route_issues_keys_with_role_and_models(emu: Emulator) -> None:
    body = {"org": "ci", "role": "member", "models": ["Newton::c2_4_3b_251215dfe6a746", {"id": "Acme::x", "family": "encoder"}]}
    reply = request(emu, "POST", "/_emulator/keys", json.dumps(body).encode(), key=None)
    assert reply.status == 200
    answer = reply.json()
    assert {k: answer[k] for k in ("org", "role")} == {"org": "ci", "role": "member"}
    listed = request(emu, "GET", "/models", key=answer["api_key"]).json()["data"]
    assert [m["id"] for m in listed] == ["Newton::c2_4_3b_251215dfe6a746", "Acme::x"]
    for bad in ({"role": "owner"}, {"models": ["Acme::y"]}, {"models": "Newton::x"}):
        reply = request(emu, "POST", "/_emulator/keys", json.dumps(bad).encode(), key=None)
        assert reply.status == 400, bad


# --- The command line ------------------------------------------------------------------------


def start_cli(*args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sensorium.emulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    settings = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(2))
    return proc, settings


def stop_cli(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(60)
def test_command_line_model_flag() -> None:
    proc, env = start_cli("--model", "Newton::c2_4_7b_251215a172f6d7", "--model", "Acme::ft-embed=encoder")
    try:
        with Client(env["SENSORIUM_API_KEY"], env["SENSORIUM_BASE_URL"]) as client:
            assert [m.id for m in client.models.list()] == ["Newton::c2_4_7b_251215a172f6d7", "Acme::ft-embed"]
            assert client.query("Newton::c2_4_7b_251215a172f6d7", "hi").status == "completed"
            assert client.embed("Acme::ft-embed", WINDOW).vectors.shape == (2, 768)
            with pytest.raises(BadRequestError) as info:
                client.query("Reasoner::c2_4_7b_251215a172f6d7", "hi")
            assert info.value.code == "invalid_model_version"
    finally:
        stop_cli(proc)

    proc, env = start_cli("--model", "default", "--model", "Acme::ft-reason=reasoner")
    try:
        with Client(env["SENSORIUM_API_KEY"], env["SENSORIUM_BASE_URL"]) as client:
            assert [m.id for m in client.models.list()] == [*DEFAULT_MODELS, "Acme::ft-reason"]
    finally:
        stop_cli(proc)

    bad = subprocess.run(
        [sys.executable, "-m", "sensorium.emulator", "--model", "Acme::ft-1"],
        capture_output=True, text=True, timeout=30,
    )
    assert bad.returncode == 2
    assert "Acme::ft-1" in bad.stderr and "family" in bad.stderr
    assert "--model Acme::ft-1=reasoner" in bad.stderr  # the flag's own form, not only Python's


def test_every_emulator_option_is_a_command_line_flag_that_reaches_the_server(monkeypatch) -> None:
    """CHOICES: every Emulator(...) option is also a flag of `python -m sensorium.emulator`. Read
    from the signature, so an option added later without its flag fails here."""
    import inspect

    import sensorium.emulator as cli

    options = {name for name in inspect.signature(Emulator.__init__).parameters if name != "self"}
    flags = {action.dest for action in cli._parser()._actions if action.option_strings} - {"help"}
    # `--model` is repeatable, one id each; `--host` exists only where another process connects.
    flags = {"models" if f == "model" else f for f in flags}
    assert options - flags == set(), "Emulator options without a command-line flag"
    assert flags - options == {"host"}

    received: dict[str, Any] = {}

    def fake_server(**kwargs: Any) -> None:
        received.update(kwargs)
        raise ValueError("stop here")

    monkeypatch.setattr(cli, "EmulatorServer", fake_server)
    with pytest.raises(SystemExit):
        cli.main(["--max-upload-bytes", "1000"])
    assert options <= set(received), "a flag parsed but not passed to the server"
    assert received["max_upload_bytes"] == 1000


@pytest.mark.timeout(60)
def test_command_line_max_upload_bytes(tmp_path) -> None:
    from sensorium.errors import PayloadTooLargeError

    (tmp_path / "small.txt").write_text("x" * 1000)
    (tmp_path / "big.txt").write_text("x" * 1001)
    proc, env = start_cli("--max-upload-bytes", "1000")
    try:
        with Client(env["SENSORIUM_API_KEY"], env["SENSORIUM_BASE_URL"], max_retries=0) as client:
            client.files.upload(tmp_path / "small.txt")
            with pytest.raises(PayloadTooLargeError):
                client.files.upload(tmp_path / "big.txt")
    finally:
        stop_cli(proc)


# --- Timing fields of a query answer ---------------------------------------------------------

# The spec's `/query` 200 table, written out with every timing field it names.
SPEC_ANSWER = json.loads("""{
  "query_id": "q-7f3a",
  "status": "completed",
  "response": {
    "response": ["The belt stopped twice."],
    "query": "What happened?", "prompt": "What happened?", "system": "", "instruction": "",
    "generation_latency": 1.3, "query_gpq_latency": 0.1, "query_queue_latency": 0.1,
    "results_timestamp": 1760000001.5, "prefetch_stats": {}
  },
  "query_timestamp": 1760000000.0,
  "loading_timestamp": 1760000000.1,
  "inference_timestamp": 1760000000.2,
  "response_timestamp": 1760000001.5,
  "query_queue_time_sec": 0.1,
  "inference_time_sec": 1.3,
  "query_response_time_sec": 1.5,
  "gpq_node": "gpq-node-12"
}""")
TOP_TIMING = [
    "query_timestamp", "loading_timestamp", "inference_timestamp", "response_timestamp",
    "query_queue_time_sec", "inference_time_sec", "query_response_time_sec", "gpq_node",
]
RESPONSE_TIMING = ["generation_latency", "query_gpq_latency", "query_queue_latency", "results_timestamp", "prefetch_stats"]


def json_kind(v: Any) -> str:
    return {bool: "bool", int: "number", float: "number", str: "string", dict: "object", list: "array"}[type(v)]


def test_spec_answer_reads_its_timing_fields() -> None:
    result = QueryResult.from_json(json.dumps(SPEC_ANSWER).encode())
    for name in TOP_TIMING:
        assert getattr(result, name) == SPEC_ANSWER[name], name
    assert result.to_dict()["response"]["prefetch_stats"] == {}


async def test_query_answer_has_the_spec_timing_fields(emu: Emulator, caller: Caller, tmp_path: Any) -> None:
    emu.set_query_delay(0.2)
    (tmp_path / "notes.txt").write_text("twelve bytes")
    with emu.client() as uploader:
        uploader.files.upload(tmp_path / "notes.txt")
    raw = (await caller.query("Newton::c2_5_8b_260413b723a9ab", "What happened?", file_ids=["notes.txt"])).to_dict()
    for name in TOP_TIMING:
        assert json_kind(raw[name]) == json_kind(SPEC_ANSWER[name]), name
    for name in RESPONSE_TIMING:
        assert json_kind(raw["response"][name]) == json_kind(SPEC_ANSWER["response"][name]), name

    # One consistent timeline.
    q, l, i, r = (raw[k] for k in TOP_TIMING[:4])
    assert q <= l <= i <= r
    close = lambda a, b: math.isclose(a, b, abs_tol=1e-6)  # noqa: E731
    assert close(raw["query_queue_time_sec"], l - q)
    assert close(raw["inference_time_sec"], r - i)
    assert close(raw["query_response_time_sec"], r - q)
    assert raw["inference_time_sec"] >= 0.2  # the simulated worker time is inference
    worker = raw["response"]
    assert worker["results_timestamp"] == r
    assert close(worker["generation_latency"], raw["inference_time_sec"])
    assert close(worker["query_queue_latency"], raw["query_queue_time_sec"])
    assert close(worker["query_gpq_latency"], i - l)
    assert worker["prefetch_stats"]["num_files"] == 1
    assert worker["prefetch_stats"]["num_bytes"] == len("twelve bytes")
    assert 0 <= worker["prefetch_stats"]["prefetch_time_sec"] <= i - l
