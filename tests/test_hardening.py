"""Regressions for what a hostile server and a careless caller found (issue 10): no panic reaches
Python, no echoed key survives, no wrong answer passes silently, every message is bounded."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
import pytest

import sensorium
from _fake_server import FakeServer, response
from _helpers import ENCODER, REASONER, run_on
from sensorium import _core
from sensorium.errors import (
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    InternalError,
    InternalServerError,
    InvalidArgumentError,
    QueryFailedError,
    RateLimitError,
    SensoriumError,
)

KEY = "sk-SECRET-123"


@pytest.fixture
def call(client_kind: str) -> Callable[..., Any]:
    """``call(base_url, lambda client: client.query(...), **client_options)`` on either client."""
    return lambda base_url, operation, **options: run_on(
        client_kind, operation, **{"api_key": KEY, "base_url": base_url, **options})


def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> Callable[[bytes], list[Any]]:
    return lambda head: [response(status, body, headers)]


# 1 and 8: Retry-After values a server may send


@pytest.mark.parametrize("header", [{"Retry-After": "1e20"}, {"retry-after-ms": "1e23"}, {"Retry-After": "inf"}])
def test_huge_retry_after_ends_the_call_with_the_status_error(call, header):
    with FakeServer(answer(429, b'{"errors": [{"code": "rate_limited", "message": "slow down"}]}', header)) as server:
        with pytest.raises(RateLimitError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"))
    assert info.value.retry_after is not None and info.value.retry_after > 1e6
    assert len(server.requests) == 1, "a wait longer than the timeout is not slept"


def test_huge_retry_after_with_no_timeout_and_no_retries(call):
    with FakeServer(answer(503, b"{}", {"Retry-After": "1e20"})) as server:
        with pytest.raises(InternalServerError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"), timeout=None, max_retries=0)
    assert info.value.status == 503 and info.value.retry_after > 1e6


def test_retry_after_longer_than_the_timeout_fails_at_once(call):
    with FakeServer(answer(429, b"{}", {"Retry-After": "100000"})) as server:
        started = time.monotonic()
        with pytest.raises(RateLimitError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"), timeout=2)
        elapsed = time.monotonic() - started
    assert info.value.retry_after == 100000
    assert len(server.requests) == 1
    assert elapsed < 30, "the call did not sleep through the server's Retry-After"


def test_retry_after_within_the_timeout_is_still_honoured(call):
    bodies = iter([response(429, b"{}", {"Retry-After": "0.2"}), response(200, b'{"status": "completed", "response": {"response": ["ok"]}}')])
    with FakeServer(lambda head: [next(bodies)]) as server:
        result = call(server.base_url, lambda c: c.query(REASONER, "hi"), timeout=2)
    assert result.text == "ok" and len(server.requests) == 2


# 2: timeouts out of range


@pytest.mark.parametrize("option", [{"timeout": 1e20}, {"connect_timeout": 1e300}, {"read_timeout": 1e19}])
def test_huge_timeouts_are_refused_naming_the_option(option):
    (name,) = option
    with pytest.raises(InvalidArgumentError) as info:
        sensorium.Client(api_key=KEY, base_url="http://127.0.0.1:9/v0.5", **option)
    assert info.value.argument == name and "a year" in str(info.value)
    with sensorium.Client(api_key=KEY, base_url="http://127.0.0.1:9/v0.5") as client:
        with pytest.raises(InvalidArgumentError):
            client.with_options(**option)


# 3: keys echoed by the server


def _assert_key_absent(exc: BaseException) -> None:
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(pickle.dumps(exc))]
    texts += [repr(v) for v in vars(exc).values()]
    for text in texts:
        assert KEY not in text, text[:300]


def test_key_echoed_in_a_failed_query_is_redacted_everywhere(call):
    from sensorium.testing import Emulator

    with Emulator(api_key=KEY) as emu:
        emu.fail_queries(f"worker saw key {KEY}", times=1)
        with pytest.raises(QueryFailedError) as info:
            call(emu.base_url, lambda c: c.query(REASONER, "hi"))
        _assert_key_absent(info.value)
        assert "worker saw key <redacted>" in info.value.error_msg
        emu.fail_queries(f"encoder saw {KEY}", times=1)
        with pytest.raises(QueryFailedError) as info:
            call(emu.base_url, lambda c: c.embed(ENCODER, np.ones((2, 16))))
        _assert_key_absent(info.value)


def test_key_echoed_in_a_wrong_shaped_answer_is_redacted(call):
    body = json.dumps({"api_key": KEY, "response": 42}).encode()
    with FakeServer(answer(200, body)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"))
    _assert_key_absent(info.value)
    assert "<redacted>" in info.value.body


def test_a_record_missing_its_id_keeps_the_answer_without_the_key(call):
    body = json.dumps({"status": "running", "error": f"saw {KEY}"}).encode()
    with FakeServer(answer(200, body)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.agents.instances.get("agt_1"), max_retries=0)
    _assert_key_absent(info.value)
    assert json.loads(info.value.body) == {"status": "running", "error": "saw <redacted>"}


def _required_fields() -> list[tuple[str, Any, list[str]]]:
    """``(name, class, required field names)`` of every record class with required fields."""
    import dataclasses

    from sensorium import types

    found = []
    for name in types.__all__:
        cls = getattr(types, name)
        if not (dataclasses.is_dataclass(cls) and hasattr(cls, "from_dict")):
            continue
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if required:
            found.append((name, cls, required))
    return found


def test_every_record_missing_a_required_field_is_a_validation_error():
    """Records built from a 200 without their id (or a node without its key) raised a bare
    TypeError from the dataclass constructor."""
    checked = set()
    for name, cls, required in _required_fields():
        answer_body = {"status": "x", "brand_new": [1]}
        with pytest.raises(APIResponseValidationError) as info:
            cls.from_dict(answer_body)
        assert all(repr(field) in str(info.value) for field in required) and name in str(info.value)
        assert json.loads(info.value.body) == answer_body
        checked.add(name)
    assert {"Agent", "Bundle", "Node", "BatchJob", "FineTuningJob", "Checkpoint", "FileRecord"} <= checked

def test_changing_a_records_nested_field_leaves_to_dict_as_received():
    """`to_dict()` promises the JSON as received; the fields shared the answer's nested lists and
    dicts, so editing `job.errors` in place changed it."""
    from sensorium.types import FineTuningJob

    answer_body = {"id": "ftj_1", "errors": [{"code": "x"}], "training_files": ["a.csv"], "hyper": {"lr": 1}}
    job = FineTuningJob.from_dict(answer_body)
    assert job.errors is not None and job.training_files is not None
    job.errors[0]["code"] = "edited"
    job.training_files.append("b.csv")
    job.extra["hyper"]["lr"] = 2
    assert job.to_dict() == {"id": "ftj_1", "errors": [{"code": "x"}], "training_files": ["a.csv"], "hyper": {"lr": 1}}



def test_records_hash_consistently_with_their_equality():
    """Records are frozen dataclasses, but `set(client.files.list())` raised TypeError: the
    dataclass hash hashed the `extra` dict and the dict and list fields. Equal records (built from
    the same answer, keys in any order) now hash equal, nested records included, so they go in
    sets and serve as dict keys; records that differ stay apart."""
    from sensorium.types import Bundle, Checkpoint, FileRecord, FineTuningJob, LensSession

    answers: list[tuple[Any, dict[str, Any]]] = [
        (FileRecord, {"file_id": "a.csv", "num_bytes": 3, "brand_new": {"x": [1, 2]}}),
        (Checkpoint, {"id": "ckp_1", "step": 5, "metrics": {"loss": 0.25, "acc": [0.5, 0.75]}}),
        (FineTuningJob, {"id": "ftj_1", "errors": [{"code": "x"}], "training_files": ["a.csv"], "hyper": {"lr": 1}}),
        (Bundle, {"id": "bnd_1", "values": {"window_size": 64}, "latest_runs": [
            {"id": "agt_1", "status": "completed", "extra_field": {"k": "v"}}, {"id": "agt_2", "status": "failed"}]}),
        (LensSession, {"session_id": "lsn-1", "api_key": "sk-secret", "lens_config": {"model_pipeline": []}}),
    ]
    for cls, answer in answers:
        record = cls.from_dict(answer)
        twin = cls.from_dict(json.loads(json.dumps(dict(reversed(list(answer.items()))))))
        assert record == twin and hash(record) == hash(twin), cls.__name__
        assert len({record, twin}) == 1 and {record: "seen"}[twin] == "seen"
        assert pickle.loads(pickle.dumps(record)) in {record}
    a, b = (FileRecord.from_dict({"file_id": "a.csv", "x": {"k": k}}) for k in (1, 2))
    assert a != b and len({a, b}) == 2
    first, second = (Bundle.from_dict({"id": "bnd_1", "latest_runs": [{"id": "agt_1", "status": s}]})
                     for s in ("completed", "failed"))
    assert first != second and len({first, second}) == 2
    # A record changed in place (a dict field edited) hashes as its new value: no stale hash.
    job = FineTuningJob.from_dict({"id": "ftj_1", "errors": [{"code": "x"}]})
    other = FineTuningJob.from_dict({"id": "ftj_1", "errors": [{"code": "y"}]})
    hash(job)
    assert job.errors is not None
    job.errors[0]["code"] = "y"
    assert job == other and hash(job) == hash(other)


# 4: a body that stops mid-way


def test_read_timeout_bounds_a_query_body_that_stalls(call):
    head_and_start = response(200, b'{"status": "compl', length=200)
    with FakeServer(lambda head: [head_and_start, 30.0]) as server:
        started = time.monotonic()
        with pytest.raises(APITimeoutError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"), timeout=None, read_timeout=0.5, max_retries=0)
        elapsed = time.monotonic() - started
    assert "read_timeout" in str(info.value)
    assert elapsed < 15, "the stalled body was waited out instead of timing out"


# 5: wrong-shaped 200 answers


@pytest.mark.parametrize("body", [{"response": 42}, {}, {"status": "completed", "response": {"response": {"a": 1}}}])
def test_wrong_shaped_query_answers_raise(call, body):
    raw = json.dumps(body).encode()
    with FakeServer(answer(200, raw)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"), max_retries=0)
    assert "response.response" in str(info.value)
    assert info.value.body == raw.decode()


@pytest.mark.parametrize(
    "rows, expected",
    [([], "(2, 768)"), ([[0.0] * 5] * 3, "(3, 5)"), ([[0.0] * 768] * 3, "(3, 768)"), ([0.0] * 768, "(1, 768)")],
)
def test_wrong_shaped_embeddings_raise(call, rows, expected):
    raw = json.dumps({"status": "completed", "response": {"response": rows}}).encode()
    with FakeServer(answer(200, raw)) as server:
        with pytest.raises(APIResponseValidationError) as info:
            call(server.base_url, lambda c: c.embed(ENCODER, np.ones((2, 16))), max_retries=0)
    message = str(info.value)
    assert "(2, 768)" in message and expected in message, message
    assert info.value.body == raw.decode()


def test_right_shaped_embeddings_still_parse(call):
    raw = json.dumps({"status": "completed", "response": {"response": [[0.5] * 768] * 2}}).encode()
    with FakeServer(answer(200, raw)) as server:
        emb = call(server.base_url, lambda c: c.embed(ENCODER, np.ones((2, 16))))
    assert emb.vectors.shape == (2, 768)


# 6: huge error bodies


def test_a_huge_error_detail_is_cut_in_the_message_and_kept_on_body(call):
    detail = "x" * (10 * 1024 * 1024)
    raw = json.dumps({"detail": detail}).encode()
    with FakeServer(answer(400, raw)) as server:
        with pytest.raises(sensorium.errors.BadRequestError) as info:
            call(server.base_url, lambda c: c.query(REASONER, "hi"))
    assert len(str(info.value)) < 2000
    assert len(info.value.body) == len(raw)


# 7: text arguments that cannot be sent


@pytest.mark.parametrize(
    "operation, argument",
    [
        (lambda c: c.query(REASONER, "a\ud800b"), "query"),
        (lambda c: c.query("Reasoner::\udc80", "hi"), "model"),
        (lambda c: c.query(REASONER, "hi", system_prompt="\ud800"), "system_prompt"),
        (lambda c: c.embed("Encoder::\ud800", np.ones(4)), "model"),
        (lambda c: c.files.metadata("a\ud800.txt"), "file_id"),
        (lambda c: c.files.delete("a\ud800.txt"), "file_id"),
        (lambda c: c.files.upload_base64("a\ud800.txt", b"x"), "name"),
    ],
)
def test_lone_surrogates_are_refused_before_sending(emu, call, operation, argument):
    with pytest.raises(InvalidArgumentError) as info:
        call(emu.base_url, operation, api_key=emu.api_key)
    assert info.value.argument == argument
    assert emu.requests == []


def test_wrong_types_still_raise_type_error_naming_the_argument(emu, call):
    with pytest.raises(TypeError) as info:
        call(emu.base_url, lambda c: c.query(123, "hi"), api_key=emu.api_key)
    assert "model" in str(info.value)
    with pytest.raises(TypeError) as info:
        call(emu.base_url, lambda c: c.query(REASONER, b"hi"), api_key=emu.api_key)
    assert "query" in str(info.value)


# Defence in depth: a panic becomes InternalError


@pytest.mark.parametrize("where", ["call", "task"])
def test_a_panic_becomes_internal_error_and_is_logged_once(caplog, where):
    caplog.set_level(logging.ERROR)
    with pytest.raises(InternalError) as info:
        _core._panic_for_tests(where, False)
    assert isinstance(info.value, SensoriumError)
    assert "sensorium bug" in str(info.value) and "_panic_for_tests" in str(info.value)
    logged = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.ERROR


def test_a_panic_in_an_async_call_becomes_internal_error():
    async def main() -> None:
        await _core._panic_for_tests("task", True)

    with pytest.raises(InternalError):
        asyncio.run(main())


def test_a_list_whose_cursor_repeats_is_refused_not_followed_forever(call):
    """A page whose next_cursor was already used in this walk would loop: the list is refused.
    (After 20 pages the fake server ends the list, so a client that follows it fails this test
    with a wrong answer instead of hanging.)"""
    pages: list[bytes] = []

    def script(head: bytes) -> list[Any]:
        pages.append(head)
        more = len(pages) < 20
        body = {"data": [{"file_id": "a.txt"}], "has_more": more, "next_cursor": "c1" if more else None}
        return [response(200, json.dumps(body).encode())]

    with FakeServer(script) as server:
        with pytest.raises(APIResponseValidationError, match="c1"):
            call(server.base_url, lambda c: c.files.list())
    assert len(pages) == 2, "the first repeat ends the walk"


def test_a_list_whose_cursor_cycles_is_refused(call):
    cursors = {None: "c1", "c1": "c2", "c2": "c1"}

    def script(head: bytes) -> list[Any]:
        target = head.split(b" ")[1].decode()
        after = target.split("after=")[1].split("&")[0] if "after=" in target else None
        body = {"data": [{"file_id": f"{after}.txt"}], "has_more": True, "next_cursor": cursors.get(after)}
        return [response(200, json.dumps(body).encode())]

    with FakeServer(script) as server:
        with pytest.raises(APIResponseValidationError):
            call(server.base_url, lambda c: c.files.list())


# Redirects: a proxy, or an http:// base URL sent on to https://


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_turn_a_post_into_a_get_is_raised_naming_the_new_address(call, status):
    """reqwest's default followed it as a bodiless GET: `bundles.run` read the list at the new
    address and answered its JSON as a started run, or met a 405 blamed on the POST."""
    def script(head: bytes) -> list[Any]:
        if head.startswith(b"POST"):
            return [response(status, b"", {"Location": "https://moved.example/v0.5/agents/bundles/bnd_1/run?sig=secret"})]
        return [response(200, b'{"id": "bnd_evil", "status": "ready"}')]

    with FakeServer(script) as server:
        with pytest.raises(APIStatusError) as info:
            call(server.base_url, lambda c: c.agents.bundles.run("bnd_1", "a.csv"))
    assert info.value.status_code == status
    message = str(info.value)
    assert "https://moved.example/v0.5/agents/bundles/bnd_1/run" in message and "base_url" in message
    assert "sig=secret" not in message  # a presigned address's query is its signature
    assert [head.split(b" ")[0] for head in server.requests] == [b"POST"], "not followed as a GET"


def test_a_redirect_that_keeps_the_method_is_followed_with_the_body(call):
    def script(head: bytes) -> list[Any]:
        if b" /v0.5/query " in head:
            return [response(307, b"", {"Location": "/v0.5/moved/query"})]
        return [response(200, json.dumps({"query_id": "q1", "status": "completed",
                                          "response": {"response": ["moved"]}}).encode())]

    with FakeServer(script) as server:
        result = call(server.base_url, lambda c: c.query(REASONER, "hi"))
    assert result.text == "moved"
    assert [head.split(b" ")[:2] for head in server.requests] == [[b"POST", b"/v0.5/query"],
                                                                  [b"POST", b"/v0.5/moved/query"]]
    assert server.bodies[0] == server.bodies[1] and b'"hi"' in server.bodies[1]


@pytest.mark.parametrize("headers, says", [
    ("Content-Type: text/html; charset=utf-8", "came as text/html; charset=utf-8, not JSON"),
    ("Content-Type: application/json\r\nContent-Encoding: gzip", "came as gzip-encoded, not JSON"),
])
def test_an_answer_that_is_not_json_names_what_it_came_as(call, headers, says):
    """A proxy's HTML page, or a gzip body nobody asked for, said only "expected value at line 1
    column 1"."""
    body = b"<html>sign in to the proxy</html>" if "html" in headers else b"\x1f\x8b\x08\x00garbage"
    raw = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{headers}\r\nConnection: close\r\n\r\n").encode() + body
    with FakeServer(lambda head: [raw]) as server:
        with pytest.raises(APIResponseValidationError, match=re.escape(says)):
            call(server.base_url, lambda c: c.agents.bundles.get("bnd_1"))


