"""embed_many side by side with the public scripts' method and with aiohttp + orjson, against one
emulator in its own process (so only the clients' CPU is counted; the server's is reported apart).

    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/maturin develop --release
    .venv/bin/python benchmarks/embed_many.py                 # the issue's sizes; minutes on 2 cores
    .venv/bin/python benchmarks/embed_many.py --small         # a quick check that everything runs

Sections:

1. Throughput: W windows of (4, 1024) float64 embedded per channel (4 W requests) by
   ``embed_many(per_channel=True)``, by an 8-thread pool of ``requests`` with ``.tolist()`` /
   ``json`` / ``np.asarray`` (how the public scripts do it), and by ``aiohttp`` + ``orjson`` with
   64 in flight. Every client's vectors are checked bit-identical to embed_many's first.
   Rounds are interleaved (``--rounds``, default 5) and each client's median round is reported.
   ``--sweep`` adds embed_many at several ``concurrency`` settings (how its default was chosen).
2. Memory: ``embed_many`` over a generator of R windows, in a fresh process: peak RSS growth
   beyond the result array itself (which embed_many must return whole).
3. Rate limit: a second emulator with ``--rate-limit L``; embed_many of K windows; the achieved
   rate (the first L requests ride the burst and are left out) and the emulator's record of 429s
   and attempts (no request may need more than the retry budget).
4. Shared limit: 2 and 4 clients at once (``--shared-clients``), each its own ``Client`` (as
   Dask workers or separate scripts of one organization have), each embedding ``--shared-windows``
   windows against one emulator with ``--shared-limit`` requests/s: the windows lost, the 429s,
   the highest attempt, and the wall time against the ideal (all requests at the limit).

Nothing here asserts a time; the report is printed as markdown and the raw numbers are written to
benchmarks/results/embed_many-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402
import peers  # noqa: E402
import servers  # noqa: E402

ENCODER = peers.ENCODER
CHANNELS, POINTS = 4, 1024


def make_windows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, CHANNELS, POINTS))


# ---------------------------------------------------------------------------------------------
# The three ways


def by_embed_many(base_url: str, key: str, windows: np.ndarray, concurrency: int | None) -> np.ndarray:
    import sensorium

    with sensorium.Client(key, base_url, max_retries=2) as client:
        return client.embed_many(ENCODER, windows, per_channel=True, concurrency=concurrency)


def by_thread_pool(query_url: str, key: str, windows: np.ndarray, threads: int = 8) -> np.ndarray:
    """The public scripts: a thread pool, one request per channel, .tolist() in, np.asarray out."""
    import requests
    from requests.adapters import HTTPAdapter

    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_connections=threads, pool_maxsize=threads))
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    out = np.empty((len(windows), CHANNELS, 768), dtype=np.float32)

    def one(task: tuple[int, int]) -> None:
        i, c = task
        body = json.dumps(peers.encoder_payload(windows[i, c : c + 1].tolist()))
        for attempt in range(3):  # their own retry loop
            reply = session.post(query_url, data=body, headers=headers)
            if reply.status_code not in (429, 500, 502, 503, 504):
                break
            time.sleep(float(reply.headers.get("Retry-After", 0.5 * 2**attempt)))
        reply.raise_for_status()
        out[i, c] = np.asarray(reply.json()["response"]["response"], dtype=np.float32).reshape(768)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, [(i, c) for i in range(len(windows)) for c in range(CHANNELS)]))
    session.close()
    return out


def by_aiohttp(query_url: str, key: str, windows: np.ndarray, inflight: int = 64) -> np.ndarray:
    import aiohttp
    import orjson

    out = np.empty((len(windows), CHANNELS, 768), dtype=np.float32)

    async def main() -> None:
        limit = asyncio.Semaphore(inflight)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128)) as session:

            async def one(i: int, c: int) -> None:
                body = orjson.dumps(peers.encoder_payload(windows[i, c : c + 1]), option=orjson.OPT_SERIALIZE_NUMPY)
                async with limit:
                    async with session.post(query_url, data=body, headers=headers) as reply:
                        reply.raise_for_status()
                        raw = await reply.read()
                out[i, c] = np.asarray(orjson.loads(raw)["response"]["response"], dtype=np.float32).reshape(768)

            await asyncio.gather(*(one(i, c) for i in range(len(windows)) for c in range(CHANNELS)))

    asyncio.run(main())
    return out


def timed(server: servers.Server, run: Callable[[], np.ndarray], requests: int) -> tuple[np.ndarray, dict[str, Any]]:
    cpu0, wall0, srv0 = time.process_time(), time.perf_counter(), server.cpu_seconds() or 0.0
    vectors = run()
    wall, cpu, srv = time.perf_counter() - wall0, time.process_time() - cpu0, (server.cpu_seconds() or 0.0) - srv0
    return vectors, {
        "seconds": wall,
        "requests_per_s": requests / wall,
        "client_cpu_us_per_request": 1e6 * cpu / requests,
        "server_cpu_us_per_request": 1e6 * srv / requests,
    }


def throughput(server: servers.Server, count: int, sweep: list[int], rounds: int) -> dict[str, Any]:
    target = peers.Target(server.base_url, server.base_url.rstrip("/") + "/query", server.api_key)
    if "/v0.5" not in target.query_url:
        target.query_url = server.base_url.rstrip("/") + "/v0.5/query"
    windows = make_windows(count)
    requests = count * CHANNELS
    reference = by_embed_many(server.base_url, server.api_key, windows[:4], None)
    for name, fn in [("thread pool", by_thread_pool), ("aiohttp+orjson", by_aiohttp)]:
        got = fn(target.query_url, server.api_key, windows[:4])
        if not np.array_equal(got, reference):
            raise SystemExit(f"{name} gave other vectors than embed_many: the comparison would be meaningless")
    runs: dict[str, Callable[[], np.ndarray]] = {}
    for concurrency in [None, *sweep]:
        label = "embed_many" if concurrency is None else f"embed_many concurrency={concurrency}"
        runs[label] = lambda c=concurrency: by_embed_many(server.base_url, server.api_key, windows, c)
    runs["thread pool (8, requests)"] = lambda: by_thread_pool(target.query_url, server.api_key, windows)
    runs["aiohttp+orjson (64)"] = lambda: by_aiohttp(target.query_url, server.api_key, windows)
    # Interleaved rounds, each client's median round (by time) reported: one run of 4,000
    # requests lasts half a second, short enough for one hiccup of the machine to decide it.
    measured: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, run in runs.items():
            measured[label].append(timed(server, run, requests)[1])
    rows: dict[str, Any] = {}
    for label, samples in measured.items():
        samples.sort(key=lambda row: row["seconds"])
        rows[label] = dict(samples[len(samples) // 2], rounds=len(samples))
    return rows


# ---------------------------------------------------------------------------------------------
# Memory: a fresh process, so its high-water mark is embed_many's alone.

RSS_CHILD = r"""
import sys, numpy as np, sensorium
sys.path.insert(0, sys.argv[4])
import measure
base, key, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
window = np.random.default_rng(1).normal(size=(1, 1024))
def windows():
    for _ in range(count):
        yield window
