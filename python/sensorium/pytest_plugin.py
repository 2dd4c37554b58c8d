"""pytest fixtures for testing code that uses sensorium, against the local emulator.

Installed with the package (entry point ``pytest11``), so the fixtures are available in any
test suite::

    def test_upload(sensorium_client, sensorium_emulator):
        sensorium_emulator.inject("POST", "/files", 503, times=1)
        sensorium_client.files.upload("notes.txt")
        assert [r.status for r in sensorium_emulator.requests] == [503, 200]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import pytest

# pytest loads this module in every project of the environment: sensorium itself (its native
# extension, numpy, asyncio, yaml) is loaded by the fixtures, in the suites that use them.
if TYPE_CHECKING:
    from sensorium import AsyncClient, Client
    from sensorium.testing import Emulator


@pytest.fixture
def sensorium_emulator(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """A started emulator, stopped after the test. For the test's duration the records that let
    an interrupted upload resume are kept in a temporary folder (``SENSORIUM_CACHE_DIR``), not
    in the user's cache, and no test resumes another's upload."""
    from sensorium.testing import Emulator

    monkeypatch.setenv("SENSORIUM_CACHE_DIR", str(tmp_path_factory.mktemp("sensorium-cache")))
    emu = Emulator()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def sensorium_client(sensorium_emulator: Emulator) -> Iterator["Client"]:
    """A ``sensorium.Client`` bound to ``sensorium_emulator``, closed after the test."""
    client = sensorium_emulator.client()
    try:
        yield client
    finally:
        _close(client)


@pytest.fixture
def sensorium_async_client(sensorium_emulator: Emulator) -> Iterator["AsyncClient"]:
    """A ``sensorium.AsyncClient`` bound to ``sensorium_emulator``."""
    client = sensorium_emulator.async_client()
    try:
        yield client
    finally:
        _close(client)


def _close(client: Any) -> None:
    # The client is written concurrently; close it when it knows how, without requiring it.
    close = getattr(client, "close", None)
    if callable(close):
        result = close()
        # An async client's close may return an awaitable; its resources are released by
        # the runtime either way, so it is not awaited from this synchronous fixture.
        aclose = getattr(result, "close", None)
        if callable(aclose):
            aclose()
