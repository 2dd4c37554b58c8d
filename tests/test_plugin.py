"""The pytest plugin shipped in the wheel: its fixtures, directly and in a user's suite."""

from __future__ import annotations

import pytest

import sensorium
from _helpers import REASONER, calls


def test_fixtures_are_available_here(sensorium_emulator, sensorium_client):
    assert sensorium_emulator.base_url.startswith("http://127.0.0.1:")
    assert isinstance(sensorium_client, sensorium.Client)
    assert sensorium_client.base_url.rstrip("/").endswith("/v0.5")
    assert sensorium_client.base_url.startswith(sensorium_emulator.base_url.rstrip("/").removesuffix("/v0.5"))
    assert sensorium_client.query(REASONER, "hi").status == "completed"
    assert len(calls(sensorium_emulator, "/query")) == 1


async def test_async_fixture(sensorium_emulator, sensorium_async_client):
    assert isinstance(sensorium_async_client, sensorium.AsyncClient)
    result = await sensorium_async_client.query(REASONER, "hi")
    assert result.status == "completed"
    assert len(calls(sensorium_emulator, "/query")) == 1


def test_loading_the_plugin_loads_neither_sensorium_nor_numpy():
    """pytest loads the plugin (a pytest11 entry point) in every project of the environment, and
    it loaded all of sensorium with it (the native extension, numpy, asyncio, yaml), doubling the
    start-up of a suite that never uses it. They load when a fixture is first used."""
    import subprocess
    import sys

    code = ("import sys, sensorium.pytest_plugin as plugin\n"
            "print(sorted(m for m in ('sensorium._core', 'sensorium._client', 'numpy', 'asyncio', 'yaml')"
            " if m in sys.modules))\n"
            "print(sorted(n for n in dir(plugin) if n.startswith('sensorium_')))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.splitlines() == ["[]", "['sensorium_async_client', 'sensorium_client', 'sensorium_emulator']"]


def test_the_package_names_resolve_when_first_used():
    """`import sensorium` loads its parts when a name is first used: every public name resolves,
    `from sensorium import *` gives them all, and a name it lacks is an AttributeError."""
    import subprocess
    import sys

    code = ("import sys, sensorium\n"
            "assert 'sensorium._core' not in sys.modules\n"
            "from sensorium import *\n"
            "names = dict(globals())\n"
            "assert all(names[n] is getattr(sensorium, n) for n in sensorium.__all__)\n"
            "assert set(sensorium.__all__) <= set(dir(sensorium))\n"
            "assert isinstance(sensorium.__version__, str) and sensorium.Client.__module__ == 'sensorium._client'\n"
            "try:\n"
            "    sensorium.not_a_name\n"
            "except AttributeError as e:\n"
            "    print(e)\n")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "module 'sensorium' has no attribute 'not_a_name'"


USER_SUITE = '''
import pytest
import sensorium

MODEL = "Reasoner::c2_4_7b_251215a172f6d7"


def test_query(sensorium_client):
    assert sensorium_client.query(MODEL, "hello").status == "completed"


def test_upload_is_visible(sensorium_client, tmp_path):
    (tmp_path / "a.txt").write_text("x")
    sensorium_client.files.upload(tmp_path / "a.txt")
    assert [f.file_id for f in sensorium_client.files.list()] == ["a.txt"]


def test_uploads_do_not_leak_between_tests(sensorium_client):
    assert [f.file_id for f in sensorium_client.files.list()] == []


def test_faults(sensorium_emulator, sensorium_client):
    sensorium_emulator.inject("POST", "/query", status=503, retry_after=0.01, times=1)
    assert sensorium_client.query(MODEL, "hello").status == "completed"
    assert [r.attempt for r in sensorium_emulator.requests if r.path.endswith("/query")] == [1, 2]


def test_faults_do_not_leak_between_tests(sensorium_emulator, sensorium_client):
    assert sensorium_client.query(MODEL, "hello").status == "completed"
    assert len(sensorium_emulator.requests) == 1


async def test_async(sensorium_async_client):
    result = await sensorium_async_client.query(MODEL, "hello")
    assert result.status == "completed"


def test_client_talks_to_the_emulator(sensorium_emulator, sensorium_client):
    assert sensorium_client.base_url.startswith(sensorium_emulator.base_url.rstrip("/").removesuffix("/v0.5"))
'''


def test_plugin_in_a_user_suite(pytester):
    pytester.makepyfile(test_user=USER_SUITE)
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7)


