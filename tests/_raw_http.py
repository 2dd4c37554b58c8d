"""Raw HTTP to the emulator with the standard library only (no SDK), for wire conformance tests."""

from __future__ import annotations

import http.client
import json
from typing import Any, Optional

from sensorium.testing import Emulator


class Reply:
    def __init__(self, status: int, headers: http.client.HTTPMessage, raw: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw

    def json(self) -> Any:
        return json.loads(self.raw)


def request(
    emu: Emulator,
    method: str,
    path: str,
    body: Optional[bytes] = None,
    *,
    key: Optional[str] = "default",
    headers: Optional[dict[str, str]] = None,
    timeout: float = 30,
) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", emu.port, timeout=timeout)
    try:
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {emu.api_key if key == 'default' else key}"
        prefix = "" if path.startswith(("/_emulator", "/v0.")) else "/v0.5"  # a versioned path is taken as given
        conn.request(method, prefix + path, body=body, headers=h)
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()
