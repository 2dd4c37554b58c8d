"""Downloading every output of a batch job, side by side: sensorium's
`batch.jobs.download_outputs` against what the public scripts do (list the outputs, then a
thread pool of `requests` fetching each presigned URL) and against `aiohttp` with 16 downloads
in flight. Each client lists the outputs itself and writes every file to its own folder; the
files are checked (count and bytes) after every round.

The job: 1,000 activity-detection inputs whose outputs are about 100 KB each, made once by the
in-process emulator (its work is done before timing starts; the emulator serves the files).

Run on a quiet machine (load under 0.3), with a release build:
    .venv/bin/maturin develop --release
    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/downloads.py [--quick] [--outputs 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import aiohttp
import requests

import sensorium
from sensorium.testing import Emulator

from measure import build_profile, write_report

# Lines per input: the stand-in answers each with a JSONL row of about 43 bytes.
LINES = 2300


async def make_job(emu: Emulator, n: int, workdir: Path) -> str:
    async with emu.async_client() as client:
        gate = asyncio.Semaphore(16)

        async def upload(i: int) -> str:
            path = workdir / f"recording_{i:04d}.jsonl"
            path.write_text("".join(json.dumps({"prompt": f"window {i}.{k}"}) + "\n" for k in range(LINES)))
            async with gate:
                return (await client.files.upload(path)).file_id

        file_ids = await asyncio.gather(*(upload(i) for i in range(n)))
        job = await client.batch.jobs.create("bench", pipeline_key="activity-detection",
                                             inputs={"worker.data": list(file_ids)})
        await client.batch.jobs.wait(job.id, timeout=600)
        return job.id


def list_outputs(session: requests.Session, base: str, job_id: str) -> list[dict[str, Any]]:
    """The outputs, every page, as the public scripts page them (cursor style)."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = session.get(f"{base}/batch/jobs/{job_id}/outputs", params=params, timeout=60)
        page.raise_for_status()
        body = page.json()
        items += body["data"]
        if not body.get("has_more"):
            return items
        cursor = body["next_cursor"]


def with_requests(emu: Emulator, job_id: str, folder: Path, threads: int = 8) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {emu.api_key}"
    outputs = list_outputs(session, emu.base_url, job_id)
    storage = requests.Session()  # presigned: no Authorization header
    adapter = requests.adapters.HTTPAdapter(pool_connections=threads, pool_maxsize=threads)
    storage.mount("http://", adapter)

    def one(output: dict[str, Any]) -> None:
        answer = storage.get(output["data"]["ref"], timeout=60)
        answer.raise_for_status()
        (folder / output["data"]["filename"]).write_bytes(answer.content)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, outputs))


def with_aiohttp(emu: Emulator, job_id: str, folder: Path, in_flight: int = 16) -> None:
    async def main() -> None:
        headers = {"Authorization": f"Bearer {emu.api_key}"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight)) as http:
            outputs: list[dict[str, Any]] = []
            cursor = None
            while True:
                params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
                async with http.get(f"{emu.base_url}/batch/jobs/{job_id}/outputs", params=params,
                                    headers=headers) as page:
                    page.raise_for_status()
                    body = await page.json()
                outputs += body["data"]
                if not body.get("has_more"):
                    break
                cursor = body["next_cursor"]
            gate = asyncio.Semaphore(in_flight)

            async def one(output: dict[str, Any]) -> None:
                async with gate, http.get(output["data"]["ref"]) as answer:
                    answer.raise_for_status()
                    (folder / output["data"]["filename"]).write_bytes(await answer.read())

            await asyncio.gather(*(one(o) for o in outputs))

    asyncio.run(main())


def with_sensorium(emu: Emulator, job_id: str, folder: Path, concurrency: int | None = None) -> None:
    with sensorium.Client(api_key=emu.api_key, base_url=emu.base_url, max_retries=0) as client:
        client.batch.jobs.download_outputs(job_id, folder, concurrency=concurrency)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="200 outputs, 2 rounds")
    p.add_argument("--outputs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args()
    if args.quick:
        args.outputs, args.rounds = 200, 2
    started = time.perf_counter()
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="sensorium-bench-"))
    clients: dict[str, Callable[[Emulator, str, Path], None]] = {
        "sensorium download_outputs (16 in flight)": with_sensorium,
        "sensorium download_outputs (64 in flight)": lambda e, j, f: with_sensorium(e, j, f, 64),
        "requests, 8-thread pool (public scripts)": with_requests,
        "aiohttp, 16 in flight": with_aiohttp,
    }
    times: dict[str, list[float]] = {name: [] for name in clients}
    cpu: dict[str, list[float]] = {name: [] for name in clients}
    try:
        with Emulator(work_duration=0.05) as emu:
            job_id = asyncio.run(make_job(emu, args.outputs, work))
            with sensorium.Client(api_key=emu.api_key, base_url=emu.base_url) as client:
                sizes = {o.filename: o.num_bytes for o in client.batch.jobs.outputs(job_id)}
            total_bytes = sum(size or 0 for size in sizes.values())
            names = list(clients)
            for round_number in range(args.rounds):
                # Rotate the order each round so noise hits every client.
                order = names[round_number % len(names):] + names[:round_number % len(names)]
                for name in order:
                    folder = work / f"out-{round_number}-{names.index(name)}"
                    folder.mkdir()
                    t0, c0 = time.perf_counter(), time.process_time()
                    clients[name](emu, job_id, folder)
                    times[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                    got = {f.name: f.stat().st_size for f in folder.iterdir()}
                    assert got == sizes, f"{name}: wrong files"
                    shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {name: min(values) for name, values in times.items()}
    base = best["requests, 8-thread pool (public scripts)"]
    aio = best["aiohttp, 16 in flight"]
    rows = [f"| {name} | {best[name]:.3f} s | {total_bytes / best[name] / 1e6:.0f} MB/s | "
            f"{min(cpu[name]) * 1e6 / args.outputs:.0f} µs | {base / best[name]:.2f}x | {aio / best[name]:.2f}x |"
            for name in clients]
    text = "\n".join([
        f"Downloading {args.outputs} batch outputs ({total_bytes / args.outputs / 1e3:.0f} KB each) from the "
        f"emulator ({build_profile()} build, load average at start {load[0]:.2f}, {os.cpu_count()} cores; "
        f"best of {args.rounds} rounds; command: python benchmarks/downloads.py{' --quick' if args.quick else ''})",
        "",
        "| client | wall | throughput | client CPU per file | vs requests pool | vs aiohttp |",
        "|---|---|---|---|---|---|",
        *rows,
        f"\nload average at end {os.getloadavg()[0]:.2f}",
    ])
    report = {"times": times, "cpu": cpu, "outputs": args.outputs, "total_bytes": total_bytes,
              "load_start": load, "load_end": os.getloadavg(), "total_seconds": time.perf_counter() - started}
    write_report(report, text, args.out, "downloads-", args.quick)


if __name__ == "__main__":
    main()
