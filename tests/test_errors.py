"""``sensorium.errors``: one hierarchy, status classes, every field of the platform's errors,
and pickling."""

from __future__ import annotations

import pickle

import pytest

import sensorium
from _fake_server import FakeServer
from _helpers import REASONER, calls
from sensorium import errors
from sensorium.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    ErrorDetail,
    GatewayTimeoutError,
    InternalServerError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QueryFailedError,
    RateLimitError,
    SensoriumError,
    UnprocessableEntityError,
)

STATUS_CLASSES = [
    (400, BadRequestError),
    (401, AuthenticationError),
    (403, PermissionDeniedError),
    (404, NotFoundError),
    (409, ConflictError),
    (413, PayloadTooLargeError),
    (422, UnprocessableEntityError),
    (429, RateLimitError),
    (500, InternalServerError),
    (502, InternalServerError),
    (503, InternalServerError),
    (504, GatewayTimeoutError),
    (418, APIStatusError),
    (501, InternalServerError),
]


def test_hierarchy():
    for _, cls in STATUS_CLASSES:
        assert issubclass(cls, APIStatusError)
    assert issubclass(APIStatusError, APIError) and issubclass(APIError, SensoriumError)
    assert issubclass(SensoriumError, Exception)
    assert issubclass(GatewayTimeoutError, InternalServerError)
    assert issubclass(APITimeoutError, APIConnectionError) and issubclass(APIConnectionError, APIError)
    assert issubclass(QueryFailedError, APIError)
    assert issubclass(errors.APIResponseValidationError, APIError)
    for cls in (InvalidArgumentError, ConfigurationError):
        assert issubclass(cls, SensoriumError) and issubclass(cls, ValueError)
    for name in errors.__all__:
        assert hasattr(errors, name)


@pytest.mark.parametrize("status, cls", STATUS_CLASSES)
def test_status_selects_the_class(emu, status, cls):
    emu.inject("GET", "/files/info", status=status, times=1)
    with emu.client(max_retries=0) as client:
        with pytest.raises(APIStatusError) as info:
            client.files.info()
    err = info.value
    assert type(err) is cls
    assert err.status == err.status_code == status
    assert err.method == "GET" and err.url.endswith("/v0.5/files/info")
    assert isinstance(err.errors, list) and err.errors and isinstance(err.errors[0], ErrorDetail)
    assert err.code and err.has_code(err.code.upper()) and err.has_code(err.code.lower())
    assert not err.has_code("some_other_code")
    assert err.error_uid and err.error_uid.startswith("err-")
    assert err.message and str(status) in str(err) and err.error_uid in str(err)
    assert isinstance(err.json, dict) and "errors" in err.json
    assert err.code in err.body and err.error_uid in err.body
    assert len(calls(emu, "/files/info")) == 1


def test_injected_codes_follow_the_platform(emu):
    for status, code in [(429, "rate_limit_exceeded"), (503, "server_at_capacity")]:
        emu.inject("POST", "/query", status=status, times=1)
        with emu.client(max_retries=0) as client, pytest.raises(APIStatusError) as info:
            client.query(REASONER, "hi")
        assert info.value.code == code


def test_not_found_error_fields(client):
    with pytest.raises(NotFoundError) as info:
        client.files.metadata("missing.txt")
    err = info.value
    assert err.code == "file_not_found" and err.has_code("FILE_NOT_FOUND")
    assert len(err.errors) == 1
    detail = err.errors[0]
    assert detail.code == err.code and detail.message and "missing.txt" in detail.message
    assert detail.error_uid == err.error_uid
    assert err.json["errors"][0]["code"] == "file_not_found"
    assert "missing.txt" in str(err)


def test_bad_key_on_query_is_authentication_error_with_detail(emu):
    with sensorium.Client("sk-not-valid-000", emu.base_url) as client:
        with pytest.raises(AuthenticationError) as info:
            client.query(REASONER, "hi")
    err = info.value
    assert err.status == 401
    assert isinstance(err.json, dict) and "detail" in err.json
    assert err.errors and err.errors[0].message == err.json["detail"]
    assert len(calls(emu, "/query")) == 1  # 401 is never retried


def test_bad_key_on_files_uses_the_envelope(emu):
    with sensorium.Client("sk-not-valid-000", emu.base_url) as client:
        with pytest.raises(AuthenticationError) as info:
            client.files.info()
    assert info.value.code == "unauthorized_request"
    assert len(calls(emu, "/files/info")) == 1