def _cursor_server(page: Callable[[str | None, int], dict[str, Any]]) -> tuple[FakeServer, list[bytes]]:
    """A server answering ``GET ...?after=<cursor>`` with ``page(cursor, request_number)``."""
    heads: list[bytes] = []

    def script(head: bytes) -> list[Any]:
        heads.append(head)
        target = head.split(b" ")[1].decode()
        after = target.split("after=")[1].split("&")[0] if "after=" in target else None
        return [response(200, json.dumps(page(after, len(heads))).encode())]

    return FakeServer(script), heads


@pytest.mark.parametrize("more", ["true", "True", "TRUE"])
def test_a_has_more_written_as_text_is_read_as_the_boolean_it_spells(call, more):
    """`has_more: "true"` was read as false: the list ended after its first page, silently short."""
    def page(after: str | None, _: int) -> dict[str, Any]:
        if after is None:
            return {"data": [{"file_id": "a.txt"}, {"file_id": "b.txt"}], "has_more": more, "next_cursor": "c2"}
        return {"data": [{"file_id": "c.txt"}], "has_more": "false", "next_cursor": None}

    server, heads = _cursor_server(page)
    with server:
        files = call(server.base_url, lambda c: c.files.list())
    assert [f.file_id for f in files] == ["a.txt", "b.txt", "c.txt"] and len(heads) == 2


