"""``client.embed_many``: many windows, concurrent requests from the native core, results in input
order; per-channel requests, pacing under a rate limit, partial results on failure, lazy
iterators, Ctrl-C. Every behaviour runs on both clients (``client_kind``)."""

from __future__ import annotations

import _thread
import contextlib
import asyncio
import pickle
import threading
import warnings

import numpy as np
import pytest

from _helpers import ENCODER, REASONER, body_json, calls, run_on, use_fake_tqdm
from sensorium.errors import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    EmbedManyError,
    InvalidArgumentError,
    PayloadTooLargeError,
    QueryFailedError,
    SensoriumError,
)
from sensorium.testing import DEFAULT_MODELS, Emulator

RNG = np.random.default_rng(11)
WINDOWS = RNG.normal(size=(12, 3, 256))


def one_by_one(emu, windows):
    """The reference: each window embedded alone with ``embed``."""
    with emu.client() as c:
        return np.stack([c.embed(ENCODER, w).vectors for w in windows])


def options(emu, **extra):
    return dict(api_key=emu.api_key, base_url=emu.base_url, **extra)


def test_vectors_in_input_order_under_shuffled_completion(emu, client_kind):
    expected = one_by_one(emu, WINDOWS)
    emu.clear_requests()
    # Half the requests are held back a while, so answers come back out of order.
    emu.inject("POST", "/query", delay=0.2, probability=0.5, times=None)
    vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS, concurrency=6), **options(emu))
    assert vectors.dtype == np.float32 and vectors.shape == (12, 3, 768)
    np.testing.assert_array_equal(vectors, expected)
    assert len(calls(emu, "/query")) == 12


def test_sequence_and_iterator_inputs_give_the_same_vectors(emu, client_kind):
    expected = one_by_one(emu, WINDOWS[:5])
    as_list = run_on(client_kind, lambda c: c.embed_many(ENCODER, list(WINDOWS[:5])), **options(emu))
    as_iter = run_on(client_kind, lambda c: c.embed_many(ENCODER, (w for w in WINDOWS[:5])), **options(emu))
    np.testing.assert_array_equal(as_list, expected)
    np.testing.assert_array_equal(as_iter, expected)


def test_per_channel_reassembles_each_channel_alone(emu, client_kind):
    vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS[:4], per_channel=True), **options(emu))
    with emu.client() as c:
        for i in range(4):
            for ch in range(3):
                np.testing.assert_array_equal(vectors[i, ch], c.embed(ENCODER, WINDOWS[i, ch]).vectors[0])
    sent = [body_json(r) for r in calls(emu, "/query")[:12]]
    assert all(len(b["events"][0]["event_data"]["contents"]) == 1 for b in sent)


def test_normalize_input_is_sent_when_given(emu, client_kind):
    run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS[:2], normalize_input=True), **options(emu))
    run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS[:1]), **options(emu))
    sent = [body_json(r) for r in calls(emu, "/query")]
    assert [b.get("normalize_input") for b in sent] == [True, True, None]


def test_large_multichannel_body_413_is_answered_by_per_channel(client_kind):
    windows = RNG.normal(size=(3, 4, 1024))  # ~80 kB of JSON per window, ~20 kB per channel
    with Emulator(max_query_size_mb=0.04) as emu:
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many(ENCODER, windows), **options(emu))
        assert isinstance(info.value.__cause__, PayloadTooLargeError)
        assert "per_channel=True" in str(info.value)
        assert info.value.failed == [0, 1, 2] and np.isnan(info.value.partial).all()
        vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, per_channel=True), **options(emu))
        assert np.isfinite(vectors).all() and vectors.shape == (3, 4, 768)


def test_rate_limit_paces_the_batch_within_the_retry_budget(client_kind):
    windows = RNG.normal(size=(60, 1, 64))
    with Emulator(rate_limit=20) as emu:
        vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, concurrency=32), **options(emu))
        assert np.isfinite(vectors).all()
        sent = calls(emu, "/query")
        # The limit was hit (the pacing was exercised), and no request needed more than the
        # default 2 retries: every window succeeded.
        assert any(r.status == 429 for r in sent)
        assert max(r.attempt for r in sent) <= 3
        assert sum(r.status == 200 for r in sent) == 60