with sensorium.Client(key, base) as client:
    client.embed_many("Encoder::encoder_embeddings_01", window[np.newaxis])  # runtime and pool up
    before = measure.status_kb("VmHWM")
    out = client.embed_many("Encoder::encoder_embeddings_01", windows())
    after = measure.status_kb("VmHWM")
print(before, after, out.nbytes // 1024)
"""


def memory(server: servers.Server, count: int) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, server.base_url, server.api_key, str(count), str(HERE)],
        capture_output=True, text=True, check=True,
    )
    before, after, output_kb = (int(v) for v in result.stdout.split())
    return {
        "windows": count,
        "peak_rss_growth_mb": (after - before) / 1024,
        "result_array_mb": output_kb / 1024,
        "growth_beyond_result_mb": (after - before - output_kb) / 1024,
    }


# ---------------------------------------------------------------------------------------------
# Rate limit


@contextlib.contextmanager
def limited_emulator(limit: float) -> Iterator[tuple[str, str]]:
    """An emulator in its own process with a rate limit of `limit` requests/s: (base URL, key)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sensorium.emulator", "--rate-limit", str(limit)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        settings = dict(process.stdout.readline().strip().split("=", 1) for _ in range(2))
        yield settings["SENSORIUM_BASE_URL"], settings["SENSORIUM_API_KEY"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def query_record(base: str) -> dict[str, int]:
    """The emulator's record of the encoder requests: how many were answered 429, and the highest
    attempt any request needed."""
    origin = base.split("/v0.5")[0]
    with urllib.request.urlopen(f"{origin}/_emulator/requests") as reply:
        log = json.load(reply)
    records = log if isinstance(log, list) else log.get("requests", log.get("data", []))
    queries = [r for r in records if str(r.get("path", "")).endswith("/query")]
    return {
        "responses_429": sum(1 for r in queries if r.get("status") == 429),
        "max_attempt": max((int(r.get("attempt", 1)) for r in queries), default=0),
    }


def rate_limited(limit: float, count: int) -> dict[str, Any]:
    import sensorium

    with limited_emulator(limit) as (base, key):
        windows = np.random.default_rng(2).normal(size=(count, 1, 256))
        with sensorium.Client(key, base) as client:
            start = time.perf_counter()
            client.embed_many(ENCODER, windows)
            seconds = time.perf_counter() - start
        steady = max(count - int(limit), 1)  # the burst of `limit` is admitted at once
        return {
            "limit_per_s": limit,
            "windows": count,
            "seconds": seconds,
            "achieved_per_s_after_burst": steady / seconds,
            "ratio_to_limit": steady / seconds / limit,
            **query_record(base),
        }


def shared_limit(limit: float, clients: int, count: int) -> dict[str, Any]:
    import warnings

    import sensorium
    from sensorium.errors import EmbedManyError

    with limited_emulator(limit) as (base, key):
        windows = np.random.default_rng(3).normal(size=(count, 1, 8))
        lost = [0] * clients

        def run(n: int) -> None:
            with sensorium.Client(key, base) as client, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the platform's zero-padding notes
                try:
                    client.embed_many(ENCODER, windows)
                except EmbedManyError as e:
                    lost[n] = len(e.failed) + len(e.not_sent)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {
            "clients": clients,
            "windows_each": count,
            "limit_per_s": limit,
            "seconds": time.perf_counter() - start,
            "ideal_seconds": (clients * count - limit) / limit,  # the first `limit` ride the burst
            "windows_lost": sum(lost),
            **query_record(base),
        }


# ---------------------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    lines = [f"# embed_many ({results['build']} build)", ""]
    tp = results["throughput"]
    rounds = next(iter(tp["rows"].values())).get("rounds", 1)
    lines += [f"{tp['requests']} requests per client per round; the median of {rounds} interleaved round(s).", ""]
    lines += ["| client | s | requests/s | client CPU µs/request | server CPU µs/request |", "|---|---|---|---|---|"]
    for name, row in tp["rows"].items():
        lines.append(f"| {name} | {row['seconds']:.2f} | {row['requests_per_s']:.0f} | "
                     f"{row['client_cpu_us_per_request']:.0f} | {row['server_cpu_us_per_request']:.0f} |")
    base = tp["rows"]["embed_many"]["requests_per_s"]
    for name in ("thread pool (8, requests)", "aiohttp+orjson (64)"):
        lines.append(f"\nembed_many / {name}: {base / tp['rows'][name]['requests_per_s']:.2f}x")
    m = results["memory"]
    lines += ["", f"Iterator of {m['windows']} windows: peak RSS growth {m['peak_rss_growth_mb']:.1f} MB, of which the "
              f"result array {m['result_array_mb']:.1f} MB; beyond it {m['growth_beyond_result_mb']:.1f} MB."]
    r = results["rate_limit"]
    lines += ["", f"Rate limit {r['limit_per_s']:g}/s, {r['windows']} windows: {r['achieved_per_s_after_burst']:.1f}/s after "
              f"the burst ({r['ratio_to_limit']:.3f} of the limit), {r['responses_429']} answers 429, "
              f"highest attempt {r['max_attempt']}."]
    lines += ["", "| clients sharing the limit | windows each | limit/s | s (ideal) | windows lost | 429s | highest attempt |",
              "|---|---|---|---|---|---|---|"]
    for row in results["shared_limit"]:
        lines.append(f"| {row['clients']} | {row['windows_each']} | {row['limit_per_s']:g} | {row['seconds']:.1f} "
                     f"({row['ideal_seconds']:.1f}) | {row['windows_lost']} | {row['responses_429']} | {row['max_attempt']} |")
    noise = results["machine_load"]
    lines += ["", f"Machine load (1-minute average) at start: {noise:.2f} on {results['cores']} cores."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes: checks that every section runs")
    parser.add_argument("--windows", type=int, default=None, help="windows of (4, 1024) in section 1 (default 1000)")
    parser.add_argument("--rss-windows", type=int, default=None, help="iterator length in section 2 (default 100000)")
    parser.add_argument("--rate-limit", type=float, default=None, help="requests/s in section 3 (default 50)")
    parser.add_argument("--rate-windows", type=int, default=None, help="windows in section 3 (default 500)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds in section 1, median shown (default 5)")
    parser.add_argument("--shared-clients", default="2,4", help="clients sharing one limit in section 4 (default 2,4)")
    parser.add_argument("--shared-limit", type=float, default=20.0, help="requests/s in section 4 (default 20)")
    parser.add_argument("--shared-windows", type=int, default=None, help="windows per client in section 4 (default 100)")
    parser.add_argument("--sweep", default="", help="extra embed_many concurrency settings, e.g. 8,16,32,64")
    args = parser.parse_args()
    small = args.small
    count = args.windows or (25 if small else 1000)
    rss_count = args.rss_windows or (500 if small else 100_000)
    limit = args.rate_limit or (20.0 if small else 50.0)
    rate_count = args.rate_windows or (60 if small else 500)
    sweep = [int(v) for v in args.sweep.split(",") if v.strip()]
    rounds = args.rounds or (1 if small else 5)

    import os

    started = time.time()
    results: dict[str, Any] = {
        "build": measure.build_profile(),
        "machine_load": os.getloadavg()[0],
        "cores": os.cpu_count(),
        "settings": vars(args),
    }
    server = servers.start("emulator")
    try:
        results["throughput"] = {"windows": count, "requests": count * CHANNELS, "rows": throughput(server, count, sweep, rounds)}
        results["memory"] = memory(server, rss_count)
    finally:
        server.stop()
    results["rate_limit"] = rate_limited(limit, rate_count)
    shared_count = args.shared_windows or (20 if small else 100)
    results["shared_limit"] = [shared_limit(args.shared_limit, int(k), shared_count)
                               for k in args.shared_clients.split(",") if k.strip()]
    results["total_seconds"] = time.time() - started
    measure.write_report(results, report(results), HERE / "results", "embed_many-", small)


if __name__ == "__main__":
    threading.current_thread().name = "benchmark"
    main()