@pytest.mark.parametrize("more", [1, "yes", [True], {"value": True}])
def test_a_has_more_that_is_no_boolean_is_refused_not_read_as_the_end(call, more):
    def page(after: str | None, _: int) -> dict[str, Any]:
        return {"data": [{"file_id": "a.txt"}], "has_more": more, "next_cursor": "c2"}

    server, _ = _cursor_server(page)
    with server:
        with pytest.raises(APIResponseValidationError, match="has_more"):
            call(server.base_url, lambda c: c.files.list())


def test_items_a_cursor_page_repeats_are_given_once(call):
    """Offset-style walks skipped the ids they had given; a cursor-style page repeating the page
    before it handed its items out twice. Items without an id cannot be told apart: all kept."""
    pages = {None: (["a", "b"], "c2"), "c2": (["a", "b", "c"], "c3"), "c3": (["c", "d"], None)}

    def page(after: str | None, _: int) -> dict[str, Any]:
        ids, cursor = pages[after]
        return {"data": [{"id": i, "event_type": "x"} for i in ids] + [{"message": "no id"}],
                "has_more": cursor is not None, "next_cursor": cursor}

    server, heads = _cursor_server(page)
    with server:
        lines = call(server.base_url, lambda c: c.agents.instances.logs("agt_1"))
    assert [line.id for line in lines] == ["a", "b", None, "c", None, "d", None] and len(heads) == 3