def test_a_failing_window_leaves_the_others_in_partial(emu, client_kind):
    expected = one_by_one(emu, WINDOWS)
    emu.fail_queries("worker fell over", times=1)
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS, concurrency=4), **options(emu))
    err = info.value
    assert isinstance(err, SensoriumError)
    assert len(err.failed) == 1
    bad = err.failed[0]
    assert f"windows[{bad}]" in str(err) and "worker fell over" in str(err)
    assert isinstance(err.__cause__, QueryFailedError)
    assert err.partial.dtype == np.float32 and err.partial.shape == (12, 3, 768)
    assert np.isnan(err.partial[bad]).all()
    keep = [i for i in range(12) if i != bad]
    np.testing.assert_array_equal(err.partial[keep], expected[keep])
    again = pickle.loads(pickle.dumps(err))
    assert again.failed == err.failed and np.array_equal(again.partial, err.partial, equal_nan=True)
    # The cause is the error to fix, and a Dask or multiprocessing caller only ever sees a pickle.
    assert isinstance(again.__cause__, QueryFailedError) and str(again.__cause__) == str(err.__cause__)


MANY = RNG.normal(size=(300, 2, 16))


@pytest.mark.parametrize(
    "case, cause",
    [("key", AuthenticationError), ("model", BadRequestError), ("family", InvalidArgumentError)],
)
def test_an_error_no_window_escapes_stops_the_batch(client_kind, case, cause):
    # "family": a reasoning model whose family the client cannot tell by its prefix (a user's
    # fine-tuned one), so it is sent, and answers text, not vectors.
    with Emulator(models=[*DEFAULT_MODELS, {"id": "Acme::ft-reason-1", "family": "reasoner"}]) as emu:
        model, opts, concurrency = ENCODER, options(emu), 4
        if case == "key":
            opts["api_key"] = "not-the-key"
        elif case == "model":
            model = "Encoder::no_such_version"
        else:
            model = "Acme::ft-reason-1"
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many(model, MANY, concurrency=concurrency), **opts)
        # What was in flight when the first answer came, not 300 requests.
        assert len(calls(emu, "/query")) <= 2 * concurrency
    err = info.value
    assert isinstance(err.__cause__, cause)
    assert "stopped at windows[" in str(err) and "never sent" in str(err) and ".." not in str(err)
    # Every window is accounted for, so re-running err.failed after the fix completes the work.
    assert err.partial.shape == (300, 2, 768) and np.isnan(err.partial).all()
    assert err.failed == list(range(300))
    assert len(err.not_sent) >= 300 - 2 * concurrency and set(err.not_sent) <= set(err.failed)
    again = pickle.loads(pickle.dumps(err))
    assert again.not_sent == err.not_sent and again.failed == err.failed


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_model_of_no_known_family_is_heard_once_before_the_rest_is_sent(client_kind, per_channel):
    """A reasoning model behind a prefix the client cannot place (a user's fine-tuned model) was
    sent up to `concurrency` billed queries (64 by default) before its first text answer stopped
    the batch. The first request now goes alone; an encoder behind such a prefix then runs as usual."""
    models = [*DEFAULT_MODELS, {"id": "Acme::ft-reason-1", "family": "reasoner"},
              {"id": "Acme::ft-enc-1", "family": "encoder"}]
    with Emulator(models=models) as emu:
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many("Acme::ft-reason-1", MANY, per_channel=per_channel), **options(emu))
        assert len(calls(emu, "/query")) == 1
        assert isinstance(info.value.__cause__, InvalidArgumentError) and len(info.value.not_sent) == 299
        emu.clear_requests()
        got = run_on(client_kind, lambda c: c.embed_many("Acme::ft-enc-1", MANY[:40], per_channel=per_channel),
                     **options(emu))
        want = run_on(client_kind, lambda c: c.embed_many(ENCODER, MANY[:40], per_channel=per_channel), **options(emu))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("model", [REASONER, "Newton::c2_4_7b_251215a172f6d7"])
def test_a_reasoning_model_is_refused_before_sending(emu, client_kind, model):
    with pytest.raises(InvalidArgumentError) as info:
        run_on(client_kind, lambda c: c.embed_many(model, MANY), **options(emu))
    assert info.value.argument == "model" and model in str(info.value)
    assert calls(emu, "/query") == []


