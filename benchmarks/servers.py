"""Starts the server the benchmark talks to in a process of its own, so its CPU time is never
counted as the clients'. Only 127.0.0.1 is ever used."""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
_URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost):\d+[^\s'\",]*")
_KEY = re.compile(r"(?:api[ _-]?key|SENSORIUM_API_KEY)\s*[:=]\s*['\"]?([^\s'\",]+)", re.IGNORECASE)


@dataclass
class Server:
    kind: str  # "emulator" or "standin"
    base_url: str
    api_key: str
    process: subprocess.Popen
    command: list[str]
    output: collections.deque = field(default_factory=lambda: collections.deque(maxlen=200))
    _thread_ns: dict = field(default_factory=dict)  # last schedstat run time seen per thread

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        """CPU the server process has used so far (Linux /proc): the sum of its live threads'
        schedstat run time (nanoseconds), else utime+stime (clock ticks, 10 ms steps)."""
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                try:
                    self._thread_ns[task.name] = int((task / "schedstat").read_text().split()[0])
                except (OSError, IndexError, ValueError):
                    continue  # the thread ended between listing and reading: keep its last value
            if self._thread_ns:
                # Threads that ended keep the run time last seen, so the total never goes down.
                return sum(self._thread_ns.values()) / 1e9
        except OSError:
            pass
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def emulator_available() -> bool:
    try:
        return importlib.util.find_spec("sensorium.emulator") is not None
    except (ImportError, ValueError):
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str = "auto", timeout: float = 60.0) -> Server:
    """Starts the emulator (`python -m sensorium.emulator --port N`) or, with kind="standin" (or
    "auto" when the emulator is not installed), the stand-in in benchmarks/standin.py."""
    if kind == "auto":
        kind = "emulator" if emulator_available() else "standin"
    port = _free_port()
    if kind == "emulator":
        command = [sys.executable, "-m", "sensorium.emulator", "--port", str(port)]
    elif kind == "standin":
        command = [sys.executable, str(HERE / "standin.py"), "--port", str(port)]
    else:
        raise ValueError(f"unknown server kind {kind!r}")
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, text=True
    )
    lines: collections.deque = collections.deque(maxlen=200)
    found: dict[str, str] = {}
    ready = threading.Event()

    def drain() -> None:
        # Keeps reading for the server's whole life, so a chatty server never blocks on a full pipe.
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "url" not in found and (m := _URL.search(line)):
                found["url"] = m.group(0).rstrip("/.")
            if "key" not in found and (m := _KEY.search(line)):
                found["key"] = m.group(1)
            if "url" in found and "key" in found:
                ready.set()
        ready.set()

    threading.Thread(target=drain, name="server-output", daemon=True).start()
    deadline = time.monotonic() + timeout
    ready.wait(timeout)
    if "url" not in found or "key" not in found:
        process.kill()
        raise RuntimeError(
            f"{kind} did not print its base URL and API key within {timeout:.0f}s; it printed:\n"
            + "\n".join(lines)
        )
    server = Server(kind, found["url"], found["key"], process, command, lines)
    host_port = re.match(r"https?://([^/]+)", server.base_url)
    assert host_port is not None
    host, _, port_text = host_port.group(1).rpartition(":")
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port_text)), timeout=1).close()
            return server
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"{kind} exited or never accepted connections; it printed:\n" + "\n".join(lines))
