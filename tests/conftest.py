"""Shared fixtures: a fresh emulator per test (so files and faults never leak between tests)
and clients bound to it."""

from __future__ import annotations

import signal

import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config):
    """The Ctrl-C tests need SIGINT to reach Python. A shell without job control starts its
    background commands (and `nohup` its command) with SIGINT ignored, which Python then leaves
    ignored, and every child a test starts inherits that: there, those tests would fail for want
    of a signal, not for a defect. A handler set here is reset to the default in children at exec,
    so they get Python's own again."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def emu():
    """A fresh emulator, private to the test."""
    from sensorium.testing import Emulator

    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def client(emu):
    """A blocking client bound to ``emu`` with the default options."""
    with emu.client() as c:
        yield c


@pytest.fixture
def api_key(emu):
    return emu.api_key


@pytest.fixture(autouse=True)
def _isolated_upload_records(tmp_path_factory, monkeypatch):
    """Each test keeps its own record of unfinished uploads (not the user's ~/.cache); child
    processes a test starts inherit it."""
    monkeypatch.setenv("SENSORIUM_CACHE_DIR", str(tmp_path_factory.mktemp("sensorium-cache")))


@pytest.fixture(params=["sync", "async"])
def client_kind(request):
    """"sync" or "async": with ``_helpers.run_on``, one test covers both clients."""
    return request.param
