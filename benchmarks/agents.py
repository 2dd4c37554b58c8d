"""Agents at scale, side by side: sensorium's AsyncClient against the same work done with httpx
by hand, as the public demos do it.

1. Listing 10,000 agents, every page: wall time and requests sent.
2. Waiting on 100 concurrent runs: wall time from the first run started to the last one seen
   finished, and requests sent. The demos poll each run's record at a fixed interval (1 s here;
   the official client's default is 5 s) and trust its status; `wait()` polls with backoff and
   also reads the run's logs, so its request count is the honest price of not trusting a lagging
   status.

Run on a quiet machine (load under 0.3):
    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/agents.py [--quick] [--agents 10000] [--runs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import httpx

import sensorium
from sensorium.testing import Emulator

from measure import build_profile, write_report

CSV = "timestamp,value\n" + "".join(f"{i},{i % 13}\n" for i in range(64))
TERMINAL = {"completed", "failed", "canceled", "cancelled"}


async def _start_runs(client: sensorium.AsyncClient, bundle_id: str, file_id: str, n: int) -> list[str]:
    gate = asyncio.Semaphore(64)

    async def one() -> str:
        async with gate:
            agent = await client.agents.bundles.run(bundle_id, file_id)
            return agent.id

    return list(await asyncio.gather(*(one() for _ in range(n))))


def _requests(emu: Emulator, prefix: str) -> int:
    return sum(1 for r in emu.requests if r.path.startswith(prefix))


async def list_all(emu: Emulator, n_agents: int, page: int) -> dict[str, Any]:
    async with emu.async_client() as client:
        bundle = await client.agents.bundles.create("osm", name="bench-list")
        file_id = (await client.files.upload_base64("bench.csv", CSV.encode())).file_id
        await _start_runs(client, bundle.id, file_id, n_agents)
        # Let the emulator's executor finish every run first, so neither side is timed against
        # a server still busy with them.
        while (await client.agents.instances.list(bundle_id=bundle.id, status="running", limit=1).first_page()).data:
            await asyncio.sleep(0.2)
        emu.clear_requests()
        t0 = time.perf_counter()
        count = 0
        async for _ in client.agents.instances.list(bundle_id=bundle.id, limit=page):
            count += 1
        ours = time.perf_counter() - t0
        ours_requests = _requests(emu, "/v0.5/agents/instances")
    emu.clear_requests()
    headers = {"Authorization": f"Bearer {emu.api_key}"}
    async with httpx.AsyncClient(base_url=emu.base_url, headers=headers, timeout=60) as http:
        t0 = time.perf_counter()
        by_hand, after = 0, None
        while True:
            params: dict[str, Any] = {"bundle_id": bundle.id, "limit": page}
            if after:
                params["after"] = after
            body = (await http.get("/agents/instances", params=params)).raise_for_status().json()
            by_hand += len(body["data"])
            if not body.get("has_more"):
                break
            after = body["next_cursor"]
        theirs = time.perf_counter() - t0
    assert count == by_hand == n_agents, (count, by_hand, n_agents)
    return {"agents": n_agents, "page": page, "sensorium_s": ours, "sensorium_requests": ours_requests,
            "httpx_s": theirs, "httpx_requests": _requests(emu, "/v0.5/agents/instances")}


async def wait_many(runs: int, work_duration: float, poll: float) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs, "work_duration_s": work_duration, "httpx_poll_s": poll}
    for who in ("sensorium", "httpx"):
        with Emulator(work_duration=work_duration) as emu:
            async with emu.async_client() as client:
                bundle = await client.agents.bundles.create("osm", name="bench-wait")
                file_id = (await client.files.upload_base64("bench.csv", CSV.encode())).file_id
                emu.clear_requests()
                t0 = time.perf_counter()
                ids = await _start_runs(client, bundle.id, file_id, runs)
                if who == "sensorium":
                    done = await asyncio.gather(*(client.agents.instances.wait(i, timeout=600) for i in ids))
                    assert all(a.status == "completed" for a in done)
                else:
                    headers = {"Authorization": f"Bearer {emu.api_key}"}
                    async with httpx.AsyncClient(base_url=emu.base_url, headers=headers, timeout=60) as http:

                        async def poll_one(agent_id: str) -> None:
                            while True:
                                record = (await http.get(f"/agents/instances/{agent_id}")).raise_for_status().json()
                                if record["status"] in TERMINAL:
                                    return
                                await asyncio.sleep(poll)

                        await asyncio.gather(*(poll_one(i) for i in ids))
                out[f"{who}_s"] = time.perf_counter() - t0
                out[f"{who}_requests"] = _requests(emu, "/v0.5/agents/instances")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 agents and 20 runs")
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--page", type=int, default=100, help="page size of the listing (the platform's default)")
    p.add_argument("--work-duration", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args()
    if args.quick:
        args.agents, args.runs = 1_000, 20
    started = time.perf_counter()
    load = os.getloadavg()
    with Emulator(work_duration=0.05) as emu:
        listing = asyncio.run(list_all(emu, args.agents, args.page))
    waiting = asyncio.run(wait_many(args.runs, args.work_duration, poll=1.0))
    text = "\n".join([
        f"Agents benchmark ({build_profile()} build, load average at start {load[0]:.2f}, "
        f"{os.cpu_count()} cores; command: python benchmarks/agents.py{' --quick' if args.quick else ''})",
        "",
        "| work | sensorium AsyncClient | httpx by hand |",
        "|---|---|---|",
        f"| list {listing['agents']} agents, pages of {listing['page']} | {listing['sensorium_s']:.2f} s, "
        f"{listing['sensorium_requests']} requests | {listing['httpx_s']:.2f} s, {listing['httpx_requests']} requests |",
        f"| wait on {waiting['runs']} runs of {waiting['work_duration_s']} s | {waiting['sensorium_s']:.2f} s, "
        f"{waiting['sensorium_requests']} requests | {waiting['httpx_s']:.2f} s, {waiting['httpx_requests']} requests "
        f"(polls every {waiting['httpx_poll_s']} s, status only) |",
        f"\nload average at end {os.getloadavg()[0]:.2f}",
    ])
    report = {"listing": listing, "waiting": waiting, "load_start": load, "load_end": os.getloadavg(),
              "total_seconds": time.perf_counter() - started}
    write_report(report, text, args.out, "agents-", args.quick)


if __name__ == "__main__":
    main()
