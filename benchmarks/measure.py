"""Timing loops and statistics. Every loop records per-call wall time (perf_counter_ns) and the
client process's CPU time (time.process_time: all of this process's threads, so a Rust client's
I/O threads count too; the server runs in another process and does not)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import resource
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np


@dataclass
class Samples:
    """Per-call wall times (ns) and the CPU seconds spent producing them, over all rounds."""

    wall_ns: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    calls: int = 0
    errors: int = 0
    elapsed_s: float = 0.0  # wall time of the timed blocks (for throughput)
    rates: list[float] = field(default_factory=list)  # per-round calls/s (throughput)
    switches: int = 0  # context switches of this process (all threads) during the timed blocks
    server_cpu_s: float = 0.0  # CPU the server process used during the timed blocks (not the client's)
    round_medians_us: list[float] = field(default_factory=list)  # one per timed block (round)
    round_cpu_us: list[float] = field(default_factory=list)  # CPU per call, one per timed block (round)

    def summary(self) -> dict[str, Any]:
        w = np.asarray(self.wall_ns, dtype=np.float64) / 1e3 if self.wall_ns else np.asarray([np.nan])
        return {
            "calls": self.calls,
            "errors": self.errors,
            "median_us": float(np.median(w)),
            "p99_us": float(np.percentile(w, 99)),
            "mean_us": float(np.mean(w)),
            "cpu_us_per_call": 1e6 * self.cpu_s / self.calls if self.calls else float("nan"),
            "switches_per_call": self.switches / self.calls if self.calls else float("nan"),
            "server_cpu_us_per_call": 1e6 * self.server_cpu_s / self.calls if self.calls else float("nan"),
            "rate_per_s": float(np.median(self.rates)) if self.rates else None,
            "rates_per_s": self.rates,
            "round_medians_us": self.round_medians_us,
            "round_cpu_us_per_call": self.round_cpu_us,
        }


# Set by run.py to a function returning the server process's CPU seconds so far.
SERVER_CPU: Callable[[], float | None] = lambda: None


def _server_cpu() -> float:
    return SERVER_CPU() or 0.0


def _switches() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw + ru.ru_nivcsw


def _close_round(into: Samples, n: int, cpu_s: float, switches: int, server_cpu_s: float) -> None:
    """Adds one timed block of `n` sequential calls (its wall times already in `into.wall_ns`)."""
    into.cpu_s += cpu_s
    into.switches += switches
    into.server_cpu_s += server_cpu_s
    into.calls += n
    into.round_medians_us.append(float(np.median(into.wall_ns[-n:])) / 1e3)
    into.round_cpu_us.append(1e6 * cpu_s / n if n else float("nan"))


def time_sync(fn: Callable[[], Any], n: int, into: Samples, collect: bool = True) -> None:
    if collect:
        gc.collect()  # outside the timed region: start each block with the same heap
    wall = into.wall_ns
    clock = time.perf_counter_ns
    srv0, sw0, cpu0 = _server_cpu(), _switches(), time.process_time()
    for _ in range(n):
        t0 = clock()
        fn()
        wall.append(clock() - t0)
    _close_round(into, n, time.process_time() - cpu0, _switches() - sw0, _server_cpu() - srv0)


async def time_async(fn: Callable[[], Awaitable[Any]], n: int, into: Samples, collect: bool = True) -> None:
    if collect:
        gc.collect()
    wall = into.wall_ns
    clock = time.perf_counter_ns
    srv0, sw0, cpu0 = _server_cpu(), _switches(), time.process_time()
    for _ in range(n):
        t0 = clock()
        await fn()
        wall.append(clock() - t0)
    _close_round(into, n, time.process_time() - cpu0, _switches() - sw0, _server_cpu() - srv0)


async def burst_async(
    fn: Callable[[], Awaitable[Any]], total: int, inflight: int, into: Samples | None, collect: bool = True,
    max_seconds: float = float("inf"),
) -> None:
    """Up to `total` calls with `inflight` of them outstanding at any time (one asyncio task each).
    No call starts after `max_seconds`, so a slow client cannot stretch the run; the rate counts the
    calls that completed."""
    remaining = total
    done = 0
    wall: list[int] = []
    errors = 0
    clock = time.perf_counter_ns
    deadline = float("inf")

    async def worker() -> None:
        nonlocal remaining, errors, done
        while remaining > 0 and time.perf_counter() < deadline:
            remaining -= 1
            t0 = clock()
            try:
                await fn()
            except Exception:
                errors += 1
            wall.append(clock() - t0)
            done += 1

    if collect:
        gc.collect()
    srv0, sw0, cpu0, t0 = _server_cpu(), _switches(), time.process_time(), time.perf_counter()
    deadline = t0 + max_seconds
    await asyncio.gather(*(worker() for _ in range(inflight)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if into is not None:
        into.switches += _switches() - sw0
        into.server_cpu_s += _server_cpu() - srv0
        into.wall_ns += wall
        into.cpu_s += cpu
        into.calls += done
        into.errors += errors
        into.elapsed_s += elapsed
        into.rates.append(done / elapsed)


def burst_threads(
    fn: Callable[[], Any], total: int, threads: int, into: Samples | None, max_seconds: float = float("inf")
) -> None:
    """Up to `total` calls spread over `threads` OS threads that all start together; no call
    starts after `max_seconds`."""
    counter = itertools.count()
    done = itertools.count()  # next() on itertools.count is atomic under the GIL
    wall: list[int] = []
    errors = [0]
    clock = time.perf_counter_ns
    start = threading.Barrier(threads + 1)
    deadline = [float("inf")]

    def worker() -> None:
        start.wait()
        while next(counter) < total and time.perf_counter() < deadline[0]:
            t0 = clock()
            try:
                fn()
            except Exception:
                errors[0] += 1
            wall.append(clock() - t0)
            next(done)

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    gc.collect()
    srv0, sw0, cpu0, t0 = _server_cpu(), _switches(), time.process_time(), time.perf_counter()
    deadline[0] = t0 + max_seconds
    start.wait()
    for t in pool:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if into is not None:
        completed = next(done)
        into.switches += _switches() - sw0
        into.server_cpu_s += _server_cpu() - srv0
        into.wall_ns += wall
        into.cpu_s += cpu
        into.calls += completed
        into.errors += errors[0]
        into.elapsed_s += elapsed
        into.rates.append(completed / elapsed)


# ---------------------------------------------------------------------------------------------
# Machine noise: how busy the machine was with other work while a section ran.


def _busy_jiffies() -> int | None:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        values = [int(v) for v in fields]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values[:8]) - idle
    except (OSError, ValueError, IndexError):
        return None


def wait_for_quiet(max_seconds: float, threshold_cores: float = 0.3, window: float = 3.0) -> float:
    """Waits (up to `max_seconds`) for a `window` during which the machine's other processes use
    less than `threshold_cores`; returns the load of the last window, in cores."""
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + max_seconds
    while True:
        b0, t0 = _busy_jiffies(), time.perf_counter()
        time.sleep(window)
        b1, t1 = _busy_jiffies(), time.perf_counter()
        if b0 is None or b1 is None:
            return float("nan")
        load = (b1 - b0) / tick / (t1 - t0)
        if load < threshold_cores or time.monotonic() >= deadline:
            return load


class NoiseMeter:
    """Share of the machine (in cores) used by processes other than this one and the server."""

    def __init__(self, server_cpu: Callable[[], float | None]) -> None:
        self.server_cpu = server_cpu
        self.tick = os.sysconf("SC_CLK_TCK")

    def start(self) -> tuple[Any, ...]:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return (time.perf_counter(), _busy_jiffies(), ru.ru_utime + ru.ru_stime, self.server_cpu())

    def stop(self, started: tuple[Any, ...]) -> dict[str, float | None]:
        t0, busy0, self0, server0 = started
        ru = resource.getrusage(resource.RUSAGE_SELF)
        t1, busy1, self1, server1 = time.perf_counter(), _busy_jiffies(), ru.ru_utime + ru.ru_stime, self.server_cpu()
        wall = t1 - t0
        out: dict[str, float | None] = {"wall_s": wall, "client_cores": (self1 - self0) / wall}
        out["server_cores"] = (server1 - server0) / wall if server0 is not None and server1 is not None else None
        if busy0 is not None and busy1 is not None:
            total = (busy1 - busy0) / self.tick / wall
            out["machine_cores"] = total
            out["other_cores"] = max(0.0, total - out["client_cores"] - (out["server_cores"] or 0.0))
        return out


# ---------------------------------------------------------------------------------------------
# This process and the loaded extension.


def status_kb(field: str) -> int:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM, RssAnon, ...); -1 when absent."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def build_profile() -> str:
    """'debug' when the loaded sensorium._core carries DWARF debug info (maturin develop without
    --release), 'release' when it does not, 'unknown' when the file cannot be read as ELF."""
    try:
        import sensorium._core as core

        data = Path(core.__file__).read_bytes()
        if data[:4] != b"\x7fELF" or data[4] != 2:
            return "unknown"
        endian = "<" if data[5] == 1 else ">"
        shoff = struct.unpack_from(endian + "Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", data, 0x3A)
        strtab_off = struct.unpack_from(endian + "Q", data, shoff + shstrndx * shentsize + 0x18)[0]
        for i in range(shnum):
            name_off = struct.unpack_from(endian + "I", data, shoff + i * shentsize)[0]
            start = strtab_off + name_off
            name = data[start : data.index(b"\0", start)]
            if name == b".debug_info":
                return "debug"
        return "release"
    except Exception:
        return "unknown"


def write_report(report: dict[str, Any], text: str, out: Path, prefix: str, quick: bool) -> Path:
    """Prints the markdown table and keeps the raw numbers (with the table) as JSON in `out`."""
    import datetime as dt
    import json
    import sys

    print(text)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"{prefix}{stamp}{'-quick' if quick else ''}.json"
    report["markdown"] = text
    path.write_text(json.dumps(report, indent=1, default=str))
    print(f"\n(raw numbers: {path}; took {report['total_seconds']:.0f}s)", file=sys.stderr)
    return path