def test_a_key_refused_mid_run_stops_reading_and_keeps_the_work_done(emu, client_kind):
    read = []

    def windows():
        for i in range(len(MANY)):
            if i == 10:  # windows 0-8 are done by now: the batch holds 2 windows at concurrency 1
                emu.inject("POST", "/query", 401, times=None)
            read.append(i)
            yield MANY[i]

    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, windows(), concurrency=1), **options(emu))
    err = info.value
    assert isinstance(err.__cause__, AuthenticationError)
    assert len(read) <= 14, "the iterator is not read on once nothing more can be sent"
    assert err.partial.shape == (len(read), 2, 768) and f"not read past windows[{len(read) - 1}]" in str(err)
    done = [i for i in range(len(read)) if i not in err.failed]
    assert set(range(9)) <= set(done)
    emu.clear_faults()
    np.testing.assert_array_equal(err.partial[done], one_by_one(emu, MANY[done]))


def test_a_failure_of_one_window_does_not_stop_the_batch(emu, client_kind):
    emu.inject("POST", "/query", 503, times=3)
    emu.inject("POST", "/query", 413, times=1)
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, MANY[:60], concurrency=4), **options(emu, max_retries=0))
    err = info.value
    assert err.not_sent == [] and len(err.failed) == 4 and "4 of 60 windows failed" in str(err)
    assert len(calls(emu, "/query")) == 60, "every window was tried"


def test_an_iterator_is_read_only_as_far_as_the_batch_holds(emu, client_kind):
    emu.set_query_delay(0.01)
    total, concurrency = 120, 3
    lead = []

    def windows():
        for i in range(total):
            # Windows read so far minus answers the emulator has produced: what is held in memory.
            lead.append(i - len(emu.requests))
            yield WINDOWS[i % 12]

    vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows(), concurrency=concurrency),
                     **options(emu))
    assert vectors.shape == (total, 3, 768) and len(lead) == total
    # The batch keeps at most 2 x concurrency windows ready; a materialised iterator would lead by 120.
    assert max(lead) <= 2 * concurrency + 1


def test_progress_callback_counts_windows(emu, client_kind):
    seen = []
    run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS, progress=lambda d, t: seen.append((d, t))),
           **options(emu))
    assert seen[-1] == (12, 12)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_empty_input(emu, client_kind):
    out = run_on(client_kind, lambda c: c.embed_many(ENCODER, np.zeros((0, 2, 8))), **options(emu))
    assert out.shape == (0, 2, 768) and out.dtype == np.float32
    assert calls(emu, "/query") == []


@pytest.mark.parametrize(
    "windows, kwargs, argument",
    [
        (np.zeros((2, 3)), {}, "windows"),
        (np.zeros((2, 2, 2), dtype=complex), {}, "windows"),
        ("abc", {}, "windows"),
        (42, {}, "windows"),
        (np.ma.masked_array(WINDOWS, mask=np.arange(WINDOWS.size).reshape(WINDOWS.shape) == 7), {}, "windows"),
        (WINDOWS, {"per_channel": "yes"}, "per_channel"),
        (WINDOWS, {"normalize_input": "no"}, "normalize_input"),
        (WINDOWS, {"concurrency": 0}, "concurrency"),
        (WINDOWS, {"concurrency": True}, "concurrency"),
        (WINDOWS, {"progress": "bar"}, "progress"),
    ],
)
def test_bad_arguments_are_named_before_anything_is_sent(emu, client_kind, windows, kwargs, argument):
    with pytest.raises(InvalidArgumentError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, **kwargs), **options(emu))
    assert info.value.argument == argument
    assert calls(emu, "/query") == []


def test_bad_model_is_named(emu, client_kind):
    with pytest.raises(InvalidArgumentError) as info:
        run_on(client_kind, lambda c: c.embed_many("  ", WINDOWS), **options(emu))
    assert info.value.argument == "model"
    assert calls(emu, "/query") == []


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_nan_in_an_iterated_window_fails_that_window_alone_and_names_it(emu, client_kind, per_channel):
    bad = WINDOWS[:4].copy()
    bad[2, 1, 5] = np.nan
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, iter(list(bad)), per_channel=per_channel), **options(emu))
    err, cause = info.value, info.value.__cause__
    assert err.failed == [2] and err.not_sent == []
    assert isinstance(cause, InvalidArgumentError) and cause.argument == "windows[2]" and "NaN" in str(cause)
    # Where in the window, whether the channels go in one request or one each.
    assert "channel 1, index 5" in str(cause) and "windows[2]: holds a NaN" in str(err)
    assert "windows[2]: windows[2]" not in str(err)
    np.testing.assert_array_equal(err.partial[[0, 1, 3]], one_by_one(emu, bad[[0, 1, 3]]))
    assert np.isnan(err.partial[2]).all()


