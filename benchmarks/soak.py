"""Soak benchmark: does a long run of mixed calls, some of them meeting injected faults, leak
memory, file descriptors or surprise errors?

    .venv/bin/python benchmarks/soak.py             # 100,000 calls, about 30 s on 2 cores
    .venv/bin/python benchmarks/soak.py --quick     # 5,000 calls, a few seconds
    .venv/bin/python benchmarks/soak.py --write     # also keep the report in benchmarks/results/

Calls are a mix of reasoner queries, embeddings of a (4, 256) window, the first page of
`files.list()` and of `models.list()`, and a file cycle: `files.upload_base64` of a small file under a
unique name, `files.download` of it (content checked, local copy deleted) and `files.delete`. They go
to a `sensorium.testing` emulator that answers a small share of requests with a 503
(`Retry-After: 0`) or resets the connection. The emulator runs in a process of its own
(`python -m sensorium.emulator`, driven through its `/_emulator` control routes), so the RSS,
heap and CPU reported are the clients' alone; `--emulator in-process` runs it in this process as
earlier versions of this benchmark did. Half the calls come from a `sensorium.Client` shared by
32 threads, the other half from one `sensorium.AsyncClient` with 32 calls in flight.

Reported, against the goals of the issue:
- RSS growth (VmRSS) per phase, from just after its warm-up (the first 2 % of its calls, at least 10
  calls per thread or task) to its end, both after `gc.collect()`: goal under 5 MB; also the
  growth over the second half of the calls (from a reading half-way, every worker idle);
- open file descriptors before the first call and after both clients are closed: goal equal;
- errors other than the injected kinds (goal 0); a call that still fails after the client's
  retries with the kind of fault injected on its route counts as injected, not as unexpected.

RSS alone cannot tell a leak from memory glibc keeps after it is freed (each of 32 threads gets a
malloc arena, and freed chunks stay in it), so the report adds the heap in use (glibc's mallinfo2,
over all arenas: Rust's and C's allocations), Python's live blocks, RSS sampled at every tenth of a
phase (a plateau is not a leak) and, at the very end, RSS after malloc_trim(0). The time of a
phase includes the pause for its half-way reading.

The harness drains the emulator's request log twice a second, counting the faults it records (in
process, the log of up to 10,000 records with their bodies would otherwise grow the RSS by tens
of MB during the first 10,000 requests). A benchmark, not a test:
the exit status is 0 whatever the numbers, unless the harness itself fails.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import datetime as dt
import gc
import importlib.metadata
import itertools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Union

import numpy as np

import sensorium
from sensorium.errors import APIConnectionError, APITimeoutError, GatewayTimeoutError, InternalServerError
from sensorium.testing import Emulator, FaultActionName

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
ENCODER = "Encoder::encoder_embeddings_01"
RSS_GOAL_MB = 5.0
MAX_EXAMPLES = 5  # unexpected errors kept (and printed) in full; the rest are only counted

# One unit of work each; "file" is three calls (upload, download, delete). One round of this
# pattern is 7 calls, every kind of call once.
PATTERN = ["query", "embed", "list", "models", "file"]
CALLS_PER_UNIT = {"query": 1, "embed": 1, "list": 1, "models": 1, "file": 3}

# (method, route, status, action, probability). A status fault answers 503 with Retry-After: 0, so
# its retry is immediate; a reset has no Retry-After and costs a 0.5-1 s backoff, hence the lower
# rates. With the default 2 retries a call fails only if 3 attempts in a row meet a fault
# (about p**3), so nearly every fault is absorbed; the counts of faults met come from the
# emulator's log.
FAULTS: list[tuple[str | None, str, int | None, FaultActionName | None, float]] = [
    ("POST", "/query", 503, None, 0.02),  # queries and embeddings
    ("POST", "/query", None, "reset", 0.005),
    ("GET", "/files/metadata", 503, None, 0.02),  # files.list
    ("GET", "/models", None, "reset", 0.01),
    ("POST", "/files/base64", None, "reset", 0.01),
    ("GET", "/files/download/*", 503, None, 0.02),
    ("GET", "/files/download/*", None, "reset", 0.01),
    ("DELETE", "/files/delete/*", 503, None, 0.02),
]

# The kinds of failure injected on the route each call uses: only these count as injected.
INJECTED_KINDS: dict[str, frozenset[str]] = {
    "query": frozenset({"503", "reset"}),
    "embed": frozenset({"503", "reset"}),
    "list": frozenset({"503"}),
    "models": frozenset({"reset"}),
    "upload": frozenset({"reset"}),
    "download": frozenset({"503", "reset"}),
    "delete": frozenset({"503"}),
}

PAYLOAD = np.random.default_rng(7).bytes(1024)  # small files: the name, then this 1 KiB


def injected_kind(exc: BaseException) -> str | None:
    """'503' or 'reset' when `exc` is what an injected fault makes a call raise, else None."""
    if isinstance(exc, InternalServerError) and not isinstance(exc, GatewayTimeoutError) and exc.status == 503:
        return "503"
    # A reset is a plain connection error; a timeout is a subclass that no fault here causes.
    if isinstance(exc, APIConnectionError) and not isinstance(exc, APITimeoutError):
        return "reset"
    return None


# ---------------------------------------------------------------------------------------------
# Counting


@dataclass
class Tally:
    """Outcomes of the calls of one phase; shared by the workers (every update under a lock)."""

    calls: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)  # "kind: 503|reset"
    unexpected: Counter[str] = field(default_factory=Counter)  # "kind: ExceptionType"
    examples: list[str] = field(default_factory=list)
    skipped: int = 0  # download + delete of a file whose upload failed with an injected fault
    done: int = 0  # calls finished, whatever their outcome
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outcome(self, kind: str, exc: BaseException | None) -> bool:
        """Records one finished call; True when it succeeded."""
        with self.lock:
            self.calls[kind] += 1
            self.done += 1
            if exc is None:
                return True
            fault = injected_kind(exc)
            if fault is not None and fault in INJECTED_KINDS[kind]:
                self.injected[f"{kind}: {fault}"] += 1
                return False
            self.unexpected[f"{kind}: {type(exc).__module__}.{type(exc).__qualname__}"] += 1
            if len(self.examples) < MAX_EXAMPLES:
                text = f"{kind}: {type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:600]}"
                self.examples.append(text)
                print(f"  unexpected error: {text}", file=sys.stderr, flush=True)
        return False

    def skip(self, n: int) -> None:
        with self.lock:
            self.skipped += n
            self.done += n


def check_download(path: Path, expected: bytes) -> None:
    try:
        data = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    if data != expected:
        raise AssertionError(f"downloaded {len(data)} bytes that differ from the {len(expected)} uploaded")


def file_name(tag: str, index: int) -> str:
    return f"soak-{tag}-{index}.txt"


def payload(name: str) -> bytes:
    return name.encode() + PAYLOAD


# ---------------------------------------------------------------------------------------------
# One unit of work, blocking and asyncio. Results are dropped at once: nothing a call returns is
# kept, so what stays in memory is what the client (or the emulator) keeps.


def call_sync(tally: Tally, kind: str, fn: Callable[[], object]) -> bool:
    try:
        fn()
    except Exception as exc:  # classified, never re-raised: a soak counts errors
        return tally.outcome(kind, exc)
    return tally.outcome(kind, None)


def unit_sync(client: sensorium.Client, tally: Tally, kind: str, index: int, tag: str, tmp: Path) -> None:
    if kind == "query":
        call_sync(tally, kind, lambda: client.query(REASONER, f"Summarise shift {index}."))
    elif kind == "embed":
        call_sync(tally, kind, lambda: client.embed(ENCODER, np.random.rand(4, 256)))
    elif kind == "list":
        call_sync(tally, kind, lambda: client.files.list().first_page())
    elif kind == "models":
        call_sync(tally, kind, lambda: client.models.list().first_page().data[0])
    else:
        name = file_name(tag, index)
        body = payload(name)
        if not call_sync(tally, "upload", lambda: client.files.upload_base64(name, body)):
            tally.skip(2)  # nothing to download or delete
            return
        call_sync(tally, "download", lambda: check_download(client.files.download(name, tmp), body))
        call_sync(tally, "delete", lambda: client.files.delete(name))


async def call_async(tally: Tally, kind: str, fn: Callable[[], Awaitable[object]]) -> bool:
    try:
        await fn()
    except Exception as exc:
        return tally.outcome(kind, exc)
    return tally.outcome(kind, None)


async def unit_async(client: sensorium.AsyncClient, tally: Tally, kind: str, index: int, tag: str,
                     tmp: Path) -> None:
    if kind == "query":
        await call_async(tally, kind, lambda: client.query(REASONER, f"Summarise shift {index}."))
    elif kind == "embed":
        await call_async(tally, kind, lambda: client.embed(ENCODER, np.random.rand(4, 256)))
    elif kind == "list":
        await call_async(tally, kind, lambda: client.files.list().first_page())
    elif kind == "models":
        async def first_model() -> object:
            return (await client.models.list().first_page()).data[0]

        await call_async(tally, kind, first_model)
    else:
        name = file_name(tag, index)
        body = payload(name)
        if not await call_async(tally, "upload", lambda: client.files.upload_base64(name, body)):
            tally.skip(2)
            return

        async def download() -> None:
            check_download(await client.files.download(name, tmp), body)

        await call_async(tally, "download", download)
        await call_async(tally, "delete", lambda: client.files.delete(name))


def plan(calls: int) -> list[str]:
    """Units adding up to exactly `calls` calls: the pattern repeated, queries to fill the end."""
    units: list[str] = []
    total = 0
    for kind in itertools.cycle(PATTERN):
        if total == calls:
            return units
        if total + CALLS_PER_UNIT[kind] > calls:
            kind = "query"
        units.append(kind)
        total += CALLS_PER_UNIT[kind]
    raise AssertionError("unreachable")


def unit_at(units: list[str], calls: int) -> int:
    """Index of the first unit after the first `calls` calls."""
    total = 0
    for i, kind in enumerate(units):
        if total >= calls:
            return i
        total += CALLS_PER_UNIT[kind]
    return len(units)


def stages(units: list[str], fraction: float, workers: int) -> tuple[int, int]:
    """Where the warm-up ends and where the second half of the measured calls starts.

    The warm-up is the first `fraction` of the calls, and at least 10 calls per worker: with 32
    workers, 2 % of a short run is a call or two each, too few for the connection pool and the
    threads' malloc arenas to reach their working size (which would then count as growth)."""
    total = sum(CALLS_PER_UNIT[k] for k in units)
    warm_calls = max(10 * workers, round(fraction * total))
    warm = unit_at(units, warm_calls)
    return warm, unit_at(units, (warm_calls + total) // 2)


# ---------------------------------------------------------------------------------------------
# The emulator's log and the process's resources


class EmulatorProcess:
    """The emulator in a process of its own, with the part of `sensorium.testing.Emulator`'s
    interface this benchmark uses, through the emulator's `/_emulator` control routes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "sensorium.emulator", "--port", "0"],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        settings = dict(self.proc.stdout.readline().strip().split("=", 1) for _ in range(2))
        self.base_url, self.api_key = settings["SENSORIUM_BASE_URL"], settings["SENSORIUM_API_KEY"]
        self.control = self.base_url.split("/v0.5")[0] + "/_emulator"

    def _call(self, method: str, route: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.control + route, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def inject(self, method: str | None, path: str, status: int | None = None, *, retry_after: float | None = None,
               action: FaultActionName | None = None, times: int | None = 1, probability: float = 1.0) -> None:
        self._call("POST", "/faults", {"method": method, "path": path, "status": status, "retry_after": retry_after,
                                       "action": action, "times": times, "probability": probability})

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    @property
    def requests(self) -> list[SimpleNamespace]:
        """The log without bodies: the harness only counts attempts and statuses."""
        return [SimpleNamespace(**r) for r in self._call("GET", "/requests?bodies=false")["data"]]

    def clear_requests(self) -> None:
        self._call("DELETE", "/requests")

    def client(self) -> sensorium.Client:
        return sensorium.Client(api_key=self.api_key, base_url=self.base_url)

    def async_client(self) -> sensorium.AsyncClient:
        return sensorium.AsyncClient(api_key=self.api_key, base_url=self.base_url)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


AnyEmulator = Union[Emulator, EmulatorProcess]


class Monitor:
    """Drains the emulator's request log twice a second (counting the faults it shows), prints
    progress and samples the RSS at every tenth of a phase."""

    def __init__(self, emu: AnyEmulator) -> None:
        self.emu = emu
        self.faults: Counter[str] = Counter()  # "503" / "reset" / "requests" / "retries"
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.tally: Tally | None = None
        self.phase_calls = 0
        self.phase_started = 0.0
        self.next_mark = 1
        self.samples: list[tuple[int, float]] = []
        self.thread = threading.Thread(target=self.run, name="soak-monitor", daemon=True)

    def drain(self) -> None:
        # A record landing between the read and the clear is lost, so the counts are a lower bound
        # (off by at most a few in a run).
        with self.lock:
            records = self.emu.requests
            self.emu.clear_requests()
            for r in records:
                self.faults["requests"] += 1
                if r.attempt > 1:
                    self.faults["retries"] += 1
                if r.status == 0:
                    self.faults["reset"] += 1
                elif r.status == 503:
                    self.faults["503"] += 1

    def watch(self, tally: Tally | None, calls: int) -> None:
        with self.lock:
            self.tally, self.phase_calls, self.phase_started, self.next_mark = tally, calls, time.perf_counter(), 1
            self.samples = []

    def run(self) -> None:
        while not self.stop_event.wait(0.5):
            self.drain()
            with self.lock:
                tally = self.tally
                if tally is None or not self.phase_calls:
                    continue
                mark = min(9, tally.done * 10 // self.phase_calls)  # tenths done; the end has its own reading
                if mark >= self.next_mark:
                    rss = measure.status_kb("VmRSS") / 1024
                    self.samples.append((mark * 10, rss))
                    elapsed = time.perf_counter() - self.phase_started
                    print(f"    {mark * 10:3d} %  {tally.done} calls  {elapsed:6.1f} s  RSS {rss:.1f} MB"
                          f"  unexpected {sum(tally.unexpected.values())}", file=sys.stderr, flush=True)
                    self.next_mark = mark + 1

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join()
        self.drain()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_targets() -> Counter[str]:
    """What the open descriptors are, by kind (socket, pipe, anon_inode:[eventpoll], a path)."""
    out: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        out[target.split(":[")[0] if ":[" in target and not target.startswith("anon_inode") else target] += 1
    return out


def settled_fds(target: int, seconds: float = 5.0) -> int:
    """Open descriptors once the emulator has closed its ends of the closed client's connections
    (it sees their EOF asynchronously), waiting up to `seconds` for the count to drop to `target`."""
    deadline = time.monotonic() + seconds
    while True:
        n = open_fds()
        if n <= target or time.monotonic() >= deadline:
            return n
        time.sleep(0.05)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2  # glibc 2.33+
        return libc
    except (OSError, AttributeError):
        return None


LIBC = _libc()


def heap_in_use_mb() -> float | None:
    """Bytes malloc has handed out and not had back, over all arenas (Rust's and C's allocations;
    not Python objects, whose arenas are mmapped). RSS alone cannot tell a leak from memory glibc
    keeps after it is freed: with 32 threads each gets an arena, and freed chunks stay in it."""
    if LIBC is None:
        return None
    info = LIBC.mallinfo2()
    return float(info.uordblks + info.hblkhd) / (1 << 20)


def memory(monitor: Monitor) -> dict[str, float | None]:
    """RSS in MB (and its parts, the heap in use, Python's live blocks) after draining the
    emulator's log and a full collection."""
    monitor.drain()
    gc.collect()
    return {"rss_mb": measure.status_kb("VmRSS") / 1024, "anon_mb": measure.status_kb("RssAnon") / 1024,
            "file_mb": measure.status_kb("RssFile") / 1024, "heap_mb": heap_in_use_mb(),
            "py_blocks": float(sys.getallocatedblocks()), "threads": float(measure.status_kb("Threads"))}


def trimmed_rss_mb() -> float | None:
    """RSS after malloc_trim(0) hands free heap memory back to the system (only at the very end:
    trimming earlier would make the next phase regrow its arenas and count that as growth)."""
    if LIBC is None:
        return None
    LIBC.malloc_trim(0)
    return measure.status_kb("VmRSS") / 1024


# ---------------------------------------------------------------------------------------------
# Phases


def growth(start: dict[str, float | None], end: dict[str, float | None], key: str) -> float | None:
    a, b = start.get(key), end.get(key)
    return None if a is None or b is None else b - a


@dataclass
class Phase:
    name: str
    calls: int
    concurrency: str
    warmup_calls: int = 0
    seconds: float = 0.0  # after warm-up
    rss_start: dict[str, float | None] = field(default_factory=dict)
    rss_mid: dict[str, float | None] = field(default_factory=dict)  # half of the measured calls done
    rss_end: dict[str, float | None] = field(default_factory=dict)
    rss_samples: list[tuple[int, float]] = field(default_factory=list)
    fds_after_warmup: int = 0
    fds_end_open: int = 0
    faults_met: dict[str, int] = field(default_factory=dict)
    noise: dict[str, float | None] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)

    def summary(self) -> dict[str, Any]:
        t = self.tally
        return {
            "name": self.name, "calls": self.calls, "concurrency": self.concurrency,
            "warmup_calls": self.warmup_calls, "seconds": self.seconds,
            "calls_per_s": (self.calls - self.warmup_calls) / self.seconds if self.seconds else None,
            "rss_start": self.rss_start, "rss_end": self.rss_end,
            "rss_growth_mb": growth(self.rss_start, self.rss_end, "rss_mb"),
            "heap_growth_mb": growth(self.rss_start, self.rss_end, "heap_mb"),
            "rss_mid": self.rss_mid, "rss_growth_second_half_mb": growth(self.rss_mid, self.rss_end, "rss_mb"),
            "heap_growth_second_half_mb": growth(self.rss_mid, self.rss_end, "heap_mb"),
            "py_blocks_growth": growth(self.rss_start, self.rss_end, "py_blocks"),
            "rss_samples": self.rss_samples, "fds_after_warmup": self.fds_after_warmup,
            "fds_end_open": self.fds_end_open, "faults_met": self.faults_met, "noise": self.noise,
            "calls_by_kind": dict(t.calls), "injected": dict(t.injected), "unexpected": dict(t.unexpected),
            "unexpected_examples": t.examples, "skipped": t.skipped,
        }


class Runner:
    def __init__(self, emu: AnyEmulator, monitor: Monitor, tmp: Path, threads: int, tasks: int,
                 warmup_fraction: float) -> None:
        self.emu, self.monitor, self.tmp = emu, monitor, tmp
        self.threads, self.tasks, self.warmup_fraction = threads, tasks, warmup_fraction
        self.run_tag = uuid.uuid4().hex[:8]  # file names unique across phases and runs
        self.noise = measure.NoiseMeter(lambda: None)  # the emulator is in this process: no server column
        self.faults0: Counter[str] = Counter()
        self.mark: tuple[Any, ...] = ()
        self.started = 0.0

    def begin(self, phase: Phase, units: list[str], warm: int) -> None:
        """After the warm-up: the baselines, then the clock."""
        phase.rss_start = memory(self.monitor)
        phase.fds_after_warmup = open_fds()
        phase.warmup_calls = sum(CALLS_PER_UNIT[k] for k in units[:warm])
        self.faults0 = Counter(self.monitor.faults)
        self.mark = self.noise.start()
        self.monitor.watch(phase.tally, phase.calls)
        self.started = time.perf_counter()
        print(f"  warm-up done ({phase.warmup_calls} calls); RSS {phase.rss_start['rss_mb'] or 0:.1f} MB, "
              f"{phase.fds_after_warmup} fds open", file=sys.stderr, flush=True)

    def middle(self, phase: Phase) -> None:
        """A reading with every worker idle, half-way: growth that goes on in the second half is
        what a leak looks like; a one-off rise to a plateau does not."""
        phase.rss_mid = memory(self.monitor)

    def end(self, phase: Phase) -> None:
        phase.seconds = time.perf_counter() - self.started
        phase.noise = self.noise.stop(self.mark)
        phase.rss_end = memory(self.monitor)  # drains the log first, so faults_met is complete
        phase.fds_end_open = open_fds()
        phase.faults_met = dict(Counter(self.monitor.faults) - self.faults0)
        phase.rss_samples = list(self.monitor.samples)
        self.monitor.watch(None, 0)

    def threaded(self, calls: int) -> Phase:
        phase = Phase("sensorium.Client", calls, f"{self.threads} threads")
        units = plan(calls)
        warm, mid = stages(units, self.warmup_fraction, self.threads)
        tag = f"{self.run_tag}-t"
        client = self.emu.client()

        def work(counter: itertools.count[int], stop: int) -> None:
            # next() on an itertools.count is atomic under the GIL: each unit runs exactly once.
            while (i := next(counter)) < stop:
                unit_sync(client, phase.tally, units[i], i, tag, self.tmp)

        def stage(pool: ThreadPoolExecutor, start: int, stop: int) -> None:
            counter = itertools.count(start)
            for f in [pool.submit(work, counter, stop) for _ in range(self.threads)]:
                f.result()  # a harness bug surfaces here; call errors never do

        # One pool for warm-up and the run, so its threads (and their stacks) exist before the
        # baseline is taken.
        with ThreadPoolExecutor(self.threads, thread_name_prefix="soak") as pool:
            stage(pool, 0, warm)
            self.begin(phase, units, warm)
            stage(pool, warm, mid)
            self.middle(phase)
            stage(pool, mid, len(units))
            self.end(phase)  # the client still open: what it holds while idle counts
        client.close()
        return phase

    def asynchronous(self, calls: int) -> Phase:
        phase = Phase("sensorium.AsyncClient", calls, f"asyncio, {self.tasks} in flight")
        units = plan(calls)
        warm, mid = stages(units, self.warmup_fraction, self.tasks)
        tag = f"{self.run_tag}-a"

        async def main() -> None:
            client = self.emu.async_client()

            async def work(counter: itertools.count[int], stop: int) -> None:
                while (i := next(counter)) < stop:
                    await unit_async(client, phase.tally, units[i], i, tag, self.tmp)

            async def stage(start: int, stop: int) -> None:
                # A fixed set of worker tasks bounds the calls in flight like a semaphore would,
                # without creating a task object per call.
                counter = itertools.count(start)
                await asyncio.gather(*(work(counter, stop) for _ in range(self.tasks)))

            await stage(0, warm)
            self.begin(phase, units, warm)
            await stage(warm, mid)
            self.middle(phase)
            await stage(mid, len(units))
            self.end(phase)
            await client.aclose()

        asyncio.run(main())
        return phase


def start_process_runtime(emu: AnyEmulator) -> None:
    """One call from a client of each kind, both closed again: the I/O runtime the first of them
    starts (its epoll and eventfd descriptors) lives as long as the process, like the in-process
    emulator's, and is not what the descriptor count before and after is about."""
    with emu.client() as client:
        client.files.info()

    async def one_call() -> None:
        async with emu.async_client() as client:
            await client.files.info()

    asyncio.run(one_call())
    emu.clear_requests()


def leftover_files(emu: AnyEmulator) -> int:
    """Deletes files a failed delete left on the emulator (not counted as calls); returns how many."""
    client = emu.client()
    names = [f.file_id for f in client.files.list() if f.file_id.startswith("soak-")]
    for name in names:
        client.files.delete(name)
    client.close()
    return len(names)


# ---------------------------------------------------------------------------------------------
# Report


def fmt_heap(start: float | None, end: float | None) -> str:
    return "n/a" if start is None or end is None else f"{start:.1f} → {end:.1f} MB ({end - start:+.2f})"


def fmt_kinds(c: dict[str, int]) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(c.items())) or "none"


