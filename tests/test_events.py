"""``sensorium.events``: the inline data events of a query, built and checked client-side."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import pytest

from _helpers import JPEG_HEAD, PNG_1X1, REASONER, body_json, calls
from sensorium import events
from sensorium.errors import InvalidArgumentError


def test_text_event():
    assert events.text("belt stopped") == {"type": "data.text", "event_data": {"contents": "belt stopped"}}
    with pytest.raises(InvalidArgumentError):
        events.text(b"bytes")  # type: ignore[arg-type]


def test_json_event_contents_are_a_string():
    obj = {"line": 3, "ok": True, "readings": [1.5, None], "name": "é"}
    event = events.json(obj)
    assert event["type"] == "data.json"
    contents = event["event_data"]["contents"]
    assert isinstance(contents, str)
    assert json.loads(contents) == obj
    assert events.json([1, 2])["event_data"]["contents"] == "[1, 2]"


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": float("inf")}, {"x": object()}, {1j: 2}])
def test_json_event_rejects_what_json_cannot_hold(bad):
    with pytest.raises(InvalidArgumentError):
        events.json(bad)


def test_raw_json_event_with_dict_contents_is_rejected_before_sending(emu, client):
    raw = {"type": "data.json", "event_data": {"contents": {"line": 3}}}
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", events=[events.text("first"), raw])
    msg = str(info.value)
    assert "json.dumps" in msg and "events.json" in msg
    assert "events[1]" in msg
    assert calls(emu, "/query") == []


def test_raw_json_event_with_string_contents_is_sent_as_is(emu, client):
    raw = {"type": "data.json", "event_data": {"contents": '{"line": 3}'}}
    client.query(REASONER, "hi", events=[raw])
    assert body_json(emu.requests[-1])["events"] == [raw]


def test_json_event_contents_reach_the_model(client):
    text = client.query(REASONER, "What line?", events=[events.json({"KESTREL_5": [1, 2], "line": 3})]).text
    assert "KESTREL_5" in text and "line" in text  # the stand-in reports top-level keys


def test_json_event_takes_json_text_as_it_is_not_encoded_twice():
    text = '{"line": 3, "state": "stopped"}'
    assert events.json(text)["event_data"]["contents"] == text
    assert json.loads(events.json("stopped")["event_data"]["contents"]) == "stopped"  # not JSON text: a string


def test_json_event_takes_numpy_values_as_query_metadata_does():
    contents = events.json({"mean": np.float32(0.5), "n": np.int64(3), "row": np.arange(3)})["event_data"]["contents"]
    assert json.loads(contents) == {"mean": 0.5, "n": 3, "row": [0, 1, 2]}
    with pytest.raises(InvalidArgumentError, match="obj"):
        events.json({"bad": np.array([1.0, np.nan])})


def test_image_event_from_bytes_and_path(tmp_path):
    from_bytes = events.image(PNG_1X1)
    assert from_bytes["type"] == "data.base64_img"
    assert base64.b64decode(from_bytes["event_data"]["contents"]) == PNG_1X1
    assert from_bytes["event_data"]["mime_type"] == "image/png"
    path = tmp_path / "frame.jpg"
    path.write_bytes(JPEG_HEAD)
    from_path = events.image(path)
    assert base64.b64decode(from_path["event_data"]["contents"]) == JPEG_HEAD
    assert from_path["event_data"]["mime_type"] == "image/jpeg"
    assert events.image(str(path)) == from_path


def test_image_event_errors(tmp_path):
    with pytest.raises(InvalidArgumentError):
        events.image(b"")
    with pytest.raises(InvalidArgumentError):
        events.image(123)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        events.image(tmp_path / "missing.png")


def test_images_event(tmp_path):
    path = tmp_path / "f1.png"
    path.write_bytes(PNG_1X1)
    event = events.images([PNG_1X1, path])
    assert event["type"] == "data.base64_img_array"
    assert [base64.b64decode(c) for c in event["event_data"]["contents"]] == [PNG_1X1, PNG_1X1]
    for bad in ([], "f1.png", b"raw"):
        with pytest.raises(InvalidArgumentError):
            events.images(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"sources\[1\]"):
        events.images([PNG_1X1, b""])


def test_image_event_is_sent_and_seen(emu, client):
    result = client.query(REASONER, "Describe.", events=[events.image(PNG_1X1)])
    assert result.status == "completed"
    (sent,) = body_json(emu.requests[-1])["events"]
    assert sent == events.image(PNG_1X1)
    assert "image/png 1x1" in result.text


def test_numeric_event_shapes():
    a = np.arange(300, dtype=np.float64).reshape(3, 100)
    event = events.numeric(a)
    assert (event.channels, event.window) == (3, 100)
    assert repr(event) == "NumericEvent(channels=3, window=100)"
    assert event.to_dict() == {"type": "data.numeric_array", "event_data": {"contents": a.tolist()}}
    one = events.numeric(np.ones(50))
    assert (one.channels, one.window) == (1, 50)
    assert one.to_dict()["event_data"]["contents"] == [[1.0] * 50]


def test_numeric_event_values_are_exact():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 257)) * 10.0 ** rng.integers(-30, 30, size=(2, 257))
    assert events.numeric(a).to_dict()["event_data"]["contents"] == a.tolist()
    ints = np.array([[np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]])
    assert events.numeric(ints).to_dict()["event_data"]["contents"] == ints.tolist()
    big = np.array([np.iinfo(np.uint64).max], dtype=np.uint64)
    assert events.numeric(big).to_dict()["event_data"]["contents"] == [[int(big[0])]]


def test_numeric_event_from_dataframe_is_transposed():
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [5, 6, 7, 8]})
    event = events.numeric(df)
    assert (event.channels, event.window) == (2, 4)
    assert event.to_dict()["event_data"]["contents"] == [[1, 2, 3, 4], [5, 6, 7, 8]]


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0, np.nan]),
        np.array([[1.0, 2.0], [np.inf, 0.0]]),
        np.zeros((0,)),
        np.zeros((2, 0)),
        np.zeros((2, 2, 2)),
        np.array(["a", "b"]),
        np.array([True, False]),
        np.array([1 + 2j]),
        [np.ones(3), np.ones(4)],
        [],
    ],
)
def test_numeric_event_rejects_bad_arrays(bad):
    with pytest.raises(InvalidArgumentError) as info:
        events.numeric(bad)
    assert "array" in str(info.value)


def test_events_are_sent_in_order(emu, client):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    given = [events.text("one"), events.numeric(a), events.json({"k": 1}), events.image(PNG_1X1)]
    client.query(REASONER, "hi", events=given)
    sent = body_json(emu.requests[-1])["events"]
    assert sent == [given[0], events.numeric(a).to_dict(), given[2], given[3]]


def test_events_may_be_a_tuple(emu, client):
    client.query(REASONER, "hi", events=(events.text("a"), events.text("b")))
    assert [e["event_data"]["contents"] for e in body_json(emu.requests[-1])["events"]] == ["a", "b"]


@pytest.mark.parametrize(
    "bad, needle",
    [
        ("just a string", "events.text"),
        ({"type": "data.video", "event_data": {"contents": "x"}}, "data.video"),
        ({"event_data": {"contents": "x"}}, "type"),
        ({"type": "data.text"}, "event_data"),
        ({"type": "data.json", "event_data": {}}, "contents"),
        (42, "events[0]"),
    ],
)
def test_malformed_events_are_rejected_before_sending(emu, client, bad, needle):
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", events=[bad])
    assert needle in str(info.value)
    assert calls(emu, "/query") == []