def test_one_bad_window_in_an_array_costs_one_row_not_the_work_done(emu, client_kind):
    windows = MANY[:40].copy()
    windows[25, 1, 3] = np.inf
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, concurrency=4), **options(emu))
    err = info.value
    assert err.failed == [25] and isinstance(err.__cause__, InvalidArgumentError)
    assert len(calls(emu, "/query")) == 39, "every other window was sent, the bad one was not"
    keep = [i for i in range(40) if i != 25]
    np.testing.assert_array_equal(err.partial[keep], one_by_one(emu, windows[keep]))


def test_items_of_an_iterator_that_are_not_windows_fail_alone(emu, client_kind):
    items = [MANY[0], "not a window", MANY[1], np.zeros((3, 16)), MANY[2], np.zeros((2, 2, 16))]
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, iter(items)), **options(emu))
    err = info.value
    assert err.failed == [1, 3, 5] and err.partial.shape == (6, 2, 768)
    assert isinstance(err.__cause__, InvalidArgumentError) and err.__cause__.argument == "windows[1]"
    np.testing.assert_array_equal(err.partial[[0, 2, 4]], one_by_one(emu, MANY[:3]))


def test_an_iterator_of_nothing_but_bad_windows_sends_nothing(emu, client_kind):
    nan = np.full((2, 16), np.nan)
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, iter([nan, nan, nan])), **options(emu))
    assert info.value.failed == [0, 1, 2] and calls(emu, "/query") == []
    assert info.value.partial.shape[0] == 3 and np.isnan(info.value.partial).all()


def test_ctrl_c_stops_the_whole_batch(emu):
    emu.set_query_delay(0.5)
    with emu.client() as c:
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                c.embed_many(ENCODER, RNG.normal(size=(200, 1, 32)), concurrency=4)
        finally:
            timer.cancel()
        # The batch stopped: only the first requests ever reached the emulator.
        assert len(calls(emu, "/query")) < 200
        emu.set_query_delay(0)
        assert c.embed_many(ENCODER, WINDOWS[:2]).shape == (2, 3, 768)


def test_cancelling_the_awaitable_stops_the_batch(emu):
    emu.set_query_delay(0.3)

    async def main():
        async with emu.async_client() as c:
            task = asyncio.ensure_future(c.embed_many(ENCODER, RNG.normal(size=(200, 1, 32)), concurrency=4))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            started = len(emu.requests)
            await asyncio.sleep(1.0)
            return started, len(emu.requests)

    started, later = asyncio.run(main())
    # No new requests after the cancel (at most the ones already in flight finishing).
    assert later <= started + 4 and later < 200


def test_unaligned_arrays_are_read_safely(emu, client_kind):
    # What pickle protocol 5 and Dask hand a worker: an array at an odd address in a byte buffer.
    buf = bytearray(WINDOWS[:2].nbytes + 1)
    unaligned = np.frombuffer(buf, dtype=np.float64, offset=1, count=WINDOWS[:2].size).reshape(WINDOWS[:2].shape)
    unaligned[...] = WINDOWS[:2]
    assert not unaligned.flags.aligned
    got = run_on(client_kind, lambda c: c.embed_many(ENCODER, unaligned, per_channel=True), **options(emu))
    np.testing.assert_array_equal(got, one_by_one(emu, WINDOWS[:2]))


def test_progress_true_feeds_a_tqdm_bar_by_window(emu, client_kind, monkeypatch):
    bars = []

    class FakeBar:  # tqdm's interface as the SDK uses it; tqdm itself is optional
        def __init__(self, **kwargs):
            self.kwargs, self.n, self.total, self.closed = kwargs, 0, kwargs.get("total"), False
            bars.append(self)

        def refresh(self):
            pass

        def close(self):
            self.closed = True

    use_fake_tqdm(monkeypatch, FakeBar)
    run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS, progress=True), **options(emu))
    (bar,) = bars
    assert (bar.n, bar.total, bar.closed) == (12, 12, True)
    assert bar.kwargs["unit"] == "window" and bar.kwargs["desc"] == "embed_many"


