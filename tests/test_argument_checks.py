"""Arguments refused before anything is sent, each error naming the argument: client options, file
transfers, embed and query inputs, on Client and AsyncClient alike. Also: a base URL carrying
credentials, and a closed client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sensorium
from _helpers import ENCODER, REASONER, run_on
from sensorium.errors import ClientClosedError, ConfigurationError, InvalidArgumentError, SensoriumError


@pytest.fixture
def sent(emu):
    """The number of requests the emulator has seen so far, as a function."""
    return lambda: len(emu.requests)


@pytest.mark.parametrize("cls", [sensorium.Client, sensorium.AsyncClient])
@pytest.mark.parametrize("options, error, named", [
    ({"timeout": True}, TypeError, "timeout"),
    ({"timeout": "5"}, TypeError, "timeout"),
    ({"connect_timeout": None}, TypeError, "connect_timeout"),
    ({"read_timeout": [1]}, TypeError, "read_timeout"),
    ({"max_retries": True}, TypeError, "max_retries"),
    ({"max_retries": 2**70}, InvalidArgumentError, "max_retries"),
    ({"max_retries": -1}, InvalidArgumentError, "max_retries"),
    ({"api_key": b"k"}, TypeError, "api_key"),
    ({"api_key": "k\ud800"}, InvalidArgumentError, "api_key"),
    ({"base_url": "http://h\udc80"}, InvalidArgumentError, "base_url"),
    ({"default_headers": [("X", "1")]}, TypeError, "default_headers"),
    ({"default_headers": {"X": "v\ud800"}}, InvalidArgumentError, "default_headers"),
    # Not turned into the text "None" or "1" and sent.
    ({"default_headers": {"X-Team": None}}, TypeError, "default_headers"),
    ({"default_headers": {"X-Team": 1}}, TypeError, "default_headers"),
    ({"default_headers": {1: "v"}}, TypeError, "default_headers"),
    # Checked when the client is made, not at its first call.
    ({"default_headers": {"bad name": "x"}}, InvalidArgumentError, "default_headers"),
    ({"default_headers": {"": "x"}}, InvalidArgumentError, "default_headers"),
    ({"default_headers": {"X": "a\nb"}}, InvalidArgumentError, "default_headers"),
    ({"default_headers": {"X": "a\x00b"}}, InvalidArgumentError, "default_headers"),
    ({"api_key": "a\nb"}, InvalidArgumentError, "api_key"),
    ({"api_key": "a\x00b"}, InvalidArgumentError, "api_key"),
])
def test_client_options_are_checked_naming_the_argument(cls, options, error, named):
    with pytest.raises(error, match=f"^{named}: "):
        cls(**{"api_key": "k", "base_url": "http://127.0.0.1:9", **options})


def test_with_options_is_checked_the_same_way(client):
    with pytest.raises(TypeError, match="^timeout: "):
        client.with_options(timeout="5")
    with pytest.raises(TypeError, match="^default_headers: "):
        client.with_options(default_headers={"X-Team": None})
    with pytest.raises(InvalidArgumentError, match="^default_headers: "):
        client.with_options(default_headers={"X": "a\nb"})


@pytest.mark.parametrize("url", ["http://bob:hunter2@127.0.0.1:9", "https://bob@127.0.0.1/v0.5"])
def test_a_base_url_with_credentials_is_refused_without_printing_them(url, monkeypatch):
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client(api_key="k", base_url=url)
    assert "base_url" in str(info.value) and "hunter2" not in str(info.value) and "bob" not in str(info.value)
    monkeypatch.setenv("SENSORIUM_BASE_URL", url)
    with pytest.raises(ConfigurationError, match="SENSORIUM_BASE_URL environment variable") as info:
        sensorium.Client(api_key="k")
    assert "hunter2" not in str(info.value) and "bob" not in str(info.value)


def test_a_capital_version_in_the_base_url_is_the_version(emu):
    with sensorium.Client(api_key=emu.api_key, base_url=emu.base_url.replace("/v0.5", "/V0.5")) as client:
        assert client.base_url == emu.base_url
        assert client.models.list()


def test_a_closed_client_raises_a_sensorium_error(emu):
    client = emu.client()
    client.close()
    with pytest.raises(ClientClosedError, match="closed") as info:
        client.files.info()
    assert isinstance(info.value, SensoriumError) and isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("change, error, named", [
    ({"concurrency": True}, TypeError, "concurrency"),
    ({"concurrency": 2**70}, InvalidArgumentError, "concurrency"),
    ({"concurrency": 0}, InvalidArgumentError, "concurrency"),
    ({"direct_threshold": 2**70}, InvalidArgumentError, "direct_threshold"),
    ({"direct_threshold": "100MB"}, TypeError, "direct_threshold"),
    ({"resume": "no"}, InvalidArgumentError, "resume"),
    ({"content_type": "text/\ud800"}, InvalidArgumentError, "content_type"),
    ({"method": None}, TypeError, "method"),
    ({"method": "fast"}, InvalidArgumentError, "method"),
])
def test_upload_arguments_are_checked_before_sending(emu, client_kind, tmp_path, sent, change, error, named):
    path = tmp_path / "x.txt"
    path.write_text("x")
    before = sent()
    with pytest.raises(error, match=f"^{named}: "):
        run_on(client_kind, lambda c: c.files.upload(path, **change), api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


@pytest.mark.skipif(os.name != "posix", reason="file names are bytes on POSIX")
def test_paths_as_bytes_and_names_that_are_not_utf8(emu, client_kind, tmp_path, sent):
    path = tmp_path / "bytes.txt"
    path.write_text("x")
    options: dict[str, Any] = {"api_key": emu.api_key, "base_url": emu.base_url}
    assert run_on(client_kind, lambda c: c.files.upload(os.fsencode(path)), **options).file_id == "bytes.txt"
    back = run_on(client_kind, lambda c: c.files.download("bytes.txt", os.fsencode(tmp_path / "back.txt")), **options)
    assert Path(back).read_text() == "x"
    # A file name from a non-UTF-8 file system cannot become a file_id: refused, naming the path.
    odd = Path(os.fsdecode(bytes(tmp_path / "caf") + b"\xe9.txt"))
    odd.write_text("x")
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^path: .*not valid UTF-8"):
        run_on(client_kind, lambda c: c.files.upload(odd), **options)
    assert sent() == before


@pytest.mark.parametrize("operation, error, named", [
    (lambda c: c.models.list(model_family=3), TypeError, "model_family"),
    (lambda c: c.models.list(search=["omega", "x"]), TypeError, "search"),
    (lambda c: c.models.list(variant=True), TypeError, "variant"),
    (lambda c: c.models.list(scope=["all"]), TypeError, "scope"),
    (lambda c: c.files.list(after=3), TypeError, "after"),
    (lambda c: c.files.list(after=["x"]), TypeError, "after"),
    (lambda c: c.files.list(after=""), InvalidArgumentError, "after"),
])
def test_list_filters_of_the_wrong_type_are_refused_not_sent(emu, client_kind, sent, operation, error, named):
    """These went out as text (model_family=3, search=omega&search=x, variant=true, after=3),
    giving a wrong list or a server 400, where other lists refuse them naming the argument."""
    before = sent()
    with pytest.raises(error, match=f"^{named}: "):
        run_on(client_kind, operation, api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


def test_normalize_input_takes_a_bool_not_anything_truthy(emu, client_kind, sent):
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^normalize_input: "):
        run_on(client_kind, lambda c: c.embed(ENCODER, np.ones((1, 16)), normalize_input="false"),
               api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


@pytest.mark.parametrize("events, says", [
    ({"type": "data.text", "event_data": {"contents": "x"}}, "wrap it in a list"),
    (sensorium.events.text("x"), "wrap it in a list"),
])
def test_one_event_given_without_a_list_is_named_as_such(emu, client_kind, sent, events, says):
    before = sent()
    with pytest.raises(InvalidArgumentError, match=f"^events: .*{says}"):
        run_on(client_kind, lambda c: c.query(REASONER, "x", events=events), api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


def test_metadata_keys_that_are_not_text_are_refused_not_mangled(emu, client_kind, sent):
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^query_metadata: .*key"):
        run_on(client_kind, lambda c: c.query(REASONER, "x", query_metadata={"a\ud800": 1}),
               api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


SELF_CONTAINING = '''
import asyncio, sys
import sensorium
from sensorium.errors import InvalidArgumentError
from sensorium.testing import Emulator

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
looped = {"a": 1}
looped["self"] = looped
listed = []
listed.append(listed)
deep = []
for _ in range(10_000):
    deep = [deep]
calls = {
    "query_metadata": lambda c: c.query(REASONER, "x", query_metadata=looped),
    "values": lambda c: c.agents.bundles.create("osm", name="x", values=looped),
    "events": lambda c: c.query(REASONER, "x", events=[{"type": "data.numeric_array",
                                                          "event_data": {"contents": listed}}]),
    "deep": lambda c: c.query(REASONER, "x", query_metadata={"k": deep}),
}
with Emulator() as emu:
    for kind in ("sync", "async"):
        for name, call in calls.items():
            client = emu.client() if kind == "sync" else emu.async_client()
            try:
                result = call(client)
                if kind == "async":
                    asyncio.run(result)
                print(kind, name, "sent")
            except InvalidArgumentError as e:
                print(kind, name, e.argument, "|", e)
    print("requests", len(emu.requests))
'''


def test_a_value_that_contains_itself_or_nests_too_deep_is_refused_not_a_crash(tmp_path):
    """A dict or list that contains itself (or 10,000 levels of nesting) overflowed the native
    stack while being turned into JSON: the interpreter died with SIGSEGV, no exception, no
    finally. Run in a child process so that the old crash fails this test instead of pytest."""
    import subprocess
    import sys

    script = tmp_path / "self_containing.py"
    script.write_text(SELF_CONTAINING)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "requests 0"
    for kind in ("sync", "async"):
        for name, argument, says in [("query_metadata", 'query_metadata["self"]', "contains itself"),
                                     ("values", "values", "contains itself"),
                                     ("events", "events", "contains itself"),
                                     ("deep", "query_metadata", "nests deeper than 256 levels")]:
            line = next(line for line in lines if line.startswith(f"{kind} {name} "))
            assert line.startswith(f"{kind} {name} {argument}") and says in line, line


@pytest.mark.parametrize("operation, argument, place", [
    (lambda c: c.agents.bundles.create("osm", name="bad\udcff"), "name", None),
    (lambda c: c.batch.jobs.create("n", pipeline_key="machine-state-classification",
                                   inputs={"worker.inference": ["bad\udcff"]}), "inputs",
     'inputs["worker.inference"][0]["file_id"]'),
    # Body members named unlike the keyword they came from: the keyword names the value.
    (lambda c: c.agents.bundles.run("bnd_1", "a.csv", sink={"type": "file", "id": "out.csv", "note": "bad\udcff"}),
     "sink", 'sink["note"]'),
    (lambda c: c.agents.bundles.run("bnd_1", [{"type": "file", "id": "a.csv", "note": "bad\udcff"}]),
     "source", 'source[0]["note"]'),
    (lambda c: c.agents.instances.query("agt_1", {"text": "bad\udcff"}), "data", 'data["text"]'),
    (lambda c: c.lens.register("l", model_pipeline=[{"processor_name": "p", "processor_config": {"k": "bad\udcff"}}]),
     "model_pipeline", 'model_pipeline[0]["processor_config"]["k"]'),
    (lambda c: c.lens.register({"lens_name": "l", "model_pipeline": [], "model_parameters": {"k": "bad\udcff"}}),
     "name", 'name["model_parameters"]["k"]'),
], ids=["top-level", "nested", "run-sink", "run-source", "serving-query", "lens-pipeline", "lens-whole-config"])
@pytest.mark.filterwarnings("ignore:the lens runtime is deprecated:DeprecationWarning")
def test_a_bad_value_in_a_body_is_named_by_the_keyword_the_caller_gave(emu, client_kind, sent, operation, argument, place):
    """It was named by its place in the wire body (`body["inputs"]...`, `connectors["sink"]`),
    which the caller never wrote."""
    before = sent()
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8") as info:
        run_on(client_kind, operation, api_key=emu.api_key, base_url=emu.base_url)
    assert info.value.argument == argument
    assert "body" not in str(info.value) and str(info.value).startswith(f"{argument}: ")
    if place is not None:
        assert place in str(info.value)
    assert sent() == before


def test_a_content_type_the_upload_does_not_take_is_named(emu, client_kind, tmp_path, sent):
    """An unknown extension takes its type from content_type, so a wrong type is content_type's
    fault, not the path's."""
    path = tmp_path / "data.bin"
    path.write_bytes(b"x")
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^content_type: .*garbage"):
        run_on(client_kind, lambda c: c.files.upload(path, content_type="garbage"),
               api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


@pytest.mark.parametrize("operation", [
    lambda c, d: c.files.upload(d / "x.txt", progress="false"),
    lambda c, d: c.files.upload(d / "x.txt", progress=0),
    lambda c, d: c.files.download("x.txt", d, progress="false"),
    lambda c, d: c.agents.instances.download_results("agt_1", d, progress="false"),
    lambda c, d: c.batch.jobs.download_outputs("job_1", d, progress="false"),
    lambda c, d: c.embed_many(ENCODER, np.ones((2, 1, 16)), progress="false"),
    lambda c, d: c.batch.jobs.wait("job_1", progress="false"),
], ids=["files.upload", "files.upload-0", "files.download", "download_results", "download_outputs", "embed_many",
        "wait"])
def test_progress_takes_a_bool_not_anything_truthy(emu, client_kind, tmp_path, sent, operation):
    """progress="false" asked for a bar (and failed for want of tqdm, or showed one); progress=0
    was taken as False without a word."""
    (tmp_path / "x.txt").write_text("x")
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^progress: takes True"):
        run_on(client_kind, lambda c: operation(c, tmp_path), api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


def test_a_file_over_the_direct_upload_limit_is_refused_before_initiate(emu, client_kind, tmp_path, sent):
    path = tmp_path / "huge.csv"
    with open(path, "wb") as f:
        f.truncate(250 * 1000**3 + 1)  # sparse: takes no disk
    before = sent()
    with pytest.raises(InvalidArgumentError, match="^path: .*250"):
        run_on(client_kind, lambda c: c.files.upload(path), api_key=emu.api_key, base_url=emu.base_url)
    assert sent() == before


@pytest.mark.parametrize("fields, named", [
    ({"file_ids": ["/tmp/x/n.txt"]}, "file_ids"),
    ({"file_ids": ["n.txt", "C:\\data\\n.txt"]}, "file_ids"),
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_frames": -1}, "max_frames"),
    ({"max_wait_time_sec": -1}, "max_wait_time_sec"),
    ({"max_query_size_mb": -0.5}, "max_query_size_mb"),
    # A query of no tokens, frames or bytes is none: refused here, not after a round trip.
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_frames": 0}, "max_frames"),
    ({"max_query_size_mb": 0.0}, "max_query_size_mb"),
])
def test_query_fields_the_spec_rules_out_are_refused_before_sending(emu, client_kind, sent, fields, named):
    before = sent()
    with pytest.raises(InvalidArgumentError, match=f"^{named}: ") as info:
        run_on(client_kind, lambda c: c.query(REASONER, "x", **fields), api_key=emu.api_key, base_url=emu.base_url)
    if named == "file_ids":
        assert f"file_ids[{len(fields[named]) - 1}]" in str(info.value)
    assert sent() == before
