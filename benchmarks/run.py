"""Side-by-side benchmarks of sensorium against httpx, aiohttp, requests and pyreqwest, all
talking to the same server in one run.

    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/run.py            # full run, a few minutes
    .venv/bin/python benchmarks/run.py --quick    # fewer iterations, under a minute

The server (the sensorium emulator, `python -m sensorium.emulator`) runs in its own process on
127.0.0.1, so only the clients' CPU is counted. Prints a markdown report and writes the raw numbers
as JSON to benchmarks/results/. Nothing here asserts a time: the goals are reported, not enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402
import peers  # noqa: E402
import servers  # noqa: E402
from measure import Samples, build_profile  # noqa: E402

PEER_PACKAGES = ["sensorium", "httpx", "aiohttp", "requests", "pyreqwest", "orjson", "numpy"]


# ---------------------------------------------------------------------------------------------
# Settings


class Settings:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.seq_warmup = 50 if quick else 300
        self.seq_calls = 500 if quick else 3000  # per client, over all rounds
        self.seq_rounds = 2 if quick else 5
        self.inflight = 64
        self.tp_calls = 640 if quick else 4000  # per round
        self.tp_rounds = 2 if quick else 5
        self.tp_max_seconds = 1.0 if quick else 3.0  # per round: slow clients stop early
        self.embed_warmup = 5 if quick else 20
        self.embed_calls = 60 if quick else 400
        self.embed_rounds = 2 if quick else 4
        self.micro_calls = 100 if quick else 600
        self.micro_rounds = 2 if quick else 5


# ---------------------------------------------------------------------------------------------
# Environment


def environment(server: servers.Server) -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in PEER_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sensorium._core as core

    return {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "sensorium_build": build_profile(),
        "sensorium_core": core.__file__,
        "server": server.kind,
        "server_command": " ".join(server.command),
        "loadavg_start": os.getloadavg(),
    }


# ---------------------------------------------------------------------------------------------
# Sections


def rotate(items: list, k: int) -> list:
    k %= max(1, len(items))
    return items[k:] + items[:k]


def check_same(name: str, got: Any, want: Any) -> None:
    if isinstance(want, np.ndarray):
        ok = isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)
    else:
        ok = got == want
    if not ok:
        raise SystemExit(f"{name} returned a different result from sensorium's: {got!r:.200} vs {want!r:.200}")


def compare_interleaved(loop: asyncio.AbstractEventLoop, sync: list, asyn: list, want: Any, warmup: int,
                        calls: int, rounds: int) -> dict[str, Any]:
    """Checks every peer answers like sensorium, warms each up, then times them in interleaved
    rounds (so drift in machine load hits all alike) and closes them."""
    for p in sync:
        check_same(p.name, p.call(), want)
        measure.time_sync(p.call, warmup, Samples())
    for ap in asyn:
        check_same(ap.name, loop.run_until_complete(ap.call()), want)
        loop.run_until_complete(measure.time_async(ap.call, warmup, Samples()))
    results = {p.name: Samples() for p in sync + asyn}
    per_round = calls // rounds
    everyone: list = [("sync", p) for p in sync] + [("async", p) for p in asyn]
    for r in range(rounds):
        for kind, p in rotate(everyone, r):
            if kind == "sync":
                measure.time_sync(p.call, per_round, results[p.name])
            else:
                loop.run_until_complete(measure.time_async(p.call, per_round, results[p.name]))
    for p in sync:
        p.close()
    for ap in asyn:
        loop.run_until_complete(ap.close())
    return {k: v.summary() for k, v in results.items()}


def sequential(loop: asyncio.AbstractEventLoop, target: peers.Target, s: Settings) -> dict[str, Any]:
    sync = peers.sync_query_peers(target)
    asyn = loop.run_until_complete(peers.async_query_peers(target))
    want = sync[0].call()
    results = compare_interleaved(loop, sync, asyn, want, s.seq_warmup, s.seq_calls, s.seq_rounds)
    return {"sync": [p.name for p in sync], "async": [p.name for p in asyn], "results": results}


def throughput(loop: asyncio.AbstractEventLoop, target: peers.Target, s: Settings) -> dict[str, Any]:
    sync = peers.sync_query_peers(target)
    asyn = loop.run_until_complete(peers.async_query_peers(target))
    # Warm-up opens the connections the timed rounds will reuse.
    for ap in asyn:
        loop.run_until_complete(measure.burst_async(ap.call, 2 * s.inflight, s.inflight, None))
    for p in sync:
        measure.burst_threads(p.call, 2 * s.inflight, s.inflight, None)
    results = {p.name: Samples() for p in asyn + sync}
    everyone: list = [("async", p) for p in asyn] + [("threads", p) for p in sync]
    for r in range(s.tp_rounds):
        for kind, p in rotate(everyone, r):
            if kind == "async":
                loop.run_until_complete(measure.burst_async(p.call, s.tp_calls, s.inflight, results[p.name],
                                                            max_seconds=s.tp_max_seconds))
            else:
                measure.burst_threads(p.call, s.tp_calls, s.inflight, results[p.name], max_seconds=s.tp_max_seconds)
    for p in sync:
        p.close()
    for ap in asyn:
        loop.run_until_complete(ap.close())
    return {"async": [p.name for p in asyn], "threads": [p.name for p in sync], "inflight": s.inflight,
            "results": {k: v.summary() for k, v in results.items()}}


def embeddings_e2e(loop: asyncio.AbstractEventLoop, target: peers.Target, window: np.ndarray,
                   s: Settings) -> dict[str, Any]:
    sync = peers.sync_embed_peers(target, window)
    asyn = loop.run_until_complete(peers.async_embed_peers(target, window))
    want = sync[0].call()
    if want.shape != (window.shape[0], 768) or want.dtype != np.float32:
        raise SystemExit(f"sensorium embed returned {want.shape} {want.dtype}, expected ({window.shape[0]}, 768) float32")
    results = compare_interleaved(loop, sync, asyn, want, s.embed_warmup, s.embed_calls, s.embed_rounds)
    return {"sync": [p.name for p in sync], "async": [p.name for p in asyn], "window": list(window.shape),
            "window_dtype": str(window.dtype), "results": results}


def micro(variants: dict[str, Any], s: Settings) -> dict[str, Any]:
    results = {name: Samples() for name in variants}
    for fn in variants.values():
        measure.time_sync(fn, max(3, s.micro_calls // 20), Samples())
    per_round = s.micro_calls // s.micro_rounds
    names = list(variants)
    for r in range(s.micro_rounds):
        for name in rotate(names, r):
            measure.time_sync(variants[name], per_round, results[name])
    return {k: v.summary() for k, v in results.items()}


def embeddings_parse(target: peers.Target, window: np.ndarray, s: Settings) -> dict[str, Any]:
    """The parse step alone, on one response body fetched from the server."""
    import httpx
    import orjson

    raw = httpx.post(target.query_url, content=peers.body_orjson(window),
                     headers={**target.auth, "Content-Type": "application/json"}).raise_for_status().content
    doc = orjson.loads(raw)
    nested = doc["response"]["response"]
    want = peers.parse_json(raw)
    check_same("orjson parse", peers.parse_orjson(raw), want)
    variants = {
        "json.loads + np.asarray(float32)": lambda: peers.parse_json(raw),
        "orjson.loads + np.asarray(float32)": lambda: peers.parse_orjson(raw),
        "  stage: json.loads only": lambda: json.loads(raw),
        "  stage: orjson.loads only": lambda: orjson.loads(raw),
        "  stage: np.asarray(list of lists, float32) only": lambda: np.asarray(nested, dtype=np.float32),
    }
    return {"body_bytes": len(raw), "results": micro(variants, s)}


def request_body(s: Settings) -> dict[str, Any]:
    import orjson

    from sensorium import events

    window = np.random.default_rng(5).standard_normal((8, 2048))  # float64, C order
    def with_contents(contents: Any) -> dict:
        return {"type": peers.NUMERIC, "event_data": {"contents": contents}}

    variants = {
        "sensorium events.numeric": lambda: events.numeric(window),
        ".tolist() + json.dumps": lambda: json.dumps(with_contents(window.tolist())).encode(),
        "orjson.dumps(OPT_SERIALIZE_NUMPY)": lambda: orjson.dumps(with_contents(window),
                                                                 option=orjson.OPT_SERIALIZE_NUMPY),
        "  also: .tolist() + orjson.dumps": lambda: orjson.dumps(with_contents(window.tolist())),
        "  stage: .tolist() only": lambda: window.tolist(),
    }
    # Same numbers out of every variant (float64 written shortest-round-trip by all three).
    ours = events.numeric(window).to_dict()
    check_same("events.numeric contents", np.asarray(ours["event_data"]["contents"]), window)
    check_same("json body", np.asarray(json.loads(variants[".tolist() + json.dumps"]())["event_data"]["contents"]),
               window)
    check_same("orjson body", np.asarray(orjson.loads(variants["orjson.dumps(OPT_SERIALIZE_NUMPY)"]())
                                         ["event_data"]["contents"]), window)
    sizes = {
        ".tolist() + json.dumps": len(variants[".tolist() + json.dumps"]()),
        "orjson.dumps(OPT_SERIALIZE_NUMPY)": len(variants["orjson.dumps(OPT_SERIALIZE_NUMPY)"]()),
        "sensorium events.numeric": len(json.dumps(ours, separators=(",", ":"))),
    }
    return {"window": [8, 2048], "window_dtype": "float64", "body_bytes": sizes, "results": micro(variants, s)}


# ---------------------------------------------------------------------------------------------
# Report


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def add(goal: str, ours: str, theirs: str, section: str, key: str, target: float | None, at_most: bool) -> None:
        res = report.get(section, {}).get("results", {})
        if ours not in res or theirs not in res:
            return
        a, b = res[ours][key], res[theirs][key]
        ratio = a / b if b else float("nan")
        # Rounds are interleaved, so each round's pair ran under the same machine conditions: the
        # spread of per-round ratios shows how much the machine's noise moves the answer.
        per_round_key = {"median_us": "round_medians_us", "rate_per_s": "rates_per_s",
                         "cpu_us_per_call": "round_cpu_us_per_call"}.get(key)
        rounds: list[float] = []
        if per_round_key:
            ra, rb = res[ours].get(per_round_key) or [], res[theirs].get(per_round_key) or []
            rounds = [x / y for x, y in zip(ra, rb) if y]
        spread = (min(rounds), max(rounds)) if len(rounds) > 1 else None
        if target is None:  # context for the goals, not a goal
            out.append({"goal": goal, "ours": ours, "theirs": theirs, "metric": key, "ratio": ratio,
                        "target": None, "met": None, "round_ratios": rounds, "spread": spread})
            return
        met = ratio <= target if at_most else ratio >= target
        out.append({"goal": goal, "ours": ours, "theirs": theirs, "metric": key, "ratio": ratio,
                    "target": f"{'<=' if at_most else '>='} {target:g}x", "met": bool(met),
                    "round_ratios": rounds, "spread": spread})

    add("sequential latency <= 0.4x httpx's", "sensorium.Client", "httpx.Client", "sequential", "median_us", 0.4, True)
    add("sequential latency no worse than pyreqwest's", "sensorium.Client", "pyreqwest.SyncClient", "sequential",
        "median_us", 1.0, True)
    add("throughput at 64 in flight >= 2x aiohttp's", "sensorium.AsyncClient", "aiohttp", "throughput",
        "rate_per_s", 2.0, False)
    # Issue 9 restated this goal as client CPU: end to end, half the time is the emulator's own
    # stand-in encoder, which no client can shorten.
    add("embed() client CPU per call <= 0.5x aiohttp+orjson's", "sensorium.AsyncClient.embed", "aiohttp + orjson",
        "embeddings_e2e", "cpu_us_per_call", 0.5, True)
    # The blocking client runs its request on the calling thread (one context switch per call
    # where the asyncio clients take one to three), so it gets its own row.
    add("embed() client CPU per call <= 0.5x aiohttp+orjson's, blocking client", "sensorium.Client.embed",
        "aiohttp + orjson", "embeddings_e2e", "cpu_us_per_call", 0.5, True)
    add("(context) async sequential latency vs httpx.AsyncClient", "sensorium.AsyncClient", "httpx.AsyncClient",
        "sequential", "median_us", None, True)
    add("(context) async sequential latency vs pyreqwest async", "sensorium.AsyncClient", "pyreqwest.Client",
        "sequential", "median_us", None, True)
    add("(context) client CPU per call at 64 in flight vs aiohttp", "sensorium.AsyncClient", "aiohttp",
        "throughput", "cpu_us_per_call", None, True)
    add("(context) throughput, 64 threads, vs aiohttp", "sensorium.Client", "aiohttp", "throughput",
        "rate_per_s", None, False)
    add("(context) embeddings end to end vs aiohttp+orjson", "sensorium.AsyncClient.embed",
        "aiohttp + orjson", "embeddings_e2e", "median_us", None, True)
    add("(context) embeddings end to end, blocking client, vs aiohttp+orjson", "sensorium.Client.embed",
        "aiohttp + orjson", "embeddings_e2e", "median_us", None, True)
    return out


def fmt_us(v: float | None) -> str:
    if v is None or v != v:
        return "n/a"
    return f"{v / 1000:.2f} ms" if v >= 10_000 else f"{v:.0f} µs"


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [f"## sensorium benchmarks, {env['date_utc']}", ""]
    v = env["versions"]
    lines.append(
        f"Machine: {env['cores']} cores ({env['cpu']}), Python {env['python']}. Server: **{env['server']}** "
        f"(own process, 127.0.0.1). sensorium {v.get('sensorium')} **{env['sensorium_build']} build**; "
        + ", ".join(f"{k} {v[k]}" for k in PEER_PACKAGES[1:] if v.get(k))
        + f". Mode: {'--quick' if report['settings']['quick'] else 'full'}."
    )
    if env["server"] != "emulator":
        lines += ["", "**Ran against the stand-in server (benchmarks/standin.py), not the emulator.**"]
    if env["sensorium_build"] == "debug":
        lines += ["", "**sensorium is a debug build (`maturin develop` without `--release`): its numbers are not "
                  "representative. Rebuild with `.venv/bin/maturin develop --release`.**"]
    lines.append("")

    g = report.get("goals", [])
    if g:
        lines += ["### Goals (ratios within this run)", "", "| goal | measured | per-round range | target | |",
                  "|---|---|---|---|---|"]
        for row in g:
            verdict = "" if row["met"] is None else ("met" if row["met"] else "**missed**")
            spread = f"{row['spread'][0]:.2f}–{row['spread'][1]:.2f}x" if row.get("spread") else ""
            lines.append(f"| {row['goal']} ({row['ours']} vs {row['theirs']}, {row['metric']}) | "
                         f"{row['ratio']:.2f}x | {spread} | {row['target'] or ''} | {verdict} |")
        lines.append("")

    def latency_table(section: str, title: str, ref_sync: str, ref_async: str) -> None:
        sec = report.get(section)
        if not sec:
            return
        res = sec["results"]
        lines.extend([title, "", "| client | median | p99 | client CPU per call | server CPU per call | "
                      "context switches per call | median vs sensorium |", "|---|---|---|---|---|---|---|"])
        for group, ref in (("sync", ref_sync), ("async", ref_async)):
            for name in sec[group]:
                r = res[name]
                rel = r["median_us"] / res[ref]["median_us"]
                lines.append(f"| {name} | {fmt_us(r['median_us'])} | {fmt_us(r['p99_us'])} | "
                             f"{fmt_us(r['cpu_us_per_call'])} | {fmt_us(r['server_cpu_us_per_call'])} | "
                             f"{r['switches_per_call']:.1f} | {rel:.2f}x |")
        lines.append("")

    s = report["settings"]
    latency_table("sequential", f"### 1. Sequential reasoner query ({s['seq_calls']} calls per client after "
                  f"{s['seq_warmup']} warm-up, {s['seq_rounds']} interleaved rounds; one pooled client each)",
                  "sensorium.Client", "sensorium.AsyncClient")

    tp = report.get("throughput")
    if tp:
        res = tp["results"]
        lines += [f"### 2. Throughput, {tp['inflight']} reasoner queries in flight (up to {s['tp_calls']} calls or "
                  f"{s['tp_max_seconds']:g} s per round, {s['tp_rounds']} round(s), median round shown)", "",
                  "| client | concurrency | queries/s | sensorium's rate ÷ this | latency median | p99 | "
                  "client CPU per call | context switches per call | errors |", "|---|---|---|---|---|---|---|---|---|"]
        for group, ref, how in (("async", "sensorium.AsyncClient", "asyncio, 64 tasks"),
                                ("threads", "sensorium.Client", "64 threads")):
            for name in tp[group]:
                r = res[name]
                lines.append(f"| {name} | {how} | {r['rate_per_s']:.0f} | "
                             f"{res[ref]['rate_per_s'] / r['rate_per_s']:.2f}x | {fmt_us(r['median_us'])} | "
                             f"{fmt_us(r['p99_us'])} | {fmt_us(r['cpu_us_per_call'])} | {r['switches_per_call']:.1f} | "
                             f"{r['errors']} |")
        lines.append("")

    e2e = report.get("embeddings_e2e")
    if e2e:
        shape = "×".join(map(str, e2e["window"]))
        latency_table("embeddings_e2e", f"### 4a. Embeddings end to end: a ({shape}) {e2e['window_dtype']} window "
                      f"in, an (8, 768) float32 array out ({s['embed_calls']} sequential calls per client)",
                      "sensorium.Client.embed", "sensorium.AsyncClient.embed")

    for key, title in (("embeddings_parse", "### 4b. Parse step alone: the same (8, 768) response body "
                        "(bytes → float32 array)"),
                       ("request_body", "### 5. Request body: an (8, 2048) float64 window → serialised "
                        "data.numeric_array event")):
        sec = report.get(key)
        if not sec:
            continue
        res = sec["results"]
        extra = f" ({sec['body_bytes']} bytes)" if isinstance(sec.get("body_bytes"), int) else ""
        lines += [title + extra, "", "| variant | median | p99 |", "|---|---|---|"]
        for name, r in res.items():
            lines.append(f"| {name} | {fmt_us(r['median_us'])} | {fmt_us(r['p99_us'])} |")
        if key == "embeddings_parse":
            lines.append("| sensorium | n/a: parsed inside `embed` (Rust), no public parse-only entry point "
                         "| |")
        lines.append("")

    noise = report.get("noise", {})
    if noise:
        lines += ["Machine load during each section (cores busy; 'other' = processes besides the client and "
                  "server): " + "; ".join(
                      f"{k}: client {v.get('client_cores', 0):.2f}, server {v.get('server_cores') or 0:.2f}, "
                      f"other {v.get('other_cores', float('nan')):.2f}" for k, v in noise.items()), ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


SECTIONS = ["sequential", "throughput", "embeddings_e2e", "embeddings_parse", "request_body"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (under a minute)")
    parser.add_argument("--server", choices=["auto", "emulator", "standin"], default="auto",
                        help="emulator (default when installed) or the stand-in in benchmarks/standin.py")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--embed-window", type=int, default=1024,
                        help="points per channel of the (8, N) float64 window sent in 4a (default 1024)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where the JSON goes")
    parser.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                        help="first wait up to SECONDS for the machine's other processes to go quiet (< 0.3 cores)")
    args = parser.parse_args()
    s = Settings(args.quick)
    sections = args.only or SECTIONS
    started = time.perf_counter()

    quiet = None
    if args.wait_quiet > 0:
        print(f"waiting up to {args.wait_quiet:.0f}s for a quiet machine ...", file=sys.stderr, flush=True)
        quiet = measure.wait_for_quiet(args.wait_quiet)
    server = servers.start(args.server)
    try:
        import sensorium

        probe = sensorium.Client(api_key=server.api_key, base_url=server.base_url, max_retries=0)
        target = peers.Target(server.base_url, probe.base_url + "/query", server.api_key)
        probe.close()
        report: dict[str, Any] = {"environment": environment(server), "settings": vars(s), "noise": {},
                                  "load_before_start_cores": quiet}
        noise = measure.NoiseMeter(server.cpu_seconds)
        measure.SERVER_CPU = server.cpu_seconds
        loop = asyncio.new_event_loop()
        window = np.random.default_rng(4).standard_normal((8, args.embed_window))
        for name in sections:
            print(f"[{time.perf_counter() - started:6.1f}s] {name} ...", file=sys.stderr, flush=True)
            mark = noise.start()
            if name == "sequential":
                report[name] = sequential(loop, target, s)
            elif name == "throughput":
                report[name] = throughput(loop, target, s)
            elif name == "embeddings_e2e":
                report[name] = embeddings_e2e(loop, target, window, s)
            elif name == "embeddings_parse":
                report[name] = embeddings_parse(target, window, s)
            elif name == "request_body":
                report[name] = request_body(s)
            report["noise"][name] = noise.stop(mark)
            gc.collect()
        loop.close()
    finally:
        server.stop()
    report["environment"]["loadavg_end"] = os.getloadavg()
    report["environment"]["sensorium_build_end"] = build_profile()
    report["goals"] = goals(report)
    report["total_seconds"] = time.perf_counter() - started
    measure.write_report(report, markdown(report), args.out, "", s.quick)


if __name__ == "__main__":
    main()