def test_progress_true_without_tqdm_names_the_argument(emu, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with emu.client() as c:
        with pytest.raises(InvalidArgumentError) as info:
            c.embed_many(ENCODER, WINDOWS, progress=True)
    assert info.value.argument == "progress"
    assert calls(emu, "/query") == []


@pytest.mark.timeout(60)
def test_rate_limit_and_size_limit_from_the_command_line():
    import signal
    import subprocess
    import sys

    from sensorium import Client
    from sensorium.errors import RateLimitError

    proc = subprocess.Popen(
        [sys.executable, "-m", "sensorium.emulator", "--rate-limit", "2", "--max-query-size-mb", "0.01"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        env = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(2))
        with Client(env["SENSORIUM_API_KEY"], env["SENSORIUM_BASE_URL"], max_retries=0) as c:
            small = RNG.normal(size=(1, 16))
            c.embed(ENCODER, small)
            c.embed(ENCODER, small)  # the burst of 2
            with pytest.raises(RateLimitError) as info:
                c.embed(ENCODER, small)
            assert info.value.retry_after is not None and 0 < info.value.retry_after <= 0.5
        with Client(env["SENSORIUM_API_KEY"], env["SENSORIUM_BASE_URL"]) as c:
            with pytest.raises(PayloadTooLargeError):
                c.embed(ENCODER, RNG.normal(size=(2, 1024)))  # ~40 kB over 0.01 MB
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


class LocalEncoder:
    """An encoder on 127.0.0.1 written here, not the emulator: it answers 429 with ``Retry-After``
    in whole seconds (the HTTP delta-seconds form many servers send), either for the first
    ``refuse_first`` requests only (a transient 429) or from a token bucket of ``rate`` requests per
    second with bursts of ``rate``. With ``exact_wait`` a refusal also says when the next token
    comes, to the millisecond, in ``retry-after-ms``. Each answer is held ``hold`` seconds. It
    records, per request, the server's clock, the status, the attempt and how many requests were
    in flight."""

    def __init__(self, *, rate=None, refuse_first=0, hold=0.0, exact_wait=False):
        import http.server
        import json
        import math
        import time

        self.log, self.lock, self.in_flight = [], threading.Lock(), 0
        bucket = [float(rate or 0), time.monotonic()]
        vector = json.dumps([0.01] * 768)
        encoder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                attempt = 1 + int(self.headers.get("x-sensorium-retry-count", "0"))
                with encoder.lock:
                    now = time.monotonic()
                    if rate is None:
                        ok = len(encoder.log) >= refuse_first
                    else:
                        tokens = min(rate, bucket[0] + (now - bucket[1]) * rate)
                        ok = tokens >= 1
                        bucket[:] = [tokens - 1 if ok else tokens, now]
                        wait_ms = 0 if ok else math.ceil((1 - tokens) / rate * 1000)
                    encoder.in_flight += 1
                    encoder.log.append((now, 200 if ok else 429, attempt, encoder.in_flight))
                try:
                    if ok:
                        time.sleep(hold)
                        out = b'{"query_id": "q", "status": "completed", "response": {"response": %s}}' % vector.encode()
                        self.send_response(200)
                    else:
                        out = b'{"errors": [{"code": "rate_limit_exceeded", "message": "slow down"}]}'
                        self.send_response(429)
                        self.send_header("Retry-After", "1")
                        if exact_wait and rate is not None:
                            self.send_header("retry-after-ms", str(wait_ms))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                finally:
                    with encoder.lock:
                        encoder.in_flight -= 1

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def options(self, **extra):
        return dict(api_key="k-local", base_url=f"http://127.0.0.1:{self.server.server_port}", **extra)

    def after_first_retry(self):
        """The requests from the first retry on: those sent once the first 429 was waited out."""
        first = next(i for i, entry in enumerate(self.log) if entry[2] > 1)
        return self.log[first:]


def test_one_transient_429_is_waited_out_then_the_batch_runs_unpaced(client_kind):
    # One 429 saying "come back in 1 s" is when to come back, not a spacing between requests:
    # after it the batch must run as before (it once went on one request per second).
    windows = RNG.normal(size=(150, 1, 8))
    with LocalEncoder(refuse_first=1, hold=0.02) as server:
        vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, concurrency=16), **server.options())
        assert vectors.shape == (150, 1, 768) and np.isfinite(vectors).all()
        statuses = [status for _, status, _, _ in server.log]
        assert statuses.count(429) == 1 and statuses.count(200) == 150
        # Requests overlapped again after the wait (a pacing of one a second keeps one in flight).
        assert max(in_flight for *_, in_flight in server.after_first_retry()) >= 8


