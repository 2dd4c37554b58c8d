"""Where a client's CPU goes, measured: each case runs one client in a loop in a process of its
own under `perf record -e cpu-clock` (a software clock, so it works where hardware counters are
not exposed), against the same server run.py uses, and the samples are grouped by library
(Python interpreter, the client's Rust crates, libc, the kernel...). Each group's share times the
case's measured CPU per call gives microseconds per call.

    .venv/bin/python benchmarks/profile_cpu.py                       # every case
    .venv/bin/python benchmarks/profile_cpu.py --cases seq-sensorium seq-pyreqwest

Needs `perf` (Debian's linux-perf). Without it, the cases still run and report CPU per call.
Also runs a few stage timings that need no profiler (see `stages`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
import servers  # noqa: E402

# case -> (what it is, how it runs, which peer list, peer name)
CASES: dict[str, tuple[str, str, str, str]] = {
    "seq-sensorium": ("sensorium.Client.query, sequential", "sync", "sync_query", "sensorium.Client"),
    "seq-pyreqwest": ("pyreqwest.SyncClient, sequential", "sync", "sync_query", "pyreqwest.SyncClient"),
    "seq-httpx": ("httpx.Client, sequential", "sync", "sync_query", "httpx.Client"),
    "aseq-sensorium": ("sensorium.AsyncClient.query, sequential", "async", "async_query", "sensorium.AsyncClient"),
    "aseq-aiohttp": ("aiohttp, sequential", "async", "async_query", "aiohttp"),
    "aseq-pyreqwest": ("pyreqwest.Client, sequential", "async", "async_query", "pyreqwest.Client"),
    "tp-sensorium": ("sensorium.AsyncClient.query, 64 in flight", "burst", "async_query", "sensorium.AsyncClient"),
    "tp-aiohttp": ("aiohttp, 64 in flight", "burst", "async_query", "aiohttp"),
    "tp-pyreqwest": ("pyreqwest.Client, 64 in flight", "burst", "async_query", "pyreqwest.Client"),
    "embed-sensorium": ("sensorium.AsyncClient.embed, sequential", "async", "async_embed",
                        "sensorium.AsyncClient.embed"),
    "embed-aiohttp-orjson": ("aiohttp + orjson embeddings, sequential", "async", "async_embed", "aiohttp + orjson"),
}


# ---------------------------------------------------------------------------------------------
# Worker: one case, in its own process.


def _pick(case: str, target: peers.Target, loop: asyncio.AbstractEventLoop, window: np.ndarray) -> tuple[str, Any]:
    _, how, family, name = CASES[case]
    if family == "sync_query":
        candidates: list = peers.sync_query_peers(target)
    elif family == "async_query":
        candidates = loop.run_until_complete(peers.async_query_peers(target))
    else:
        candidates = loop.run_until_complete(peers.async_embed_peers(target, window))
    for p in candidates:  # close the ones this case does not use
        if p.name != name:
            closed = p.close()
            if asyncio.iscoroutine(closed):
                loop.run_until_complete(closed)
    return how, next(p for p in candidates if p.name == name)


def worker(case: str, base_url: str, query_url: str, api_key: str, seconds: float) -> None:
    import measure

    target = peers.Target(base_url, query_url, api_key)
    loop = asyncio.new_event_loop()
    window = np.random.default_rng(4).standard_normal((8, 1024))
    how, peer = _pick(case, target, loop, window)
    samples = measure.Samples()
    block = 20 if "embed" in case else 200

    def one_block(into: measure.Samples | None) -> None:
        if how == "sync":
            measure.time_sync(peer.call, block, into or measure.Samples(), collect=False)
        elif how == "async":
            loop.run_until_complete(measure.time_async(peer.call, block, into or measure.Samples(), collect=False))
        else:
            loop.run_until_complete(measure.burst_async(peer.call, 640, 64, into, collect=False))

    for _ in range(3):
        one_block(None)  # warm-up; the profiler attaches after it, so imports and set-up are not sampled
    print("READY", flush=True)
    sys.stdin.readline()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        one_block(samples)
    print(json.dumps(samples.summary()), flush=True)
    closed = peer.close()
    if asyncio.iscoroutine(closed):
        loop.run_until_complete(closed)


# ---------------------------------------------------------------------------------------------
# Grouping perf samples.

_GROUPS: list[tuple[str, Callable[[str, str], bool]]] = [
    ("kernel", lambda dso, sym: dso.startswith("[kernel") or sym.startswith("[k]")),
    ("python interpreter", lambda dso, sym: "libpython" in dso or dso.startswith("python")),
    ("numpy", lambda dso, sym: "numpy" in dso),
    ("orjson", lambda dso, sym: "orjson" in dso),
    ("aiohttp/yarl/multidict (C)", lambda dso, sym: any(k in dso for k in ("aiohttp", "yarl", "multidict",
                                                                         "propcache", "frozenlist"))),
    ("libc (malloc, memcpy, futex wrappers...)", lambda dso, sym: "libc" in dso or "ld-linux" in dso),
]

_RUST_CRATES = ["tokio", "hyper_util", "hyper", "reqwest", "h2", "http_body_util", "http", "serde_json", "serde",
                "pyo3_async_runtimes", "pyo3_log", "pyo3", "numpy", "ndarray", "bytes", "futures_util",
                "futures_channel", "parking_lot", "ryu", "_core", "sensorium", "pyreqwest", "_pyreqwest", "core",
                "alloc", "std", "crossbeam", "mio", "socket2", "tracing", "url", "idna", "want", "httparse"]


def _rust_group(dso: str, sym: str) -> str | None:
    if not (dso.endswith(".so") and ("_core" in dso or "pyreqwest" in dso)):
        return None
    lib = "sensorium _core.so" if "_core" in dso else "pyreqwest .so"
    s = sym.lstrip("<").replace("_<", "")
    s = re.sub(r"^(_ZN|_R)", "", s)
    for crate in _RUST_CRATES:
        if s.startswith(crate + "::") or re.match(rf"^{crate}\b", s) or f" {crate}::" in s[:60]:
            return f"{lib}: {crate}"
    return f"{lib}: other"


def group_of(dso: str, sym: str) -> str:
    rust = _rust_group(dso, sym)
    if rust:
        return rust
    for name, test in _GROUPS:
        if test(dso, sym):
            return name
    return f"other ({dso})"


def perf_groups(data: Path) -> tuple[dict[str, float], list[tuple[float, str, str]]]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso,sym", "--percent-limit",
         "0", "-F", "overhead,dso,sym"],
        capture_output=True, text=True, check=False,
    ).stdout
    groups: dict[str, float] = collections.defaultdict(float)
    top: list[tuple[float, str, str]] = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[([.k])\]\s+(.*)$", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if kind == "k":
            dso = "[kernel]"
        groups[group_of(dso, sym)] += pct
        top.append((pct, dso, sym))
    top.sort(reverse=True)
    return dict(sorted(groups.items(), key=lambda kv: -kv[1])), top[:25]


def _crate(sym: str, dso: str) -> str:
    s = sym.lstrip("<&*").replace("mut ", "").replace("dyn ", "")
    head = re.split(r"::|<| as ", s, maxsplit=1)[0]
    if "::" in s and head:
        return head
    name = Path(dso).name
    return "kernel" if dso.startswith("[k") else (name.split(".")[0] or name)


def _short(sym: str) -> str:
    """`<core::str::lossy::Utf8Chunks as Iterator>::next` -> `Utf8Chunks::next`; drops generics."""
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    m = re.match(r"^<([^ ]+) as [^>]+>::(.*)$", sym)
    if m:
        sym = f"{m.group(1)}::{m.group(2)}"
    while re.search(r"<[^<>]*>", sym):
        sym = re.sub(r"<[^<>]*>", "", sym)
    return "::".join(sym.split("::")[-2:])[:60]


_ANCHORS = ("_core::", "pyo3_async_runtimes::", "pyo3::", "tokio::", "reqwest::", "hyper::", "hyper_util::",
            "serde_json::", "numpy::")


def callgraph_groups(data: Path) -> list[tuple[float, str]]:
    """Each sample attributed to (its thread, the innermost frame of sensorium or of the Rust crates it
    builds on, the leaf frame's crate or library): a measured answer to 'which code spends this time,
    and in what'. Needs a `--call-graph dwarf` recording."""
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym,dso"], capture_output=True,
                         text=True, check=False).stdout
    counts: collections.Counter = collections.Counter()
    total = 0
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        comm = lines[0].split()[0] if not re.match(r"\s*[0-9a-f]+\s", lines[0]) else "?"
        frames = []
        for line in lines:
            m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
            if m:
                frames.append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), m.group(2)))
        if not frames:
            continue
        total += 1
        leaf_sym, leaf_dso = frames[0]
        anchor = next((sym for sym, _ in frames
                       if sym.lstrip("<").startswith(_ANCHORS) and "trampoline" not in sym), None)
        ours = next((sym for sym, _ in frames if sym.lstrip("<").startswith("_core::") and "trampoline" not in sym),
                    None)
        owner = _short(anchor) if anchor else "(no Rust frame)"
        if ours and ours != anchor:
            owner = f"{_short(ours)} ▸ {owner}"
        leaf = _crate(leaf_sym, leaf_dso if leaf_dso != "inlined" else "")
        if leaf in ("core", "alloc", "std", "libc", "kernel", ""):
            leaf = f"{leaf or 'unknown'}: {_short(leaf_sym)}"
        thread = "python thread" if comm.startswith("python") else "I/O threads"
        counts[(thread, owner, leaf)] += 1
    return [(100.0 * n / total, f"[{t}] {o} → {lf}") for (t, o, lf), n in counts.most_common(25)]


