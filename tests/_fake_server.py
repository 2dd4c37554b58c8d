"""A raw-socket HTTP server on 127.0.0.1 that answers with exactly the bytes a test scripts, for
cases the emulator cannot produce (malformed headers, wrong-shaped 200s, bodies that stop)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Iterable, Union

# A script step: bytes to send, or a number of seconds to pause.
Step = Union[bytes, float]


def response(status: int, body: bytes, headers: dict[str, str] | None = None, *, length: int | None = None) -> bytes:
    """The head and body of one HTTP/1.1 answer; ``length`` overrides Content-Length (to promise
    more than is sent)."""
    reason = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 503: "Service Unavailable"}.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body) if length is None else length}",
             "Content-Type: application/json", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class FakeServer:
    """Answers every request with ``script(request_head)``'s steps, then closes the connection.

    Example::

        with FakeServer(lambda head: [response(200, b"{}")]) as server:
            client = sensorium.Client(api_key="k", base_url=server.base_url)
    """

    def __init__(self, script: Callable[[bytes], Iterable[Step]]) -> None:
        self._script = script
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self.requests: list[bytes] = []
        self.bodies: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v0.5"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            head_part, _, rest = head.partition(b"\r\n\r\n")
            length = 0
            for line in head_part.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
            self.requests.append(head_part)
            self.bodies.append(rest)
            for step in self._script(head_part):
                if self._stop.is_set():
                    return
                if isinstance(step, (int, float)):
                    # Pause in slices so stopping the server ends the pause.
                    end = time.monotonic() + step
                    while time.monotonic() < end and not self._stop.is_set():
                        time.sleep(0.05)
                else:
                    conn.sendall(step)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