def test_whole_second_retry_after_from_a_token_bucket_paces_at_the_bucket_rate(client_kind):
    # A token bucket of 20/s refusing with "Retry-After: 1" (its next token comes in 50 ms): the
    # batch waits the second once, then sends at the rate the server admits, not one per second.
    windows = RNG.normal(size=(80, 1, 8))
    with LocalEncoder(rate=20) as server:
        vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows), **server.options())
        assert vectors.shape == (80, 1, 768) and np.isfinite(vectors).all()
        assert max(attempt for _, _, attempt, _ in server.log) <= 3, "no request beyond the retry budget"
        admitted = [at for at, status, _, _ in server.after_first_retry() if status == 200]
        # Requests admitted in the busiest second of the server's clock after the first refusal:
        # the bucket admits 20 a second; the old pacing got 1 or 2 through.
        busiest = max(sum(1 for t in admitted if start <= t < start + 1.0) for start in admitted)
        assert busiest >= 12


def test_an_iterator_that_raises_keeps_the_work_done(emu, client_kind):
    def windows():
        for i in range(300):
            if i == 250:
                raise OSError("file 250 is corrupt")
            yield MANY[i]

    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, windows(), concurrency=8), **options(emu))
    err = info.value
    assert isinstance(err.__cause__, OSError) and "file 250 is corrupt" in str(err)
    assert "windows[250]" in str(err)
    # Every window read was sent and finished (those in flight too); the one never read is listed.
    assert len(calls(emu, "/query")) == 250
    assert err.partial.shape == (251, 2, 768)
    assert err.failed == [250] and err.not_sent == [250]
    np.testing.assert_array_equal(err.partial[:250], one_by_one(emu, MANY[:250]))


def test_a_list_with_a_window_of_the_wrong_shape_fails_that_window_alone(emu, client_kind):
    # As an iterator of the same windows does.
    items = [MANY[0], np.zeros((3, 16)), MANY[1], "text", np.zeros((2, 2, 16)), MANY[2]]
    for windows in (items, iter(items)):
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many(ENCODER, windows), **options(emu))
        err = info.value
        assert err.failed == [1, 3, 4] and err.not_sent == [] and err.partial.shape == (6, 2, 768)
        assert isinstance(err.__cause__, InvalidArgumentError) and err.__cause__.argument == "windows[1]"
        np.testing.assert_array_equal(err.partial[[0, 2, 5]], one_by_one(emu, MANY[:3]))


@pytest.mark.parametrize("as_iterator", [False, True])
def test_when_every_window_fails_partial_keeps_the_windows_shape(emu, client_kind, as_iterator):
    windows = np.full((3, 2, 8), np.nan)
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, iter(windows) if as_iterator else windows),
               **options(emu))
    err = info.value
    assert err.partial.shape == (3, 2, 768) and err.failed == [0, 1, 2]
    # The README's recovery works: the rows of the failed windows take the retried vectors.
    fixed = np.nan_to_num(windows)
    err.partial[err.failed] = run_on(client_kind, lambda c: c.embed_many(ENCODER, fixed[err.failed]), **options(emu))
    assert np.isfinite(err.partial).all()


def test_the_stop_message_names_the_first_window_that_stopped_the_batch(emu, client_kind):
    # The first request to arrive is answered last, so the first window to fail is not window 0.
    emu.inject("POST", "/query", 401, delay=0.3, times=1)
    emu.inject("POST", "/query", 401, times=None)
    with pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, iter(MANY[:100]), concurrency=8), **options(emu))
    err = info.value
    assert isinstance(err.__cause__, AuthenticationError)
    assert str(err).startswith(f"embed_many stopped at windows[{err.failed[0]}]:"), str(err)


@contextlib.contextmanager
def _dead_address(kind):
    """A base URL where no connection can be made: nothing listening there (refused at once), or a
    listener whose one-place queue is taken and which never accepts, so the kernel drops every
    further attempt as a firewall that drops packets does (each connection times out)."""
    import socket

    if kind == "refused":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        yield f"http://127.0.0.1:{port}", APIConnectionError
        return
    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", APITimeoutError


