"""Where a blocking `embed()`'s CPU goes, against the least any client can spend: the same
request sent over a bare socket.

    .venv/bin/python benchmarks/embed_floor.py [--calls 3000] [--rounds 3] [--wait-quiet 90]

Rows, each CPU per call of this process (`time.process_time`, all threads; the emulator runs in
a process of its own):
- *bare socket*: the request's bytes built once beforehand, written with one `sendall`, the
  answer read by Content-Length into one buffer, and neither written nor read as numbers. No
  client can move the same bytes through loopback TCP for less; this is the kernel's share.
- *sensorium.Client.embed*: the whole call, window in, float32 array out.
- *events.numeric*: sensorium writing the window's numbers alone (the request's JSON).
- *the answer read*: what is left, `embed` - bare socket - events.numeric: reading the 6,144
  numbers into the array, plus everything else the client does (HTTP, Python, the result).
- *aiohttp + orjson, whole call*: the peer of issue 9's goal, for the same split.
- the same two calls with a (1, 16) window: what a call costs beyond its numbers.

Rounds alternate the rows, so a change in the machine's load moves them alike. Nothing here is
a test; measure on a quiet machine (load under 0.3).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402
import peers  # noqa: E402
import servers  # noqa: E402


class BareSocket:
    """One keep-alive HTTP/1.1 connection: a prebuilt request out, the answer's bytes in."""

    def __init__(self, target: peers.Target, body: bytes) -> None:
        url = urlsplit(target.query_url)
        head = (
            f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {target.api_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.request = head + body
        self.sock = socket.create_connection((url.hostname, url.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(1 << 20)

    def call(self) -> memoryview:
        self.sock.sendall(self.request)
        view = memoryview(self.buffer)
        got = 0
        while True:
            got += self.sock.recv_into(view[got:])
            end = self.buffer.find(b"\r\n\r\n", 0, got)
            if end >= 0:
                break
        head = bytes(self.buffer[:end]).lower()
        if not head.startswith(b"http/1.1 200"):
            raise SystemExit(f"bare socket: {head[:80]!r}")
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        while got < end + 4 + length:
            got += self.sock.recv_into(view[got:])
        return view[end + 4 : end + 4 + length]

    def close(self) -> None:
        self.sock.close()


def cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000, help="calls per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()

    import sensorium

    if args.wait_quiet:
        measure.wait_for_quiet(args.wait_quiet)
    load = os.getloadavg()[0]
    server = servers.start("emulator")
    loop = asyncio.new_event_loop()
    try:
        client = sensorium.Client(api_key=server.api_key, base_url=server.base_url, max_retries=0)
        target = peers.Target(server.base_url, client.base_url + "/query", server.api_key)
        window = np.random.default_rng(1).standard_normal((8, 1024))
        small = window[:1, :16]
        bare = BareSocket(target, peers.body_orjson(window))
        bare_small = BareSocket(target, peers.body_orjson(small))
        async_peers = loop.run_until_complete(peers.async_embed_peers(target, window))
        aiohttp_peer = next(p for p in async_peers if p.name == "aiohttp + orjson")
        for other in async_peers:
            if other is not aiohttp_peer:
                loop.run_until_complete(other.close())
        rows: dict[str, Callable[[], object]] = {
            "bare socket (prebuilt request, answer not read as numbers)": bare.call,
            "sensorium.Client.embed": lambda: client.embed(peers.ENCODER, window).vectors,
            "sensorium events.numeric (writing the window)": lambda: sensorium.events.numeric(window),
            "aiohttp + orjson, whole call": lambda: loop.run_until_complete(aiohttp_peer.call()),
            "bare socket, a (1, 16) window": bare_small.call,
            "sensorium.Client.embed, a (1, 16) window": lambda: client.embed(peers.ENCODER, small).vectors,
        }
        got = np.asarray(rows["sensorium.Client.embed"]())
        want = peers.parse_orjson(bytes(bare.call()))
        if not np.array_equal(got, want):
            raise SystemExit("sensorium's vectors differ from the bare socket's answer")
        for fn in rows.values():
            cpu_per_call(fn, max(50, args.calls // 10))
        results: dict[str, list[float]] = {name: [] for name in rows}
        for r in range(args.rounds):
            names = list(rows)
            for name in names[r % len(names):] + names[: r % len(names)]:
                results[name].append(cpu_per_call(rows[name], args.calls))
        best = {name: min(v) for name, v in results.items()}
        bare_us, embed_us, write_us = (best[n] for n in list(rows)[:3])
        print(f"## embed() CPU against a bare socket, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        print(f"{sensorium.__name__} {measure.build_profile()} build; (8, 1024) float64 window; "
              f"{args.calls} calls x {args.rounds} rounds; load {load:.2f} at start, "
              f"{os.getloadavg()[0]:.2f} at end. Lowest round shown (all rounds in brackets).\n")
        print("| row | CPU per call |\n|---|---|")
        for name, values in results.items():
            print(f"| {name} | {best[name]:.0f} µs ({', '.join(f'{v:.0f}' for v in values)}) |")
        rest = embed_us - bare_us - write_us
        print(f"| the rest of embed(): reading the answer, HTTP, Python (embed - bare - writing) | {rest:.0f} µs |")
        peer = best["aiohttp + orjson, whole call"]
        fixed = best["sensorium.Client.embed, a (1, 16) window"] - best["bare socket, a (1, 16) window"]
        print(f"\nembed() / aiohttp+orjson: {embed_us / peer:.2f}x; embed() above the bare socket: "
              f"{embed_us - bare_us:.0f} µs; aiohttp+orjson above it: {peer - bare_us:.0f} µs; "
              f"sensorium's fixed cost above the bare socket (small window): {fixed:.0f} µs.")
        bare.close()
        bare_small.close()
        client.close()
        loop.run_until_complete(aiohttp_peer.close())
    finally:
        loop.close()
        server.stop()


if __name__ == "__main__":
    main()