def test_a_long_walk_keeps_no_memory_per_item_given():
    """A walk kept the id of every item it gave, to skip repeats: 33 MB for 300,000 log lines,
    and a feed of ten million would take gigabytes. It keeps the last pages' ids only."""
    import tracemalloc

    per_page, pages = 1000, 60
    page_of = {None: 0, **{f"c{n}": n for n in range(1, pages)}}

    def page(after: str | None, _: int) -> dict[str, Any]:
        n = page_of[after]
        more = n + 1 < pages
        return {"data": [{"id": f"log-line-{n:04d}-{i:06d}", "event_type": "x"} for i in range(per_page)],
                "has_more": more, "next_cursor": f"c{n + 1}" if more else None}

    server, _ = _cursor_server(page)
    with server, sensorium.Client(api_key=KEY, base_url=server.base_url) as client:
        walk = iter(client.agents.instances.logs("agt_1"))
        held = []
        tracemalloc.start()
        try:
            for given, _line in enumerate(walk, 1):
                if given in (5 * per_page, pages * per_page):
                    held.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
    assert given == pages * per_page
    # 55,000 more items given: ids kept for each would be several MB more.
    assert held[1] - held[0] < 1_000_000, held


def test_a_list_of_empty_pages_without_end_is_refused_after_a_bound(call):
    """A server answering empty pages with has_more and a new cursor for ever was polled in a
    tight loop (2,000 requests in 5 s). The fake server ends the list after 2,000 pages, so a
    client that follows it fails this test with a wrong answer instead of hanging."""
    from sensorium.pagination import EMPTY_PAGES_IN_A_ROW

    def page(after: str | None, number: int) -> dict[str, Any]:
        more = number < 2000
        return {"data": [], "has_more": more, "next_cursor": f"c{number}" if more else None}

    server, heads = _cursor_server(page)
    with server:
        with pytest.raises(APIResponseValidationError, match="empty pages") as info:
            call(server.base_url, lambda c: c.files.list())
    assert len(heads) == EMPTY_PAGES_IN_A_ROW and str(EMPTY_PAGES_IN_A_ROW) in str(info.value)