@pytest.mark.parametrize("kind", ["refused", "connect-timeout"])
def test_an_address_where_no_connection_can_be_made_stops_the_batch(client_kind, kind):
    read = []

    def windows():
        for i in range(200):
            read.append(i)
            yield MANY[i]

    with _dead_address(kind) as (base_url, cause), pytest.raises(EmbedManyError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, windows(), concurrency=4),
               api_key="k-local", base_url=base_url, connect_timeout=0.2, max_retries=1)
    err = info.value
    assert type(err.__cause__) is cause, repr(err.__cause__)
    assert len(read) <= 2 * 4 + 1, "the iterator is not read on once nothing can be sent"
    assert err.not_sent and set(err.not_sent) <= set(err.failed) and err.failed == list(range(len(read)))
    assert "stopped at windows[0]" in str(err)


def test_an_async_progress_callback_is_refused_naming_progress(emu, client_kind):
    async def callback(done, total):
        pass

    with pytest.raises(InvalidArgumentError) as info:
        run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS, progress=callback), **options(emu))
    assert info.value.argument == "progress" and "async" in str(info.value)
    assert calls(emu, "/query") == []


def test_concurrency_takes_any_integer_type(emu, client_kind):
    vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS[:3], concurrency=np.int64(2)),
                     **options(emu))
    assert vectors.shape == (3, 3, 768)
    for wrong in (2.0, "8"):
        with pytest.raises(TypeError, match="concurrency"):
            run_on(client_kind, lambda c: c.embed_many(ENCODER, WINDOWS[:3], concurrency=wrong), **options(emu))
    assert len(calls(emu, "/query")) == 3


def test_progress_true_without_tqdm_suggests_the_callback_argument_of_embed_many(emu, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with emu.client() as c:
        with pytest.raises(InvalidArgumentError) as info:
            c.embed_many(ENCODER, WINDOWS, progress=True)
    assert "on_progress" not in str(info.value) and "progress=callback" in str(info.value)


def test_concurrent_batches_of_one_client_share_the_rate_limit(client_kind):
    # Six batches at once (threads, or tasks) against one limit: they learn the rate together,
    # so no window burns its retries.
    import concurrent.futures

    with Emulator(rate_limit=20) as emu:
        parts = [RNG.normal(size=(20, 1, 8)) for _ in range(6)]
        if client_kind == "sync":
            with emu.client() as c, concurrent.futures.ThreadPoolExecutor(6) as pool:
                results = list(pool.map(lambda w: c.embed_many(ENCODER, w), parts))
        else:
            async def main():
                async with emu.async_client() as c:
                    return await asyncio.gather(*(c.embed_many(ENCODER, w) for w in parts))

            results = asyncio.run(main())
        assert all(np.isfinite(r).all() for r in results)
        sent = calls(emu, "/query")
        assert max(r.attempt for r in sent) <= 3 and sum(r.status == 200 for r in sent) == 120


def _two_clients_at_once(client_kind, parts, **client_options):
    """``embed_many`` of each part by its own client (its own pacer, as two scripts or two Dask
    workers of one organization have), all at once: threads on ``Client``, tasks on
    ``AsyncClient``."""
    import concurrent.futures

    import sensorium

    if client_kind == "sync":
        def run(windows):
            with sensorium.Client(**client_options) as c:
                return c.embed_many(ENCODER, windows)

        with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
            return list(pool.map(run, parts))

    async def main():
        async def run(windows):
            async with sensorium.AsyncClient(**client_options) as c:
                return await c.embed_many(ENCODER, windows)

        return await asyncio.gather(*(run(w) for w in parts))

    return asyncio.run(main())


def test_separate_clients_sharing_one_rate_limit_lose_no_window(client_kind):
    # Two clients of one organization at once, each learning the limit on its own. One of them
    # once took the whole budget while the other, its first estimate near zero (its burst met a
    # bucket the first had drained), crawled at one request a second and met the first's
    # overshoots with its few requests, burning their retries: a window was lost in most runs.
    parts = [RNG.normal(size=(100, 1, 8)) for _ in range(2)]
    with Emulator(rate_limit=20) as emu:
        results = _two_clients_at_once(client_kind, parts, **options(emu))
        sent = calls(emu, "/query")
    assert all(r.shape == (100, 1, 768) and np.isfinite(r).all() for r in results)
    assert sum(r.status == 200 for r in sent) == 200
    # A request refused for its turn while the others were admitted is retried without spending
    # the budget of 2 retries, but not for ever.
    assert max(r.attempt for r in sent) <= 3 * 3
    # Each batch opens with 8 in flight, adding one per answer, so few of its first attempts meet
    # a drained bucket (it opened with 64: 128 refusals before either learnt anything); beyond
    # them, a pacing that converges costs a few refusals per second of the run, not one per
    # request (about 45 in all, measured).
    assert sum(r.status == 429 for r in sent) <= 100


def test_a_client_starting_as_another_ends_loses_no_window(client_kind):
    # The second client's first requests meet the bucket the first drained, so its first
    # estimate is next to nothing; it grows from there (the Rust tests time that growth), and
    # its refusals while the server admits its other requests cost no window.
    parts = [RNG.normal(size=(100, 1, 8)) for _ in range(2)]
    with LocalEncoder(rate=20, exact_wait=True) as server:
        results = [run_on(client_kind, lambda c, w=w: c.embed_many(ENCODER, w), **server.options()) for w in parts]
        log = list(server.log)
    assert all(r.shape == (100, 1, 768) and np.isfinite(r).all() for r in results)
    assert sum(status == 200 for _, status, _, _ in log) == 200
    assert max(attempt for _, _, attempt, _ in log) <= 3 * 3


@pytest.mark.parametrize("max_retries", [2, 0])
def test_refusals_while_nothing_is_admitted_spend_the_retry_budget(client_kind, max_retries):
    # Retries for a request's turn are only for a server that goes on admitting the batch: one
    # that refuses everything fails each window after max_retries retries, as any other failure.
    from sensorium.errors import RateLimitError

    with Emulator() as emu:
        emu.inject("POST", "/query", 429, retry_after=0.01, times=None)
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many(ENCODER, RNG.normal(size=(3, 1, 8)), concurrency=1),
                   **options(emu, max_retries=max_retries))
        sent = calls(emu, "/query")
    assert isinstance(info.value.__cause__, RateLimitError)
    assert info.value.failed == [0, 1, 2]
    assert sorted(r.attempt for r in sent) == sorted(list(range(1, max_retries + 2)) * 3)


