"""Events per second delivered into Python from one SSE stream, side by side: sensorium's
`lens.sessions.stream` (framing parsed in Rust, events handed over in batches) against
`httpx-sse`, `sseclient-py` (over `requests`) and a minimal pure-Python parser over a raw socket.

A minimal server in its own process (so it never competes for this process's GIL) serves
N small `inference.result` events (`event: message`, `id`, one-line JSON `data`) and then
`sse.stream.end`. Every client must hand each event to Python with its type: the peers parse the
`data` JSON for it (that is how they learn the type); sensorium reads it in Rust and decodes
`event_data` only when asked (the last event's is checked). Counts are checked every round.

Run on a quiet machine (load under 0.3), with a release build:
    .venv/bin/maturin develop --release
    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/sse.py [--quick] [--events 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import time
from pathlib import Path
from typing import Callable

import httpx
import httpx_sse
import requests
import sseclient

import sensorium

from measure import build_profile, write_report


def _serve(port_out: "multiprocessing.Queue[int]", n: int) -> None:
    frames = b"".join(
        b'event: message\nid: %d\ndata: {"type": "inference.result", "event_data": {"i": %d}}\n\n' % (i, i)
        for i in range(1, n + 1))
    frames += b'event: message\nid: %d\ndata: {"type": "sse.stream.end", "event_data": null}\n\n' % (n + 1)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port_out.put(server.getsockname()[1])
    while True:
        conn, _ = server.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                break
            request += chunk
        try:
            conn.sendall(head + frames)
        except OSError:
            pass
        conn.close()


def with_sensorium(url: str, n: int) -> int:
    base = url.rsplit("/lens/", 1)[0]
    with sensorium.Client(api_key="bench", base_url=base, max_retries=0) as client:
        with client.lens.sessions.stream("lsn-bench") as stream:
            count = 0
            last = None
            for event in stream:
                if event.type == "inference.result":
                    count += 1
                last = event
    assert last is not None and last.event_data == {"i": n}
    return count


def with_httpx_sse(url: str, n: int) -> int:
    count = 0
    with httpx.Client(timeout=60) as client, httpx_sse.connect_sse(client, "GET", url) as source:
        for sse in source.iter_sse():
            kind = json.loads(sse.data)["type"]
            if kind == "sse.stream.end":
                break
            count += 1
    return count


def with_sseclient(url: str, n: int) -> int:
    count = 0
    response = requests.get(url, stream=True, headers={"Accept": "text/event-stream"}, timeout=60)
    for event in sseclient.SSEClient(response).events():
        kind = json.loads(event.data)["type"]
        if kind == "sse.stream.end":
            break
        count += 1
    return count


def with_raw_socket(url: str, n: int) -> int:
    """The least a hand-written reader does: LF-only lines, `data:` lines, blank line ends one."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"GET /v0.5/lens/sessions/consumer/lsn-bench HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    reader = sock.makefile("rb", buffering=1 << 16)
    while reader.readline() not in (b"\r\n", b""):
        pass  # the head
    count, data = 0, b""
    for line in reader:
        if line.startswith(b"data:"):
            data = line[5:].strip()
        elif line == b"\n":
            if json.loads(data)["type"] == "sse.stream.end":
                break
            count += 1
    sock.close()
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="100,000 events, 2 rounds")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args()
    if args.quick:
        args.events, args.rounds = 100_000, 2
    started = time.perf_counter()
    load = os.getloadavg()
    ports: "multiprocessing.Queue[int]" = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(ports, args.events), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=120)}/v0.5/lens/sessions/consumer/lsn-bench"
    clients: dict[str, Callable[[str, int], int]] = {
        "sensorium": with_sensorium,
        "httpx-sse": with_httpx_sse,
        "sseclient-py (requests)": with_sseclient,
        "pure Python over a raw socket": with_raw_socket,
    }
    times: dict[str, list[float]] = {name: [] for name in clients}
    names = list(clients)
    try:
        for round_number in range(args.rounds):
            order = names[round_number % len(names):] + names[:round_number % len(names)]
            for name in order:
                t0 = time.perf_counter()
                got = clients[name](url, args.events)
                times[name].append(time.perf_counter() - t0)
                assert got == args.events, f"{name}: {got} events of {args.events}"
    finally:
        server.terminate()
    rate = {name: args.events / min(values) for name, values in times.items()}
    rows = [f"| {name} | {rate[name] / 1e6:.2f} M/s | {rate[name] / rate['httpx-sse']:.1f}x |" for name in clients]
    text = "\n".join([
        f"One SSE stream of {args.events:,} small inference.result events into Python ({build_profile()} build, "
        f"load average at start {load[0]:.2f}, {os.cpu_count()} cores; best of {args.rounds} rounds; "
        f"command: python benchmarks/sse.py{' --quick' if args.quick else ''})",
        "",
        "| client | events per second | vs httpx-sse |",
        "|---|---|---|",
        *rows,
        f"\nload average at end {os.getloadavg()[0]:.2f}",
    ])
    report = {"times": times, "events": args.events, "load_start": load, "load_end": os.getloadavg(),
              "total_seconds": time.perf_counter() - started}
    write_report(report, text, args.out, "sse-", args.quick)


if __name__ == "__main__":
    main()