def test_a_few_empty_pages_between_items_do_not_end_the_list(call):
    from sensorium.pagination import EMPTY_PAGES_IN_A_ROW

    def page(after: str | None, number: int) -> dict[str, Any]:
        # Runs of empty pages just short of the bound, each run followed by one item.
        last = 3 * EMPTY_PAGES_IN_A_ROW
        items = [{"file_id": f"{number}.txt"}] if number % EMPTY_PAGES_IN_A_ROW == 0 else []
        return {"data": items, "has_more": number < last, "next_cursor": f"c{number}" if number < last else None}

    server, _ = _cursor_server(page)
    with server:
        files = call(server.base_url, lambda c: c.files.list())
    assert len(files) == 3


@pytest.mark.parametrize("value", [None, 12345, {"value": "agt_1"}, ["agt_1"], True, ""])
def test_every_record_refuses_a_required_field_of_the_wrong_type(value):
    """`id: null` (or a number) was taken: `bundles.run` returned `Agent(id=None)`, and the next
    call blamed the caller's argument for it."""
    checked = set()
    for name, cls, required in _required_fields():
        for field in required:
            answer_body = {**{f: "ok_1" for f in required}, field: value, "status": "x"}
            with pytest.raises(APIResponseValidationError) as info:
                cls.from_dict(answer_body)
            assert repr(field) in str(info.value) and name in str(info.value)
            assert json.loads(info.value.body) == answer_body
            checked.add(name)
    assert {"Agent", "Bundle", "Node", "BatchJob", "FineTuningJob", "Checkpoint", "FileRecord",
            "LensSession"} <= checked


def test_a_content_length_that_promises_a_petabyte_does_not_kill_the_process(tmp_path):
    """The body buffer was made the size the server's Content-Length claimed: a lying server
    aborted the process (`memory allocation of 999999999999992 bytes failed`, SIGABRT), with no
    exception to catch, in a notebook kernel or a pytest run alike. Run in a child process, so
    the old behaviour fails this test rather than the suite."""
    script = tmp_path / "lying_length.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from _fake_server import FakeServer
import sensorium, sensorium.errors

def lying(head):
    head = (b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
            b"Content-Length: 1000000000000000\\r\\nConnection: close\\r\\n\\r\\n")
    # Two pieces: a body in one piece is handed on without a buffer.
    return [head, b'{{"num_files":', 0.2, b' 1}}', 0.2]

with FakeServer(lying) as server:
    for make in (sensorium.Client, sensorium.AsyncClient):
        client = make(api_key="sk-test", base_url=server.base_url, max_retries=0)
        try:
            call = client.files.info()
            if make is sensorium.AsyncClient:
                import asyncio
                asyncio.run(call)
        except sensorium.errors.APIConnectionError as e:
            print("raised", type(e).__name__)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n").count("raised APIConnectionError") == 2, done.stdout
