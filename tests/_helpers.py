"""Helpers shared by the test modules (imported as ``from _helpers import ...``)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

REASONER = "Reasoner::c2_4_7b_251215a172f6d7"
ENCODER = "Encoder::encoder_embeddings_01"

# A valid 1x1 PNG and a minimal JPEG header, enough for the image events' type sniffing.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
JPEG_HEAD = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffd9")


def body_json(request: Any) -> Any:
    """The JSON body the emulator recorded for ``request``."""
    body = request.body
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return json.loads(bytes(body))
    if isinstance(body, str):
        return json.loads(body)
    return body


def header(request: Any, name: str) -> str | None:
    """One header of a recorded request (case-insensitive)."""
    headers = request.headers
    items = headers.items() if hasattr(headers, "items") else headers
    for key, value in items:
        if key.lower() == name.lower():
            return value
    return None


def calls(emu: Any, path: str, method: str | None = None) -> list[Any]:
    """Recorded requests whose path ends with ``path`` (e.g. "/query")."""
    return [
        r
        for r in emu.requests
        if r.path.rstrip("/").endswith(path) and (method is None or r.method.upper() == method.upper())
    ]


def write(tmp_path: Path, name: str, size: int) -> tuple[Path, str]:
    """A file of `size` random bytes, and its sha256."""
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def run_on(kind: str, operation: Any, **client_options: Any) -> Any:
    """Runs ``operation(client)`` on a ``sensorium.Client`` (``kind == "sync"``) or, awaited, on an
    ``AsyncClient`` built with ``client_options``; a pager comes back as the list of its items. One
    test body then covers both clients (with the ``client_kind`` fixture)."""
    import asyncio

    import sensorium

    if kind == "sync":
        with sensorium.Client(**client_options) as client:
            result = operation(client)
            return list(result) if isinstance(result, sensorium.SyncPager) else result

    async def main() -> Any:
        async with sensorium.AsyncClient(**client_options) as client:
            result = operation(client)
            if isinstance(result, sensorium.AsyncPager):
                return [item async for item in result]
            return await result

    return asyncio.run(main())


def use_fake_tqdm(monkeypatch: Any, bar_class: type) -> None:
    """Makes ``from tqdm.auto import tqdm`` give ``bar_class`` for the test (tqdm itself is an
    optional dependency the suite does not install)."""
    import sys
    import types

    fake = types.ModuleType("tqdm.auto")
    fake.tqdm = bar_class  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake)