def test_plugin_lists_its_fixtures(pytester):
    pytester.makepyfile(test_empty="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    text = result.stdout.str()
    for name in ("sensorium_emulator", "sensorium_client", "sensorium_async_client"):
        assert name in text


def test_failing_user_test_reports_the_api_error(pytester):
    pytester.makepyfile(
        test_fail='''
def test_missing(sensorium_client):
    sensorium_client.files.metadata("absent.txt")
'''
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NotFoundError*file_not_found*"])


def test_command_line_emulator(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "sensorium.emulator", "--api-key", "sk-cli-test-key", "--query-delay", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        settings = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(2))
        assert settings["SENSORIUM_API_KEY"] == "sk-cli-test-key"
        assert settings["SENSORIUM_BASE_URL"].startswith("http://127.0.0.1:")
        with sensorium.Client(settings["SENSORIUM_API_KEY"], settings["SENSORIUM_BASE_URL"]) as client:
            assert client.query(REASONER, "hi").status == "completed"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - start < 5
        with sensorium.Client(settings["SENSORIUM_API_KEY"], settings["SENSORIUM_BASE_URL"], max_retries=0) as client:
            with pytest.raises(sensorium.errors.APIConnectionError):
                client.files.info()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_emulator_clients_ignore_addresses_left_in_the_environment(monkeypatch, client_kind):
    """SENSORIUM_AGENTS_BASE_URL left in a developer's shell sent the emulator clients' agents
    calls (with the emulator's key) to that other host, and the emulator saw none of them."""
    import asyncio

    from sensorium.testing import Emulator

    monkeypatch.setenv("SENSORIUM_AGENTS_BASE_URL", "http://127.0.0.1:9/elsewhere")
    with Emulator() as emu:
        client = emu.client(max_retries=0) if client_kind == "sync" else emu.async_client(max_retries=0)
        assert client.agents_base_url == emu.base_url
        pager = client.agents.blueprints.list()
        if client_kind == "sync":
            list(pager)
        else:
            async def drain() -> None:
                async for _ in pager:
                    pass
            asyncio.run(drain())
        assert [r.path for r in emu.requests] == ["/v0.5/agents/blueprints"]


def test_the_fixtures_keep_upload_records_out_of_the_users_cache(pytester, tmp_path, monkeypatch):
    cache = tmp_path / "users-cache"
    monkeypatch.setenv("SENSORIUM_CACHE_DIR", str(cache))
    pytester.makepyfile(test_cache=f'''
import os

def test_cache(sensorium_client):
    folder = os.environ["SENSORIUM_CACHE_DIR"]
    assert folder != {str(cache)!r} and os.path.isdir(folder)
''')
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("argv", "flag"), [
    (["--port", "-1"], "--port"),
    (["--port", "70000"], "--port"),
    (["--page-size", "-3"], "--page-size"),
    (["--page-size", "0"], "--page-size"),
    (["--max-upload-bytes", "-5"], "--max-upload-bytes"),
    (["--upload-part-size", "-1"], "--upload-part-size"),
    (["--rate-limit", "0"], "--rate-limit"),
    (["--max-query-size-mb", "-1"], "--max-query-size-mb"),
    (["--session-ttl-sec", "0"], "--session-ttl-sec"),
    (["--api-key", " "], "--api-key"),
])
def test_command_line_errors_name_the_flag(capsys, argv, flag):
    from sensorium import emulator as cli

    with pytest.raises(SystemExit) as ended:
        cli.main(argv)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag} " in err and "Traceback" not in err and "Some(" not in err, err


def test_command_line_port_in_use_is_an_argument_error(capsys):
    import socket

    from sensorium import emulator as cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as ended:
            cli.main(["--port", str(port)])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert f"error: --port {port}" in err and "in use" in err, err
