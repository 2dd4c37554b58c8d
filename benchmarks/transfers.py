"""Side-by-side transfer benchmarks: sensorium's direct upload and download of large files against
single-stream PUTs (curl -T, pyreqwest), the platform's official Python client (archetypeai) and
curl downloads, all against emulators running in their own processes on 127.0.0.1.

    .venv/bin/pip install -r benchmarks/requirements.txt
    .venv/bin/python benchmarks/transfers.py            # 1 GiB and 4 GiB files, about 5 to 10 minutes
    .venv/bin/python benchmarks/transfers.py --quick    # 1 GiB only

Every transfer runs in a process of its own (a Python child for the Python clients, curl itself for
curl), so peak RSS is that client's alone: the child resets its peak (/proc/self/clear_refs) once its
imports are done and reports VmHWM minus VmRSS at that point as "RSS growth". curl's growth is its
ru_maxrss minus the ru_maxrss of a curl that fetched a few bytes. Throughput is decimal GB/s
(bytes / 1e9 / seconds) of the transfer alone (interpreter start and imports excluded; for curl,
its own time_total). Nothing here asserts a time: the goals are reported, not enforced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
API_KEY = "bench-transfers-key"
PACKAGES = ["sensorium", "pyreqwest", "archetypeai", "requests"]
SWEEP_CONCURRENCY = [1, 2, 4, 8]
SMALL_PART = 64 * MIB


# ---------------------------------------------------------------------------------------------
# Child side: one transfer per process.


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def child(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    import resource

    if kind in ("sensorium_upload", "sensorium_download"):
        import sensorium

        client = sensorium.Client(api_key=spec["key"], base_url=spec["base"], max_retries=0)
    elif kind == "archetypeai_upload":
        from archetypeai import ArchetypeAI
        from archetypeai._direct_upload import direct_upload

        client = ArchetypeAI(spec["key"], api_endpoint=spec["base"])
    elif kind == "pyreqwest_put":
        import pyreqwest.client

        client = pyreqwest.client.SyncClientBuilder().error_for_status(True).build()
    else:
        raise SystemExit(f"unknown child kind {kind}")

    rss_ready = measure.status_kb("VmRSS")
    reset = _reset_peak()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if kind == "sensorium_upload":
        rec = client.files.upload(spec["path"], method="direct", concurrency=spec.get("concurrency"))
        result = {"file_id": rec.file_id}
    elif kind == "sensorium_download":
        client.files.download(spec["file_id"], spec["dest"])
        result = {}
    elif kind == "archetypeai_upload":
        out = direct_upload(client.files, spec["path"], "application/octet-stream",
                            max_workers=spec.get("max_workers", 8))
        result = {"file_id": out["file_id"]}
    else:  # pyreqwest_put: one streamed PUT of the whole file, read in `chunk`-byte pieces
        chunk = spec.get("chunk", MIB)
        size = os.path.getsize(spec["path"])

        def pieces():
            with open(spec["path"], "rb", buffering=0) as f:
                while data := f.read(chunk):
                    yield data

        resp = (client.put(spec["url"]).header("Content-Length", str(size)).body_stream(pieces())
                .build().send())
        result = {"etag": resp.headers.get("etag")}
    seconds = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    hwm = measure.status_kb("VmHWM")
    return {
        "seconds": seconds,
        "rss_ready_kb": rss_ready,
        "hwm_kb": hwm,
        "growth_kb": hwm - rss_ready if reset else None,
        "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        "ctx_switches": (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw),
        **result,
    }


# ---------------------------------------------------------------------------------------------
# Parent side


class Emulator:
    """`python -m sensorium.emulator` in its own process; part size chosen per instance."""

    def __init__(self, name: str, part_size: int | None, tmpdir: Path) -> None:
        import servers

        self.name = name
        self.part_size = part_size
        port = servers._free_port()
        cmd = [sys.executable, "-m", "sensorium.emulator", "--port", str(port), "--api-key", API_KEY]
        if part_size:
            cmd += ["--upload-part-size", str(part_size)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmpdir)}
        self.command = cmd
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, text=True)
        found = threading.Event()
        self.url = ""

        def drain() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                if not self.url and (m := servers._URL.search(line)):
                    self.url = m.group(0).rstrip("/.")
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        found.wait(60)
        if not self.url:
            self.stop()
            raise RuntimeError(f"emulator {name} did not print its URL")
        root = re.sub(r"/v0\.\d+$", "", self.url)
        self.root = root
        self.api = root + "/v0.5"
        deadline = time.monotonic() + 30
        while True:  # wait until it answers
            try:
                self.call("GET", "/files/info")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._cpu_ns: dict[str, int] = {}

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {API_KEY}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def delete(self, file_id: str) -> None:
        try:
            self.call("DELETE", f"/files/delete/{file_id}")
        except OSError:
            pass

    def cpu_seconds(self) -> float:
        total = 0
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                self._cpu_ns[task.name] = int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        total = sum(self._cpu_ns.values())
        return total / 1e9

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_child(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(spec)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_curl(args: list[str]) -> dict[str, Any]:
    """Runs curl, returns its time_total, status and ru_maxrss (KiB) from wait4."""
    p = subprocess.Popen(["curl", "-sS", "--noproxy", "*", "-w", "%{time_total} %{http_code}", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    out = p.stdout.read().decode()
    err = p.stderr.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    fields = out.strip().split()
    if p.returncode != 0 or not fields or not fields[-1].startswith("2"):
        raise RuntimeError(f"curl {' '.join(args)} failed ({p.returncode}): {out[-500:]} {err[-500:]}")
    return {"seconds": float(fields[-2]), "hwm_kb": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime,
            "ctx_switches": ru.ru_nvcsw + ru.ru_nivcsw}


def make_file(path: Path, size: int) -> None:
    block = os.urandom(16 * MIB)  # incompressible; nothing on the path compresses anyway
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n


class Bench:
    def __init__(self, workdir: Path, emulators: dict[str, Emulator]) -> None:
        self.workdir = workdir
        self.emu = emulators
        self.counter = 0
        self.curl_base_kb = 0

    def unique(self, data: Path, tag: str) -> Path:
        """A uniquely named symlink to the data file: every upload is a new file on the platform."""
        self.counter += 1
        link = self.workdir / f"{tag}-{self.counter}-{data.name}"
        link.symlink_to(data)
        return link

    def case(self, case: dict[str, Any]) -> dict[str, Any]:
        """Runs one transfer; returns its measurements (server CPU included)."""
        kind = case["kind"]
        emu: Emulator = self.emu[case["emulator"]]
        data: Path = case["data"]
        # The previous case's gigabyte is still being written back to disk; without this, it
        # competes with whichever case comes next (untimed).
        os.sync()
        cpu0 = emu.cpu_seconds()
        cleanup: list[Path] = []
        if kind in ("sensorium_upload", "archetypeai_upload"):
            link = self.unique(data, kind.split("_")[0])
            cleanup.append(link)
            spec = {"base": emu.api, "key": API_KEY, "path": str(link)}
            if kind == "sensorium_upload":
                spec["concurrency"] = case.get("concurrency")
            else:
                spec["max_workers"] = case.get("max_workers", 8)
            r = run_child(kind, spec)
            emu.delete(link.name)
        elif kind in ("pyreqwest_put", "curl_put"):
            # A part URL of a new upload for every PUT: the server then writes a new file, as it
            # does for sensorium's own upload. Reusing one URL overwrote pages the storage had
            # already allocated, which cost the server half the CPU and flattered the PUTs.
            size = data.stat().st_size
            fresh = emu.call("POST", "/files/uploads/initiate", {
                "filename": f"single-{self.counter}.bin", "file_type": "application/octet-stream", "num_bytes": size})
            self.counter += 1
            if len(fresh["parts"]) != 1:
                raise RuntimeError(f"expected one part, got {len(fresh['parts'])}")
            cpu0 = emu.cpu_seconds()
            url = fresh["parts"][0]["url"]
            if kind == "pyreqwest_put":
                r = run_child(kind, {"url": url, "path": str(data), "chunk": case.get("chunk", MIB)})
            else:
                r = run_curl(["-f", "-T", str(data), "-o", "/dev/null", url])
            emu.call("POST", f"/files/uploads/{fresh['upload_id']}/abort", {})
        elif kind == "sensorium_download":
            dest = self.workdir / f"dl-{self.counter}.out"
            self.counter += 1
            cleanup.append(dest)
            r = run_child(kind, {"base": emu.api, "key": API_KEY, "file_id": case["file_id"], "dest": str(dest)})
            self.check_size(dest, data)
        elif kind in ("curl_download", "curl_download_fsync"):
            dest = self.workdir / f"dl-{self.counter}.out"
            self.counter += 1
            cleanup.append(dest)
            r = run_curl(["-f", "-H", f"Authorization: Bearer {API_KEY}", "-o", str(dest),
                          f"{emu.api}/files/download/{case['file_id']}"])
            if kind == "curl_download_fsync":  # what sensorium does before renaming: sync_all
                t = time.perf_counter()
                fd = os.open(dest, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
                r["seconds"] += time.perf_counter() - t
            self.check_size(dest, data)
        else:
            raise ValueError(kind)
        if kind.startswith("curl"):
            r["growth_kb"] = r["hwm_kb"] - self.curl_base_kb
        r["server_cpu_s"] = emu.cpu_seconds() - cpu0
        r["bytes"] = data.stat().st_size
        for p in cleanup:
            p.unlink(missing_ok=True)
        return r

    @staticmethod
    def check_size(dest: Path, data: Path) -> None:
        if dest.stat().st_size != data.stat().st_size:
            raise RuntimeError(f"{dest} has {dest.stat().st_size} bytes, expected {data.stat().st_size}")


def rotate(items: list, k: int) -> list:
    k %= max(1, len(items))
    return items[k:] + items[:k]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    secs = [r["seconds"] for r in runs]
    size = runs[0]["bytes"]
    growth = [r["growth_kb"] for r in runs if r.get("growth_kb") is not None]
    return {
        "runs": runs,
        "median_s": statistics.median(secs),
        "gbps": size / 1e9 / statistics.median(secs),
        "gbps_best": size / 1e9 / min(secs),
        "gbps_all": [size / 1e9 / s for s in secs],
        "peak_rss_mb": max(r["hwm_kb"] for r in runs) / 1024,
        "growth_mb": max(growth) / 1024 if growth else None,
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "server_cpu_s": statistics.median(r["server_cpu_s"] for r in runs),
        "ctx_switches": statistics.median(r["ctx_switches"] for r in runs),
    }


def run_group(bench: Bench, cases: list[dict[str, Any]], rounds: int, label: str) -> dict[str, Any]:
    runs: dict[str, list] = {c["name"]: [] for c in cases}
    for r in range(rounds):
        for c in rotate(cases, r):
            print(f"  [{label}] round {r + 1}/{rounds}: {c['name']} ...", file=sys.stderr, flush=True)
            runs[c["name"]].append(bench.case(c))
    return {c["name"]: {**summarize(runs[c["name"]]), "role": c.get("role", "")} for c in cases}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    try:
        out["curl"] = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1]
    except (OSError, IndexError):
        out["curl"] = None
    return out


def ctx_switches(r: dict[str, Any]) -> float:
    return r.get("ctx_switches", statistics.median(x["ctx_switches"] for x in r["runs"]))


def fmt_mb(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f} MB"


def markdown(report: dict[str, Any]) -> str:
    env = report["env"]
    v = env["versions"]
    lines = [f"## Transfer benchmarks, {env['date_utc']}", "",
             f"Machine: {env['cores']} cores ({env['cpu']}), Python {env['python']}. sensorium {v['sensorium']} "
             f"**{env['sensorium_build']} build** ({env['sensorium_core']}); pyreqwest {v['pyreqwest']}, archetypeai "
             f"{v['archetypeai']}, requests {v['requests']}, curl {v['curl']}. Emulators in their own processes on "
             f"127.0.0.1 (data under {env['tmp']}). Mode: {'--quick' if report['quick'] else 'full'}. "
             f"GB/s = 1e9 bytes/s, median of the rounds.", ""]
    goals = report.get("goals", [])
    if goals:
        lines += ["### Goals", "", "| goal | measured | target | |", "|---|---|---|---|"]
        for g in goals:
            lines.append(f"| {g['goal']} | {g['measured']} | {g['target']} | "
                         f"{'met' if g['met'] else '**missed**'} |")
        lines.append("")
    for size_label, sec in report["sizes"].items():
        for group, title in (("upload", "Upload"), ("download", "Download")):
            res = sec.get(group)
            if not res:
                continue
            n_rounds = sec.get("download_rounds", sec["rounds"]) if group == "download" else sec["rounds"]
            lines += [f"### {title}, {size_label} ({n_rounds} rounds, interleaved)", "",
                      "| client | GB/s (median) | best | peak RSS | RSS growth | client CPU | server CPU | "
                      "client context switches |", "|---|---|---|---|---|---|---|---|"]
            for name, r in res.items():
                lines.append(f"| {name} | {r['gbps']:.2f} | {r['gbps_best']:.2f} | {fmt_mb(r['peak_rss_mb'])} | "
                             f"{fmt_mb(r['growth_mb'])} | {r['cpu_s']:.2f} s | {r['server_cpu_s']:.2f} s | "
                             f"{ctx_switches(r):.0f} |")
            lines.append("")
    sweep = report.get("sweep")
    if sweep:
        lines += [f"### Concurrency sweep: sensorium direct upload of 1 GiB ({report['sweep_rounds']} rounds)", "",
                  "| concurrency | GB/s, 400 MiB parts (3 parts) | GB/s, 64 MiB parts (16 parts) | RSS growth (400 / 64) |",
                  "|---|---|---|---|"]
        for n in SWEEP_CONCURRENCY:
            a, b = sweep[f"400MiB c={n}"], sweep[f"64MiB c={n}"]
            lines.append(f"| {n} | {a['gbps']:.2f} ({min(a['gbps_all']):.2f}–{max(a['gbps_all']):.2f}) | "
                         f"{b['gbps']:.2f} ({min(b['gbps_all']):.2f}–{max(b['gbps_all']):.2f}) | "
                         f"{fmt_mb(a['growth_mb'])} / {fmt_mb(b['growth_mb'])} |")
        lines.append("")
    lines.append(f"Machine load (loadavg at start / end): {env['loadavg_start']} / {env.get('loadavg_end')}")
    return "\n".join(lines)


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for size_label, sec in report["sizes"].items():
        up = sec.get("upload", {})
        ours = up.get(NAME_SENSORIUM)
        singles = {k: v for k, v in up.items() if v["role"] == "single"}
        if ours and singles:
            best_name, best = max(singles.items(), key=lambda kv: kv[1]["gbps"])
            ratio = ours["gbps"] / best["gbps"]
            out.append({"goal": f"{size_label} upload >= 90 % of the best single-stream PUT ({best_name})",
                        "measured": f"{ratio:.2f}x ({ours['gbps']:.2f} vs {best['gbps']:.2f} GB/s)",
                        "target": ">= 0.90x", "met": ratio >= 0.9})
        off = up.get(NAME_OFFICIAL)
        if ours and off:
            ratio = ours["gbps"] / off["gbps"]
            out.append({"goal": f"{size_label} upload >= 2x archetypeai's", "measured":
                        f"{ratio:.2f}x ({ours['gbps']:.2f} vs {off['gbps']:.2f} GB/s)", "target": ">= 2x",
                        "met": ratio >= 2})
        if ours and size_label.startswith("4"):
            out.append({"goal": "4 GiB upload: RSS growth < 64 MB", "measured": fmt_mb(ours["growth_mb"]),
                        "target": "< 64 MB", "met": (ours["growth_mb"] or 0) < 64})
        dl = sec.get("download", {})
        if NAME_DL in dl and NAME_CURL_DL in dl:
            ratio = dl[NAME_DL]["gbps"] / dl[NAME_CURL_DL]["gbps"]
            out.append({"goal": f"{size_label} download >= 90 % of curl's", "measured":
                        f"{ratio:.2f}x ({dl[NAME_DL]['gbps']:.2f} vs {dl[NAME_CURL_DL]['gbps']:.2f} GB/s)",
                        "target": ">= 0.90x", "met": ratio >= 0.9})
    return out


NAME_SENSORIUM = "sensorium files.upload(direct), default concurrency, 400 MiB parts"
NAME_OFFICIAL = "archetypeai direct_upload(max_workers=8), 400 MiB parts"
NAME_DL = "sensorium files.download"
NAME_CURL_DL = "curl -o file"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 GiB only, fewer rounds")
    parser.add_argument("--no-sweep", action="store_true", help="skip the concurrency sweep")
    parser.add_argument("--download-4g", action="store_true",
                        help="also time downloads of the 4 GiB file (slow against this emulator: minutes)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="upload rounds per size (default 3, or 2 with --quick and for 4 GiB); the page cache's "
                             "writeback makes single rounds vary by 2x on a small VM")
    parser.add_argument("--no-download", action="store_true", help="skip the download cases")
    parser.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the data files and the emulators' storage go (default: /tmp)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--report", type=Path, metavar="JSON", help="print the markdown of an earlier run's JSON")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return
    if args.report:
        print(markdown(json.loads(args.report.read_text())))
        return

    started = time.perf_counter()
    sizes = [("1 GiB", GIB)] if args.quick else [("1 GiB", GIB), ("4 GiB", 4 * GIB)]
    need = sum(s for _, s in sizes) * 3 + GIB
    free = shutil.disk_usage(args.tmp).free
    if free < need:
        raise SystemExit(f"{args.tmp} has {free / GIB:.1f} GiB free; this needs about {need / GIB:.0f} GiB")
    workdir = Path(tempfile.mkdtemp(prefix="sensorium-transfers-", dir=args.tmp))
    emulators: dict[str, Emulator] = {}
    report: dict[str, Any] = {"quick": args.quick, "sizes": {}}
    try:
        import sensorium._core as core

        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "unknown")
        report["env"] = {
            "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "versions": versions(), "sensorium_build": measure.build_profile(), "sensorium_core": core.__file__,
            "tmp": str(args.tmp), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        }
        biggest = max(s for _, s in sizes)
        emulators["default"] = Emulator("default", None, workdir)
        emulators["single"] = Emulator("single", 2 * biggest, workdir)  # one part covers the whole file
        if not args.no_sweep:
            emulators["small"] = Emulator("small", SMALL_PART, workdir)
        report["emulators"] = {k: e.command for k, e in emulators.items()}
        bench = Bench(workdir, emulators)
        # curl's own footprint: a curl that fetches a few bytes.
        bench.curl_base_kb = run_curl(["-o", "/dev/null", emulators["default"].root + "/"])["hwm_kb"]
        report["curl_baseline_rss_kb"] = bench.curl_base_kb

        for label, size in sizes:
            rounds = args.rounds or ((2 if args.quick else 3) if size <= GIB else 2)
            print(f"[{time.perf_counter() - started:6.1f}s] {label}: writing the data file ...", file=sys.stderr,
                  flush=True)
            data = workdir / f"data-{size // MIB}MiB.bin"
            make_file(data, size)
            upload_cases = [
                {"name": NAME_SENSORIUM, "kind": "sensorium_upload", "emulator": "default", "data": data,
                 "role": "ours"},
                {"name": "sensorium files.upload(direct), one part (single stream)", "kind": "sensorium_upload",
                 "emulator": "single", "data": data, "concurrency": 1, "role": "context"},
                {"name": "curl -T (single PUT to one part URL)", "kind": "curl_put", "emulator": "single",
                 "data": data, "role": "single"},
                {"name": "pyreqwest SyncClient PUT, 1 MiB chunks (single stream)", "kind": "pyreqwest_put",
                 "emulator": "single", "data": data, "role": "single"},
                {"name": NAME_OFFICIAL, "kind": "archetypeai_upload", "emulator": "default", "data": data,
                 "role": "official"},
            ]
            sec: dict[str, Any] = {"rounds": rounds, "bytes": size}
            sec["upload"] = run_group(bench, upload_cases, rounds, f"{label} upload")

            if args.no_download or (size > GIB and not args.download_4g):
                report["sizes"][label] = sec
                data.unlink()
                continue
            # Downloads: the file is put on the default emulator once (not timed).
            link = bench.unique(data, "dl")
            run_child("sensorium_upload", {"base": emulators["default"].api, "key": API_KEY, "path": str(link)})
            link.unlink()
            dl_cases = [
                {"name": NAME_DL, "kind": "sensorium_download", "emulator": "default", "data": data,
                 "file_id": link.name},
                {"name": NAME_CURL_DL, "kind": "curl_download", "emulator": "default", "data": data,
                 "file_id": link.name},
                {"name": "curl -o file, then fsync (what sensorium's download also does)",
                 "kind": "curl_download_fsync", "emulator": "default", "data": data, "file_id": link.name},
            ]
            sec["download"] = run_group(bench, dl_cases, 2, f"{label} download")
            sec["download_rounds"] = 2
            emulators["default"].delete(link.name)

            if size == GIB and not args.no_sweep:
                sweep_rounds = 2
                cases = []
                for n in SWEEP_CONCURRENCY:
                    cases.append({"name": f"400MiB c={n}", "kind": "sensorium_upload", "emulator": "default",
                                  "data": data, "concurrency": n})
                    cases.append({"name": f"64MiB c={n}", "kind": "sensorium_upload", "emulator": "small",
                                  "data": data, "concurrency": n})
                report["sweep"] = run_group(bench, cases, sweep_rounds, "sweep")
                report["sweep_rounds"] = sweep_rounds
            report["sizes"][label] = sec
            data.unlink()
    finally:
        for e in emulators.values():
            e.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report["env"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report["goals"] = goals(report)
    report["total_seconds"] = time.perf_counter() - started
    measure.write_report(report, markdown(report), args.out, "transfers-", args.quick)


if __name__ == "__main__":
    main()