def test_connection_refused_is_a_connection_error():
    with sensorium.Client("sk-some-key", "http://127.0.0.1:9", max_retries=0) as client:
        with pytest.raises(APIConnectionError) as info:
            client.files.info()
    assert type(info.value) is APIConnectionError
    assert "127.0.0.1:9" in str(info.value)
    assert "refused" in str(info.value).lower()


def test_timeout_is_api_timeout_error(emu):
    emu.set_query_delay(2.0)
    with emu.client(timeout=0.2, max_retries=0) as client:
        with pytest.raises(APITimeoutError) as info:
            client.query(REASONER, "slow")
    assert isinstance(info.value, APIConnectionError)
    assert "timed out" in str(info.value)


def roundtrip(exc: BaseException) -> BaseException:
    return pickle.loads(pickle.dumps(exc))


def test_status_errors_pickle(emu, client):
    emu.inject("GET", "/files/info", status=429, retry_after=0.01, times=1)
    with pytest.raises(RateLimitError) as info:
        client.with_options(max_retries=0).files.info()
    for err in (info.value,):
        copy = roundtrip(err)
        assert type(copy) is RateLimitError
        assert str(copy) == str(err)
        for attr in ("status", "code", "message", "suggestion", "error_uid", "errors", "body", "json", "method", "url"):
            assert getattr(copy, attr) == getattr(err, attr), attr
        assert copy.retry_after == pytest.approx(0.01)
    with pytest.raises(NotFoundError) as info:
        client.files.metadata("nope.txt")
    copy = roundtrip(info.value)
    assert type(copy) is NotFoundError and copy.errors == info.value.errors and copy.has_code("file_not_found")


def test_other_errors_pickle(emu, client, monkeypatch):
    monkeypatch.delenv("SENSORIUM_API_KEY", raising=False)
    caught: list[BaseException] = []
    with pytest.raises(InvalidArgumentError) as info:
        client.query(REASONER, "hi", max_new_tokens="x")
    caught.append(info.value)
    emu.fail_queries("boom", times=1)
    with pytest.raises(QueryFailedError) as qf:
        client.query(REASONER, "hi")
    caught.append(qf.value)
    with pytest.raises(ConfigurationError) as cfg:
        sensorium.Client(api_key=None, base_url=emu.base_url)
    caught.append(cfg.value)
    with sensorium.Client("sk-x", "http://127.0.0.1:9", max_retries=0) as dead:
        with pytest.raises(APIConnectionError) as conn:
            dead.files.info()
    caught.append(conn.value)
    emu.set_query_delay(1.0)
    with pytest.raises(APITimeoutError) as to:
        client.with_options(timeout=0.1, max_retries=0).query(REASONER, "hi")
    caught.append(to.value)
    for err in caught:
        copy = roundtrip(err)
        assert type(copy) is type(err) and str(copy) == str(err)
    assert roundtrip(info.value).argument == "max_new_tokens"
    copy = roundtrip(qf.value)
    assert (copy.error_msg, copy.query_id, copy.response) == ("boom", qf.value.query_id, qf.value.response)


def test_errors_are_catchable_at_the_root(client):
    with pytest.raises(SensoriumError):
        client.files.metadata("missing.txt")
    with pytest.raises(SensoriumError):
        client.query("", "hi")


def many_headers(count: int) -> bytes:
    """A 200 answer with ``count`` headers of its own (a gateway's tracing, cookies...)."""
    head = "".join(f"X-Gateway-{n}: {n}\r\n" for n in range(count))
    body = b'{"num_files": 3, "num_bytes": 0}'
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def test_an_answer_with_many_headers_is_read():
    """Over ~96 headers failed as `APIConnectionError ... message head is too large` (hyper's
    default limit of 100), and was retried."""
    with FakeServer(lambda head: [many_headers(300)]) as server:
        with sensorium.Client("sk-test", server.base_url, max_retries=0) as client:
            assert client.files.info()["num_files"] == 3


def test_an_answer_whose_header_section_is_too_large_says_so_and_is_not_retried():
    with FakeServer(lambda head: [many_headers(1200)]) as server:
        with sensorium.Client("sk-test", server.base_url, max_retries=2) as client:
            with pytest.raises(APIResponseValidationError) as info:
                client.files.info()
        assert len(server.requests) == 1
    assert "the answer's header section is too large to read" in str(info.value)