def strace_counts(path: Path) -> dict[str, int]:
    """Parses `strace -c` output: syscall -> calls."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] not in ("total",):
            try:
                counts[parts[-1]] = int(parts[3])
            except ValueError:
                continue
    return counts


def run_case(case: str, server: servers.Server, target: peers.Target, seconds: float, use_perf: bool,
             tool: str = "perf") -> dict:
    cmd = [sys.executable, str(Path(__file__)), "--worker", case, server.base_url, target.query_url,
           server.api_key, str(seconds)]
    tmp = Path(tempfile.mkdtemp(prefix="sensorium-prof-"))
    data = tmp / "perf.data"
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    ready = proc.stdout.readline()
    if ready.strip() != "READY":
        proc.kill()
        raise SystemExit(f"case {case} failed to start: {ready}")
    recorder = None
    if tool == "strace":
        recorder = subprocess.Popen(["strace", "-f", "-c", "-o", str(tmp / "strace.txt"), "-p", str(proc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    elif use_perf:
        graph = ["-F", "999", "--call-graph", "dwarf,16384"] if tool == "callgraph" else ["-F", "4999"]
        recorder = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", *graph, "-o", str(data),
                                     "-p", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    proc.wait(timeout=60)
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)
    if not line.startswith("{"):
        raise SystemExit(f"case {case} failed: {line}")
    result: dict[str, Any] = {"case": case, "what": CASES[case][0], "summary": json.loads(line)}
    if tool == "strace" and (tmp / "strace.txt").exists():
        calls = result["summary"]["calls"]
        counts = strace_counts(tmp / "strace.txt")
        result["syscalls_per_call"] = {k: v / calls for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
    if tool == "callgraph" and use_perf and data.exists():
        result["callgraph_pct"] = callgraph_groups(data)
    if tool == "perf" and use_perf and data.exists():
        groups, top = perf_groups(data)
        result["groups_pct"] = groups
        result["top_symbols"] = top
    shutil.rmtree(tmp, ignore_errors=True)
    return result


# ---------------------------------------------------------------------------------------------
# Stage timings: no profiler, just the public API taken apart.


def stages(server: servers.Server, target: peers.Target, n: int) -> dict[str, dict]:
    import measure

    import sensorium

    out = {}
    client = sensorium.Client(api_key=server.api_key, base_url=server.base_url, max_retries=0)
    core = client._core

    def rows(variants: dict[str, Callable[[], Any]]) -> dict[str, dict]:
        res = {k: measure.Samples() for k in variants}
        for fn in variants.values():
            measure.time_sync(fn, 100, measure.Samples())
        for r in range(4):
            for k in list(variants)[r % len(variants):] + list(variants)[: r % len(variants)]:
                measure.time_sync(variants[k], n // 4, res[k])
        return {k: v.summary() for k, v in res.items()}

    out["query"] = rows({
        "Client.query (public)": lambda: client.query(peers.REASONER, peers.PROMPT).text,
        "_core.query (no Python wrapper)": lambda: core.query(peers.REASONER, peers.PROMPT, {}, False).text,
    })
    window = np.random.default_rng(4).standard_normal((8, 1024))
    small = window[:, :16].copy()
    out["embed"] = rows({
        "Client.embed, (8, 1024) float64 window": lambda: client.embed(peers.ENCODER, window).vectors,
        "Client.embed, (8, 16) window (same (8, 768) response; small request)":
            lambda: client.embed(peers.ENCODER, small).vectors,
        "events.numeric((8, 1024) window) alone: serialisation, no I/O": lambda: sensorium.events.numeric(window),
    })
    client.close()
    return out


def markdown(results: list[dict], stage_results: dict | None) -> str:
    lines = []
    for r in results:
        s = r["summary"]
        cpu = s["cpu_us_per_call"]
        lines += [f"#### {r['what']} ({r['case']}): {cpu:.0f} µs client CPU per call, median wall "
                  f"{s['median_us']:.0f} µs", ""]
        if "groups_pct" in r:
            lines += ["| where | share of CPU samples | µs per call |", "|---|---|---|"]
            for g, pct in r["groups_pct"].items():
                if pct >= 0.5:
                    lines.append(f"| {g} | {pct:.1f}% | {pct * cpu / 100:.1f} |")
            lines += ["", "Top symbols: " + "; ".join(f"{p:.1f}% {sym[:70]} ({Path(dso).name})"
                                                       for p, dso, sym in r["top_symbols"][:8]), ""]
        if "callgraph_pct" in r:
            lines += ["| [thread] innermost sensorium function ▸ innermost Rust frame (pyo3, tokio, reqwest, serde_json...) → leaf | share of CPU "
                      "samples | µs per call |",
                      "|---|---|---|"]
            for pct, key in r["callgraph_pct"]:
                if pct >= 1.0:
                    lines.append(f"| `{key}` | {pct:.1f}% | {pct * cpu / 100:.0f} |")
            lines.append("")
        if "syscalls_per_call" in r:
            lines += ["System calls per call (strace -f -c): " + ", ".join(
                f"{k} {v:.2f}" for k, v in r["syscalls_per_call"].items() if v >= 0.05), ""]
    if stage_results:
        for name, rows in stage_results.items():
            lines += [f"#### Stages: {name}", "", "| variant | median | client CPU per call | server CPU per call |",
                      "|---|---|---|---|"]
            for k, v in rows.items():
                lines.append(f"| {k} | {v['median_us']:.0f} µs | {v['cpu_us_per_call']:.0f} µs | "
                             f"{v['server_cpu_us_per_call']:.0f} µs |")
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per case")
    parser.add_argument("--server", choices=["auto", "emulator", "standin"], default="auto")
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--tool", choices=["perf", "callgraph", "strace"], default="perf",
                        help="perf: flat profile by library; callgraph: perf with DWARF call graphs, grouped by "
                             "the innermost sensorium function; strace: system calls per call")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    use_perf = shutil.which("perf") is not None
    if not use_perf:
        print("perf not found: reporting CPU per call only", file=sys.stderr)
    server = servers.start(args.server)
    try:
        import sensorium

        probe = sensorium.Client(api_key=server.api_key, base_url=server.base_url)
        target = peers.Target(server.base_url, probe.base_url + "/query", server.api_key)
        import measure

        measure.SERVER_CPU = server.cpu_seconds
        results = []
        for case in args.cases:
            print(f"profiling {case} ...", file=sys.stderr, flush=True)
            results.append(run_case(case, server, target, args.seconds, use_perf, args.tool))
        stage_results = None if args.no_stages else stages(server, target, 2000)
    finally:
        server.stop()
    text = markdown(results, stage_results)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (args.out / f"profile-{stamp}.json").write_text(json.dumps(
        {"server": server.kind, "cases": results, "stages": stage_results, "markdown": text}, indent=1))


if __name__ == "__main__":
    main()