def _sensorium_warnings(caught):
    return [str(w.message) for w in caught if "embed_many" in str(w.message)]


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_platforms_warnings_are_reported_once_per_distinct_message(emu, client_kind, per_channel):
    # The encoder takes 1024 points: longer windows are truncated, shorter ones zero-padded, and
    # each answer says so in response.warning_messages. embed_many once returned only the array.
    long, short, exact = (RNG.normal(size=(2, n)) for n in (2048, 512, 1024))
    windows = [long, long, short, long, exact, long, long, long]  # 6 long, 1 short, 1 exact
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vectors = run_on(client_kind, lambda c: c.embed_many(ENCODER, windows, per_channel=per_channel),
                         **options(emu))
    assert vectors.shape == (8, 2, 768)
    # One warning per distinct message, counting windows (not a per-channel window's requests),
    # naming the first few, in the order of their first window.
    assert _sensorium_warnings(caught) == [
        "embed_many: 6 of 8 windows: window of 2048 points was truncated to its last 1024 (windows 0, 1, 3, 5, 6, ...)",
        "embed_many: 1 of 8 windows: window of 512 points was zero-padded to 1024 (window 2)",
    ]
    assert all(w.category is UserWarning for w in caught)
    # Pointing at the caller's line, not at sensorium's insides.
    import sensorium

    assert not any(w.filename.startswith(sensorium.__path__[0]) for w in caught)


def test_windows_the_model_takes_as_they_are_give_no_warning(emu, client_kind):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_on(client_kind, lambda c: c.embed_many(ENCODER, RNG.normal(size=(5, 2, 1024))), **options(emu))
    assert _sensorium_warnings(caught) == []


def test_the_platforms_warnings_are_reported_when_the_batch_fails_too(emu, client_kind):
    windows = RNG.normal(size=(4, 1, 2048))
    windows[1, 0, 7] = np.nan  # fails alone, without a request
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EmbedManyError) as info:
            run_on(client_kind, lambda c: c.embed_many(ENCODER, windows), **options(emu))
    assert info.value.failed == [1]
    assert _sensorium_warnings(caught) == [
        "embed_many: 3 of 4 windows: window of 2048 points was truncated to its last 1024 (windows 0, 2, 3)"
    ]
