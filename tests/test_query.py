"""``client.query``: what is sent, what comes back, and the failure paths of ``/query``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from _helpers import ENCODER, REASONER, body_json, calls
from sensorium import QueryResult, events
from sensorium.errors import (
    APIError,
    BadRequestError,
    GatewayTimeoutError,
    InvalidArgumentError,
    PayloadTooLargeError,
    QueryFailedError,
)

TIMING_FIELDS = (
    "query_timestamp",
    "loading_timestamp",
    "inference_timestamp",
    "response_timestamp",
    "query_queue_time_sec",
    "inference_time_sec",
    "query_response_time_sec",
)


def test_result_fields(client):
    result = client.query(REASONER, "What is on the line?")
    assert isinstance(result, QueryResult)
    assert result.status == "completed"
    assert isinstance(result.query_id, str) and result.query_id
    assert isinstance(result.gpq_node, str) and result.gpq_node
    assert isinstance(result.texts, list) and result.texts
    assert all(isinstance(t, str) for t in result.texts)
    assert result.text == result.texts[0] and result.text
    for name in TIMING_FIELDS:
        assert isinstance(getattr(result, name), float), name
    assert result.query_timestamp <= result.response_timestamp
    assert result.warnings == []
    raw = result.to_dict()
    assert raw["query_id"] == result.query_id
    assert raw["status"] == "completed"
    assert raw["response"]["response"] == result.texts
    assert result.query_id in repr(result)


def test_an_encoder_answer_through_query_has_its_vectors(client):
    """query() with an encoder and a numeric event gave the vectors only as JSON text in .text;
    .vectors reads them as embed() does (and is None for a text answer)."""
    window = np.random.default_rng(3).normal(size=(2, 64))
    result = client.query(ENCODER, events=[events.numeric(window)])
    assert result.vectors is not None and result.vectors.dtype == np.float32
    np.testing.assert_array_equal(result.vectors, client.embed(ENCODER, window).vectors)
    assert client.query(REASONER, "hi").vectors is None
    again = pickle.loads(pickle.dumps(result))
    np.testing.assert_array_equal(again.vectors, result.vectors)


def test_results_equal_their_pickled_copies_and_hash_alike(client):
    """A pickled QueryResult or Embeddings never equalled its original (identity comparison)."""
    import copy

    window = np.random.default_rng(4).normal(size=(2, 64))
    for result in (client.query(REASONER, "hi"), client.embed(ENCODER, window)):
        for twin in (pickle.loads(pickle.dumps(result)), copy.copy(result), copy.deepcopy(result)):
            assert twin == result and hash(twin) == hash(result) and len({twin, result}) == 1
    first, second = client.query(REASONER, "hi"), client.query(REASONER, "hi")
    assert first != second, "two calls' answers differ (their query_id)"
    assert client.embed(ENCODER, window) != client.query(REASONER, "hi") and first != "hi"


def test_sanitize_response_false_keeps_internal_fields(client):
    raw = client.query(REASONER, "hi", sanitize_response=False, query_metadata={"run": 1}).to_dict()
    assert "org_id" in raw and raw["query_metadata"] == {"run": 1}
    assert raw["api_key"] == "<redacted>", "the key the raw record echoes is taken out on arrival"
    assert "org_id" not in client.query(REASONER, "hi", query_metadata={"run": 1}).to_dict()


def test_only_the_given_fields_are_sent(emu, client):
    client.query(REASONER, "hello")
    assert body_json(emu.requests[-1]) == {"model": REASONER, "query": "hello"}
    client.query(REASONER)
    assert body_json(emu.requests[-1]) == {"model": REASONER, "query": ""}


def test_fields_set_to_none_are_not_sent(emu, client):
    client.query(REASONER, "hello", temperature=None, max_new_tokens=None)
    assert body_json(emu.requests[-1]) == {"model": REASONER, "query": "hello"}


def test_every_optional_field_is_sent_as_given(emu, client, tmp_path):
    (tmp_path / "notes.txt").write_text("belt stopped at 10:02")
    client.files.upload(tmp_path / "notes.txt")
    fields = dict(
        system_prompt="You are terse.",
        instruction_prompt="Answer in one line.",
        response_start_prompt="Answer:",
        template_name="default",
        file_ids=["notes.txt"],
        events=[events.text("shift log")],
        max_new_tokens=64,
        max_frames=8,
        temperature=0.2,
        do_sample=True,
        repetition_penalty=1.1,
        top_p=0.9,
        top_k=40,
        presence_penalty=0.5,
        normalize_input=False,
        multi_image=False,
        render=False,
        query_metadata={"run": 7, "tags": ["a", "b"], "nested": {"ok": True}},
        max_query_size_mb=0.5,
        max_wait_time_sec=30.0,
        sanitize_response=True,
    )
    result = client.query(REASONER, "Summarise.", **fields)
    assert result.status == "completed"
    sent = body_json(calls(emu, "/query")[-1])
    assert sent.pop("model") == REASONER
    assert sent.pop("query") == "Summarise."
    assert sent.pop("events") == [{"type": "data.text", "event_data": {"contents": "shift log"}}]
    del fields["events"]
    assert sent == fields


def test_max_frames_above_what_the_service_takes_warns_and_is_sent(emu, client, recwarn):
    """The service ignores max_frames above 64 (wire notes): the caller is told, not left to find
    fewer frames in the answer; the value still goes out as given."""
    with pytest.warns(UserWarning, match=r"max_frames=100: the platform ignores max_frames above 64") as caught:
        client.query(REASONER, "Describe.", max_frames=100)
    assert caught[0].filename == __file__  # points at the caller's line
    assert body_json(calls(emu, "/query")[-1])["max_frames"] == 100
    recwarn.clear()
    client.query(REASONER, "Describe.", max_frames=64)
    assert not [w for w in recwarn if "max_frames" in str(w.message)]


def test_numpy_scalars_are_sent_as_numbers(emu, client):
    client.query(REASONER, "hi", max_new_tokens=np.int64(5), temperature=np.float32(0.5), do_sample=np.bool_(False))
    sent = body_json(emu.requests[-1])
    assert sent["max_new_tokens"] == 5 and isinstance(sent["max_new_tokens"], int)
    assert sent["temperature"] == 0.5
    assert sent["do_sample"] is False


@pytest.mark.parametrize(
    "fields, argument",
    [
        ({"max_new_tokens": "12"}, "max_new_tokens"),
        ({"max_new_tokens": 1.5}, "max_new_tokens"),
        ({"top_k": True}, "top_k"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"do_sample": 1}, "do_sample"),
        ({"file_ids": "notes.txt"}, "file_ids"),
        ({"file_ids": ["notes.txt", 3]}, "file_ids"),
        ({"query_metadata": ["not", "a", "dict"]}, "query_metadata"),
        ({"query_metadata": {"when": object()}}, "query_metadata"),
        ({"system_prompt": 3}, "system_prompt"),
        ({"temprature": 0.5}, "temprature"),
        ({"sanitize": False}, "sanitize"),
        ({"events": 5}, "events"),
    ],
)
def test_bad_fields_are_rejected_before_sending(emu, client, fields, argument):
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", **fields)
    assert argument in str(info.value)
    assert isinstance(info.value, ValueError)
    assert calls(emu, "/query") == []


@pytest.mark.parametrize(
    "file_id, needle",
    [
        ("fil_0a1b2c3d", "file_id"),
        ("notes", "extension"),
        ("report.parquet", "extension"),
        ("archive.txt.gz", "extension"),
    ],
)
def test_file_ids_are_checked_before_sending(emu, client, file_id, needle):
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", file_ids=["ok.txt", file_id])
    msg = str(info.value)
    assert "file_ids" in msg and needle in msg and file_id in msg
    assert info.value.argument == "file_ids"
    assert calls(emu, "/query") == []


def test_fil_uid_message_points_to_file_id(emu, client):
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", file_ids=["fil_01hzy3k9d7q2m8"])
    assert "file_uid" in str(info.value) and "file_id" in str(info.value)
    assert calls(emu, "/query") == []


def test_empty_model_is_rejected(emu, client):
    with pytest.raises(InvalidArgumentError, match="model"):
        client.query("", "hi")
    assert calls(emu, "/query") == []


def test_unknown_model_is_a_bad_request_and_not_retried(emu, client):
    with pytest.raises(BadRequestError) as info:
        client.query("Reasoner::does_not_exist", "hi")
    err = info.value
    assert err.status == 400
    assert err.code == "invalid_model_version"
    assert err.has_code("INVALID_MODEL_VERSION")
    assert len(calls(emu, "/query")) == 1


def test_reasoner_reads_text_and_json_files(client, tmp_path):
    (tmp_path / "notes.txt").write_text("The marker is PELICAN-42.")
    (tmp_path / "conf.json").write_text('{"OSPREY_7": {"deep": 1}, "line": 3}')
    client.files.upload(tmp_path / "notes.txt")
    client.files.upload(tmp_path / "conf.json")
    text = client.query(REASONER, "What markers?", file_ids=["notes.txt", "conf.json"]).text
    assert "PELICAN-42" in text
    assert "OSPREY_7" in text  # the stand-in reports a JSON file's top-level keys


def test_file_ids_take_the_records_upload_returns(emu, client_kind, tmp_path):
    """A FileRecord in file_ids was refused ("cannot be sent as JSON") although batch and agent
    inputs take one; a non-string item is named by its index."""
    from _helpers import run_on

    (tmp_path / "notes.txt").write_text("The marker is PELICAN-42.")
    options = {"api_key": emu.api_key, "base_url": emu.base_url}
    record = run_on(client_kind, lambda c: c.files.upload(tmp_path / "notes.txt"), **options)
    result = run_on(client_kind, lambda c: c.query(REASONER, "What markers?", file_ids=[record]), **options)
    assert "PELICAN-42" in result.text
    assert body_json(emu.requests[-1])["file_ids"] == ["notes.txt"]
    sent = len(emu.requests)
    with pytest.raises(InvalidArgumentError, match=r"^file_ids: .*file_ids\[1\] is an integer"):
        run_on(client_kind, lambda c: c.query(REASONER, "hi", file_ids=["notes.txt", 1]), **options)
    assert len(emu.requests) == sent


def test_reasoner_cannot_see_csv_contents(client, tmp_path):
    (tmp_path / "readings.csv").write_text("sensor,value\nHERON-99,1\n")
    client.files.upload(tmp_path / "readings.csv")
    result = client.query(REASONER, "What is in the table?", file_ids=["readings.csv"])
    assert result.status == "completed"
    assert "HERON-99" not in result.text
    assert "readings.csv" in result.text or "csv" in result.text.lower()


def test_query_with_missing_file_id_fails(emu, client):
    with pytest.raises(APIError) as info:
        client.query(REASONER, "hi", file_ids=["never-uploaded.txt"])
    assert 400 <= info.value.status < 500
    assert len(calls(emu, "/query")) == 1


def test_max_new_tokens_bounds_the_answer(client):
    long_text = " ".join(f"word{i}" for i in range(300))
    short = client.query(REASONER, "Repeat.", events=[events.text(long_text)], max_new_tokens=5)
    assert 0 < len(short.text.split()) <= 5
    longer = client.query(REASONER, "Repeat.", events=[events.text(long_text)], max_new_tokens=50)
    assert 5 < len(longer.text.split()) <= 50


def test_non_ascii_text_round_trips(client):
    marker = "Grüße 東京 🚀"
    text = client.query(REASONER, "Echo.", events=[events.text(marker)]).text
    assert marker in text


def test_prompt_over_the_size_limit_is_413(emu, client):
    big = "x" * 50_000  # the default limit is 0.04 MB
    with pytest.raises(PayloadTooLargeError) as info:
        client.query(REASONER, "hi", events=[events.text(big)])
    assert info.value.status == 413
    assert info.value.suggestion and "max_query_size_mb" in info.value.suggestion
    assert f"(suggestion: {info.value.suggestion})" in str(info.value)
    assert len(calls(emu, "/query")) == 1
    assert client.query(REASONER, "hi", events=[events.text(big)], max_query_size_mb=0.1).status == "completed"


def test_failed_query_raises_query_failed_error(emu, client):
    emu.fail_queries("GPU worker ran out of memory", times=1)
    with pytest.raises(QueryFailedError) as info:
        client.query(REASONER, "hi")
    err = info.value
    assert err.error_msg == "GPU worker ran out of memory"
    assert isinstance(err.query_id, str) and err.query_id
    assert err.query_id in str(err) and "GPU worker ran out of memory" in str(err)
    assert isinstance(err, APIError)
    assert err.response["status"] == "failed"
    # A worker failure is an answer, not a transport failure: it is not retried.
    assert len(calls(emu, "/query")) == 1
    # The failure was consumed; the next query succeeds.
    assert client.query(REASONER, "hi").status == "completed"


def test_failed_embedding_raises_query_failed_error(emu, client):
    emu.fail_queries("encoder crashed", times=1)
    with pytest.raises(QueryFailedError) as info:
        client.embed(ENCODER, np.ones((2, 64)))
    assert info.value.error_msg == "encoder crashed"
    assert len(calls(emu, "/query")) == 1


def test_wait_time_shorter_than_the_query_gives_504(emu):
    emu.set_query_delay(1.0)
    with emu.client(max_retries=0) as client:
        with pytest.raises(GatewayTimeoutError) as info:
            client.query(REASONER, "hi", max_wait_time_sec=0.1)
    assert info.value.status == 504
    assert len(calls(emu, "/query")) == 1


def test_wait_time_longer_than_the_query_succeeds(emu, client):
    emu.set_query_delay(0.2)
    assert client.query(REASONER, "hi", max_wait_time_sec=10).status == "completed"


def test_query_accepts_encoder_events_and_returns_embeddings_in_to_dict(client):
    result = client.query(ENCODER, events=[events.numeric(np.ones((2, 32)))])
    payload = result.to_dict()["response"]["response"]
    assert len(payload) == 2 and len(payload[0]) == 768


def test_file_ids_take_one_record_or_any_iterable_of_names_and_records(emu, client):
    record = client.files.upload_base64("notes.txt", b"hello")
    for file_ids in (record, (f for f in [record]), {"notes.txt"}, np.array(["notes.txt"]), client.files.list()):
        client.query(REASONER, "x", file_ids=file_ids)
        assert body_json(calls(emu, "/query")[-1])["file_ids"] == ["notes.txt"], file_ids


def test_a_result_saved_as_json_loads_back_equal_from_text_bytes_or_dict(client):
    import json as _json

    result = client.query(REASONER, "hello")
    saved = _json.dumps(result.to_dict(), indent=2)  # other whitespace than the platform's
    for body in (saved, saved.encode(), result.to_dict()):
        back = type(result).from_json(body)
        assert back == result and hash(back) == hash(result) and back.text == result.text
    with pytest.raises(TypeError, match="body: expected"):
        type(result).from_json(42)


def test_embeddings_saved_as_json_load_back_equal(client):
    import json as _json

    emb = client.embed(ENCODER, np.ones((2, 16)))
    back = type(emb).from_json(_json.dumps(emb.to_dict(), indent=1))
    assert back == emb and hash(back) == hash(emb)
    np.testing.assert_array_equal(back.vectors, emb.vectors)