EMULATOR_PLACES = {
    "process": "Emulator in its own process (the RSS, heap and CPU are the clients').",
    "in-process": "In-process emulator (its RSS and CPU count as this process's).",
}


def markdown(report: dict[str, Any]) -> str:
    env = report["env"]
    phases = report["phases"]
    lines = [f"## Soak, {env['date_utc']}", "",
             f"`{env['command']}`: {report['calls']} calls ({', '.join(str(p['calls']) for p in phases)} per phase), "
             f"sensorium {env['sensorium']} **{env['sensorium_build']} build**, Python {env['python']}, "
             f"{env['cores']} cores. {EMULATOR_PLACES[env.get('emulator', 'in-process')]} Load average "
             f"(1/5/15 min) at start {env['loadavg_start']}, at end {env['loadavg_end']}.", ""]
    total_unexpected = sum(sum(p["unexpected"].values()) for p in phases)
    lines += ["| goal | measured | target | |", "|---|---|---|---|"]
    for p in phases:
        g = p["rss_growth_mb"]
        lines.append(f"| RSS growth after warm-up, {p['name']} | {g:+.1f} MB | < {RSS_GOAL_MB:.0f} MB | "
                     f"{'met' if g < RSS_GOAL_MB else '**missed**'} |")
        lines.append(f"| (context) RSS growth over the second half of the calls, {p['name']} | "
                     f"{p['rss_growth_second_half_mb']:+.1f} MB | | |")
        if p["heap_growth_mb"] is not None:
            lines.append(f"| (context) malloc in use, growth after warm-up / over the second half, {p['name']} | "
                         f"{p['heap_growth_mb']:+.2f} / {p['heap_growth_second_half_mb']:+.2f} MB | | |")
    fb, fa = report["fds_before"], report["fds_after"]
    lines.append(f"| open fds before the first call / after closing the clients | {fb} / {fa} | equal | "
                 f"{'met' if fb == fa else '**missed**'} |")
    lines.append(f"| unexpected errors | {total_unexpected} | 0 | {'met' if total_unexpected == 0 else '**missed**'} |")
    lines += ["", "| phase | concurrency | calls (warm-up) | time after warm-up | calls/s | RSS after warm-up → end "
              "| anon / file growth | malloc in use: growth | Python blocks: growth | fds open after warm-up / at end "
              "| faults met (503 / reset) | retries | injected errors | unexpected errors | cores: this process / other |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in phases:
        s, e, f, n = p["rss_start"], p["rss_end"], p["faults_met"], p["noise"]
        lines.append(
            f"| {p['name']} | {p['concurrency']} | {p['calls']} ({p['warmup_calls']}) | {p['seconds']:.1f} s | "
            f"{p['calls_per_s']:.0f} | {s['rss_mb']:.1f} → {e['rss_mb']:.1f} MB ({p['rss_growth_mb']:+.1f}) | "
            f"{e['anon_mb'] - s['anon_mb']:+.1f} / {e['file_mb'] - s['file_mb']:+.1f} MB | "
            f"{fmt_heap(s.get('heap_mb'), e.get('heap_mb'))} | {p['py_blocks_growth']:+.0f} | "
            f"{p['fds_after_warmup']} / {p['fds_end_open']} | {f.get('503', 0)} / {f.get('reset', 0)} | "
            f"{f.get('retries', 0)} | {sum(p['injected'].values())} | {sum(p['unexpected'].values())} | "
            f"{n.get('client_cores') or 0:.2f} / {n.get('other_cores') or 0:.2f} |")
    lines.append("")
    for p in phases:
        samples = " ".join(f"{pct}%:{mb:.1f}" for pct, mb in p["rss_samples"])
        lines.append(f"- {p['name']}: RSS (MB) by share of calls done: {samples or 'n/a'}; injected errors: "
                     f"{fmt_kinds(p['injected'])}; unexpected: {fmt_kinds(p['unexpected'])}; "
                     f"download/delete skipped after a failed upload: {p['skipped']}")
    trimmed = report["rss_trimmed_mb"]
    lines.append(f"- RSS after closing both clients: {report['rss_final']['rss_mb']:.1f} MB"
                 f"{'' if trimmed is None else f', after malloc_trim(0): {trimmed:.1f} MB'} (before the first call: "
                 f"{report['rss_before']['rss_mb']:.1f} MB); malloc in use "
                 f"{fmt_heap(report['rss_before']['heap_mb'], report['rss_final']['heap_mb'])}; files left in the "
                 f"download folder: {report['leftover_local']}; files left on the emulator: "
                 f"{report['leftover_remote']}")
    if report["fd_diff"]:
        lines.append(f"- descriptors that differ (after − before): {report['fd_diff']}")
    examples = [x for p in phases for x in p["unexpected_examples"]]
    if examples:
        lines += ["", "First unexpected errors:", ""] + [f"    {x}" for x in examples[:MAX_EXAMPLES]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 calls instead of 100,000")
    parser.add_argument("--calls", type=int, help="calls over both phases (default 100,000; --quick 5,000)")
    parser.add_argument("--emulator", choices=["process", "in-process"], default="process",
                        help="run the emulator in its own process (default: RSS and CPU are the clients' alone) "
                             "or in this one")
    parser.add_argument("--threads", type=int, default=32, help="threads sharing the blocking client")
    parser.add_argument("--tasks", type=int, default=32, help="asyncio calls in flight")
    parser.add_argument("--warmup", type=float, default=0.02, help="share of each phase's calls left out of the "
                        "RSS growth (default 0.02; at least 10 calls per thread or task)")
    parser.add_argument("--write", action="store_true", help="also write the report (markdown + raw numbers, "
                        "JSON) to --out")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="where --write puts it")
    args = parser.parse_args()
    calls = args.calls if args.calls is not None else (5_000 if args.quick else 100_000)
    started = time.perf_counter()

    env: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(sys.orig_argv), "cores": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "sensorium": importlib.metadata.version("sensorium"),
        "sensorium_build": measure.build_profile(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "emulator": args.emulator,
    }
    tmp = Path(tempfile.mkdtemp(prefix="sensorium-soak-"))
    emu: AnyEmulator = EmulatorProcess() if args.emulator == "process" else Emulator()
    try:
        start_process_runtime(emu)
        for method, route, status, action, probability in FAULTS:
            emu.inject(method, route, status, retry_after=0 if status else None, action=action, times=None,
                       probability=probability)
        monitor = Monitor(emu)
        rss_before = memory(monitor)
        fds_before = open_fds()  # the emulator and sensorium's I/O runtime are up; no client exists
        fd_kinds_before = fd_targets()
        monitor.thread.start()
        runner = Runner(emu, monitor, tmp, args.threads, args.tasks, args.warmup)
        phases: list[Phase] = []
        for name, share in (("threads", calls // 2), ("asyncio", calls - calls // 2)):
            print(f"[{time.perf_counter() - started:6.1f}s] {name}: {share} calls ...", file=sys.stderr, flush=True)
            phases.append(runner.threaded(share) if name == "threads" else runner.asynchronous(share))
        monitor.close()
        emu.clear_faults()  # the clean-up below must not meet them
        leftover_local = sum(1 for _ in tmp.iterdir())  # a failed download must leave no temporary file
        leftover_remote = leftover_files(emu)
        gc.collect()
        fds_after = settled_fds(fds_before)
        fd_diff = {k: v for k, v in (fd_targets() - fd_kinds_before).items()}
        fd_diff.update({k: -v for k, v in (fd_kinds_before - fd_targets()).items()})
        rss_final = memory(monitor)
        rss_trimmed = trimmed_rss_mb()
    finally:
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    env["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report: dict[str, Any] = {
        "env": env, "calls": calls, "quick": args.quick, "faults": FAULTS, "phases": [p.summary() for p in phases],
        "fds_before": fds_before, "fds_after": fds_after, "fd_diff": fd_diff, "rss_before": rss_before, "rss_final": rss_final,
        "rss_trimmed_mb": rss_trimmed,
        "leftover_local": leftover_local, "leftover_remote": leftover_remote,
        "total_seconds": time.perf_counter() - started,
    }
    text = markdown(report)
    if args.write:
        measure.write_report(report, text, args.out, "soak-", args.quick)
    else:
        print(text)


if __name__ == "__main__":
    main()
