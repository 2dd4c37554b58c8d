"""WebSocket round trips per second on a lens session, side by side: sensorium's
`lens.sessions.connect` (one Rust task reads; each call waits for its own reply) against the
`websockets` library's blocking client doing the same request/reply by hand. Both send
`session.heartbeat` and read its `session.heartbeat.response` from the emulator, one at a time.

Run on a quiet machine (load under 0.3), with a release build:
    .venv/bin/maturin develop --release
    .venv/bin/python benchmarks/websocket.py [--quick] [--calls 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

from websockets.sync.client import connect

from sensorium.testing import Emulator

from measure import build_profile, write_report

warnings.filterwarnings("ignore", category=DeprecationWarning)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2,000 calls, 2 rounds")
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args()
    if args.quick:
        args.calls, args.rounds = 2_000, 2
    started = time.perf_counter()
    load = os.getloadavg()
    times: dict[str, list[float]] = {"sensorium": [], "websockets (sync client)": []}
    with Emulator() as emu, emu.client() as client:
        lens = client.lens.register("bench", model_pipeline=[{"processor_name": "lens_noop_processor",
                                                              "processor_config": {}}])
        session = client.lens.sessions.create(lens.lens_id)
        client.lens.sessions.wait_until_running(session.session_id, timeout=30)
        endpoint = client.lens.sessions.info(session.session_id).session_endpoint
        for _ in range(args.rounds):
            with client.lens.sessions.connect(session.session_id) as socket:
                socket.send("session.heartbeat")
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    socket.send("session.heartbeat")
                times["sensorium"].append(time.perf_counter() - t0)
            with connect(endpoint, additional_headers={"Authorization": f"Bearer {emu.api_key}"}) as ws:
                ws.send(json.dumps({"type": "session.heartbeat"}))
                ws.recv()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    ws.send(json.dumps({"type": "session.heartbeat"}))
                    reply = json.loads(ws.recv())
                    assert reply["type"] == "session.heartbeat.response"
                times["websockets (sync client)"].append(time.perf_counter() - t0)
    rate = {name: args.calls / min(values) for name, values in times.items()}
    text = "\n".join([
        f"Lens session WebSocket, {args.calls:,} sequential round trips ({build_profile()} build, load average at "
        f"start {load[0]:.2f}, {os.cpu_count()} cores; best of {args.rounds} rounds; command: python "
        f"benchmarks/websocket.py{' --quick' if args.quick else ''})",
        "",
        "| client | round trips per second | vs websockets |",
        "|---|---|---|",
        *[f"| {name} | {rate[name]:,.0f} | {rate[name] / rate['websockets (sync client)']:.2f}x |" for name in rate],
        f"\nload average at end {os.getloadavg()[0]:.2f}",
    ])
    report = {"times": times, "calls": args.calls, "load_start": load, "load_end": os.getloadavg(),
              "total_seconds": time.perf_counter() - started}
    write_report(report, text, args.out, "websocket-", args.quick)


if __name__ == "__main__":
    main()
