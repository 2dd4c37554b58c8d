"""Configuration: keys and base URLs from arguments or the environment, options, lifecycle."""

from __future__ import annotations

import asyncio
import gc
import os
import select
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import sensorium
from _fake_server import FakeServer, response
from _helpers import REASONER, calls, header
from sensorium.errors import (
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
    SensoriumError,
)


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("SENSORIUM_API_KEY", raising=False)
    monkeypatch.delenv("SENSORIUM_BASE_URL", raising=False)


def root_of(emu) -> str:
    url = emu.base_url.rstrip("/")
    return url[: -len("/v0.5")] if url.endswith("/v0.5") else url


@pytest.mark.parametrize("suffix", ["", "/", "/v0.5", "/v0.5/"])
def test_base_url_with_or_without_version_path(emu, no_env, suffix):
    with sensorium.Client(emu.api_key, root_of(emu) + suffix) as client:
        assert client.base_url == root_of(emu) + "/v0.5"
        assert client.files.info()["num_files"] == 0
    (request,) = calls(emu, "/files/info")
    assert request.path == "/v0.5/files/info"


def test_environment_supplies_key_and_url(emu, no_env, monkeypatch):
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    monkeypatch.setenv("SENSORIUM_BASE_URL", emu.base_url)
    with sensorium.Client() as client:
        assert client.query(REASONER, "hello").status == "completed"


@pytest.mark.parametrize("variable, argument", [("SENSORIUM_BASE_URL", "base_url"),
                                                ("SENSORIUM_AGENTS_BASE_URL", "agents_base_url")])
def test_a_bad_url_in_the_environment_names_the_variable(emu, no_env, monkeypatch, variable, argument):
    """The message said `base_url: ... is not a valid URL` to a caller who passed no base_url."""
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    monkeypatch.setenv("SENSORIUM_BASE_URL", emu.base_url)
    monkeypatch.setenv(variable, "api.sensorium.example/v0.5")
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client()
    assert f"the {variable} environment variable" in str(info.value) and f"{argument}:" not in str(info.value)


def test_arguments_take_precedence_over_environment(emu, no_env, monkeypatch):
    monkeypatch.setenv("SENSORIUM_API_KEY", "sk-not-a-real-key")
    monkeypatch.setenv("SENSORIUM_BASE_URL", "http://127.0.0.1:9/v0.5")
    with sensorium.Client(api_key=emu.api_key, base_url=emu.base_url) as client:
        assert client.files.info()["num_files"] == 0
    # And the other way round: a wrong explicit key is used even though the environment's is right.
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    with sensorium.Client(api_key="sk-wrong-key-0000", base_url=emu.base_url, max_retries=0) as client:
        with pytest.raises(AuthenticationError):
            client.files.info()


def test_missing_key_names_both_ways_to_set_it(no_env):
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client(base_url="http://127.0.0.1:1")
    msg = str(info.value)
    assert "api_key" in msg and "SENSORIUM_API_KEY" in msg
    assert "SENSORIUM_BASE_URL" not in msg
    assert isinstance(info.value, ValueError) and isinstance(info.value, SensoriumError)


def test_missing_base_url_names_both_ways_to_set_it(no_env):
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client(api_key="sk-some-key")
    msg = str(info.value)
    assert "base_url" in msg and "SENSORIUM_BASE_URL" in msg
    assert "SENSORIUM_API_KEY" not in msg


def test_missing_both_names_all_four(no_env):
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client()
    msg = str(info.value)
    for needle in ("api_key", "SENSORIUM_API_KEY", "base_url", "SENSORIUM_BASE_URL"):
        assert needle in msg


@pytest.mark.parametrize("cls", [sensorium.Client, sensorium.AsyncClient])
@pytest.mark.parametrize("arguments", [{}, {"api_key": "sk-x", "base_url": "http://127.0.0.1:1", "max_retries": -1}],
                         ids=["no-key", "bad-option"])
def test_a_client_whose_construction_failed_can_be_shown_with_its_locals(no_env, cls, arguments):
    """The most common first error (no SENSORIUM_API_KEY) could not be shown in a traceback with
    locals (pytest --showlocals, rich, IDEs): the half-built client's repr raised AttributeError
    from inside sensorium. Its repr works at any point of construction."""
    import traceback

    with pytest.raises(SensoriumError) as info:
        cls(**arguments)
    text = "".join(traceback.TracebackException.from_exception(info.value, capture_locals=True).format())
    assert f"self = {cls.__name__}(not configured)" in text, text
    assert repr(cls.__new__(cls)) == f"{cls.__name__}(not configured)"


def test_blank_values_count_as_missing(no_env, monkeypatch):
    monkeypatch.setenv("SENSORIUM_API_KEY", "   ")
    with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY"):
        sensorium.Client(base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="SENSORIUM_BASE_URL"):
        sensorium.Client(api_key="sk-x", base_url="")


def test_async_client_reads_the_same_configuration(no_env):
    with pytest.raises(ConfigurationError, match="SENSORIUM_API_KEY"):
        sensorium.AsyncClient(base_url="http://127.0.0.1:1")


@pytest.mark.parametrize("url", ["https://api.example.com/v0.5/query", "https://api.example.com/gw/v0.5/files/upload/"])
def test_a_pasted_endpoint_url_is_refused_naming_the_base(no_env, url):
    # Not silently turned into ".../v0.5/query/v0.5".
    with pytest.raises(ConfigurationError, match="base_url") as info:
        sensorium.Client(api_key="sk-some-key", base_url=url)
    assert url.split("/v0.5")[0] + "/v0.5" in str(info.value)


@pytest.mark.parametrize("url", ["ftp://example.com", "not a url", "127.0.0.1:8000"])
def test_malformed_base_url_is_rejected(no_env, url):
    with pytest.raises(ConfigurationError) as info:
        sensorium.Client(api_key="sk-some-key", base_url=url)
    assert isinstance(info.value, (SensoriumError, ValueError))
    assert "base_url" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": 0.0}, "timeout"),
        ({"connect_timeout": 0.0}, "connect_timeout"),
        ({"read_timeout": float("nan")}, "read_timeout"),
        ({"max_retries": -1}, "max_retries"),
    ],
)
def test_invalid_options_are_rejected(emu, kwargs, argument):
    with pytest.raises(InvalidArgumentError) as info:
        sensorium.Client(emu.api_key, emu.base_url, **kwargs)
    assert argument in str(info.value)
    with sensorium.Client(emu.api_key, emu.base_url) as client:
        with pytest.raises(InvalidArgumentError):
            client.with_options(**kwargs)


def test_timeout_none_means_no_limit(emu):
    with sensorium.Client(emu.api_key, emu.base_url, timeout=None) as client:
        assert client.timeout is None
        assert client.query(REASONER, "hi").status == "completed"


def test_with_options_returns_a_configured_copy(client):
    copy = client.with_options(timeout=5.0, max_retries=0)
    assert copy is not client
    assert (copy.timeout, copy.max_retries) == (5.0, 0)
    assert (client.timeout, client.max_retries) == (600.0, 2)
    assert copy.base_url == client.base_url
    # Options not given stay as they were.
    again = copy.with_options(max_retries=3)
    assert (again.timeout, again.max_retries) == (5.0, 3)


def test_with_options_timeout_applies_to_calls(emu, client):
    emu.set_query_delay(1.5)
    with pytest.raises(sensorium.errors.APITimeoutError):
        client.with_options(timeout=0.2, max_retries=0).query(REASONER, "slow")
    assert len(calls(emu, "/query")) <= 1


def connections_to(port: int) -> set[int]:
    """The local ports of this machine's TCP connections to ``port`` (the emulator's): the
    connections clients hold to it, busy or idle in their pools."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, remote = row.split()[1:3]
                if int(remote.rsplit(":", 1)[1], 16) == port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


# Defect: a copy with another connect timeout built a connection pool of its own, dropped with
# the copy: a copy per call opened a new connection per call (292 for 300 calls), though the
# docstring says copies share the client's connections.

@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_copies_with_another_connect_timeout_share_connections(emu, client_kind):
    used = set()

    def note_connections():
        used.update(connections_to(emu.port))

    if client_kind == "sync":
        with emu.client(connect_timeout=5) as client:
            for _ in range(20):
                client.with_options(connect_timeout=7).query(REASONER, "x")
                note_connections()
            # A copy of a copy going back to the client's own timeout uses the client's pool.
            client.with_options(connect_timeout=7).with_options(connect_timeout=5).query(REASONER, "x")
            note_connections()
    else:
        async def main():
            async with emu.async_client() as client:
                for _ in range(20):
                    await client.with_options(connect_timeout=7).query(REASONER, "x")
                    note_connections()

        asyncio.run(main())
    # One connection for the copies' timeout (and, sync, one of the client's own for the last).
    assert len(used) <= 2, used


def test_default_headers_are_sent_and_overridable(emu):
    with sensorium.Client(emu.api_key, emu.base_url, default_headers={"X-Team": "vision"}) as client:
        client.files.info()
        assert header(emu.requests[-1], "x-team") == "vision"
        client.with_options(default_headers={"X-Team": "audio"}).files.info()
        assert header(emu.requests[-1], "x-team") == "audio"
        client.files.info()
        assert header(emu.requests[-1], "x-team") == "vision"


def test_with_options_adds_headers_to_the_clients_own(emu):
    """A per-call trace header dropped the client's X-Team and its custom User-Agent."""
    own = {"X-Team": "ml", "User-Agent": "pump-pipeline/1.0"}
    with sensorium.Client(emu.api_key, emu.base_url, default_headers=own) as client:
        traced = client.with_options(default_headers={"X-Trace-Id": "abc", "x-team": "audio"})
        traced.files.info()
        sent = emu.requests[-1]
        assert (header(sent, "x-trace-id"), header(sent, "x-team"), header(sent, "user-agent")) == \
            ("abc", "audio", "pump-pipeline/1.0")
        traced.with_options(max_retries=0).files.info()
        assert header(emu.requests[-1], "x-trace-id") == "abc"


def test_default_headers_cannot_replace_authorization(emu):
    with pytest.raises(InvalidArgumentError, match="api_key"):
        sensorium.Client(emu.api_key, emu.base_url, default_headers={"Authorization": "Bearer other"})


def test_user_agent_and_retry_count_headers(emu, client):
    client.files.info()
    request = emu.requests[-1]
    assert (header(request, "user-agent") or "").startswith("sensorium-python/")
    assert header(request, "x-sensorium-retry-count") == "0"
    assert request.attempt == 1


def test_context_manager_closes_client(emu):
    with emu.client() as client:
        client.files.info()
    with pytest.raises(ClientClosedError, match="closed"):
        client.files.info()
    with pytest.raises(ClientClosedError, match="closed"):
        client.query(REASONER, "hi")
    with pytest.raises(ClientClosedError, match="closed"):
        list(client.models.list())
    assert "closed" in repr(client)


def test_close_is_idempotent_and_blocks_with_options(client):
    client.close()
    client.close()
    with pytest.raises(RuntimeError):
        client.with_options(max_retries=0)


def test_closing_a_copy_leaves_the_original_open(client):
    copy = client.with_options(max_retries=0)
    copy.close()
    assert client.files.info()["num_files"] == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_closing_every_client_closes_their_connections(emu):
    """Clients share connections while any of them is open; when the last one is closed, its
    connections (and the event loops of its blocking calls) are closed too."""

    def descriptors() -> int:
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    async def calls_at_once(client: sensorium.AsyncClient, n: int) -> None:
        await asyncio.gather(*(client.query(REASONER, "x") for _ in range(n)))

    emu.set_query_delay(0.1)
    # Warm-up: the runtime, its threads and the emulator's own descriptors exist from here on.
    with emu.client() as warm:
        warm.files.info()

    async def warm_async() -> None:
        # Closed here, not left to the garbage collector: a client collected later would close
        # its connections in the middle of the count below.
        async with emu.async_client() as aclient:
            await calls_at_once(aclient, 1)

    asyncio.run(warm_async())
    before = descriptors()
    settle = time.monotonic() + 5
    while time.monotonic() < settle:  # until the emulator has closed its side of the warm-up's connections
        time.sleep(0.1)
        now = descriptors()
        if now == before:
            break
        before = now

    with emu.client() as client, ThreadPoolExecutor(4) as pool:
        # Four blocking calls at once (four lanes, four connections), and a copy sharing them.
        list(pool.map(lambda _: client.query(REASONER, "x"), range(4)))
        client.with_options(max_retries=1).files.info()

        async def main() -> None:
            async with emu.async_client() as aclient:
                await calls_at_once(aclient, 4)

        asyncio.run(main())
        assert descriptors() > before
    deadline = time.monotonic() + 5
    while descriptors() != before and time.monotonic() < deadline:
        time.sleep(0.05)  # the emulator closes its side once it reads the FIN
    assert descriptors() == before


def test_repr_shows_base_url(emu, client):
    text = repr(client)
    assert "Client" in text and client.base_url in text
    assert emu.api_key not in text


async def test_async_client_context_and_aclose(emu):
    async with emu.async_client() as client:
        assert (await client.files.info())["num_files"] == 0
        assert "AsyncClient" in repr(client)
    with pytest.raises(ClientClosedError, match="closed"):
        await client.files.info()
    other = emu.async_client()
    await other.aclose()
    with pytest.raises(ClientClosedError, match="closed"):
        await other.query(REASONER, "hi")


def test_async_client_from_environment(emu, no_env, monkeypatch):
    monkeypatch.setenv("SENSORIUM_API_KEY", emu.api_key)
    monkeypatch.setenv("SENSORIUM_BASE_URL", emu.base_url)

    async def main():
        async with sensorium.AsyncClient() as client:
            return await client.query(REASONER, "hello")

    assert asyncio.run(main()).status == "completed"


@pytest.mark.parametrize(
    "given, expected",
    [
        ("https://api.example.com/gateway", "https://api.example.com/gateway/v0.5"),
        ("https://api.example.com/gateway/v0.5/", "https://api.example.com/gateway/v0.5"),
        ("https://api.example.com/v0.6", "https://api.example.com/v0.5"),
        ("https://api.example.com/?x=1#frag", "https://api.example.com/v0.5"),
        ("https://gw.example.com/v1/sensorium", "https://gw.example.com/v1/sensorium/v0.5"),  # a gateway's own v1
    ],
)
def test_base_url_keeps_a_path_prefix(given, expected):
    # Building a client sends nothing, so these hosts are never contacted.
    with sensorium.Client("sk-some-key", given) as client:
        assert client.base_url == expected


# Proxies. The variables are read when a connection pool is built (the first client of a connect
# timeout), so each case runs in a process of its own, started with them set.

def run_in_process(code: str, variables: dict[str, str], *args: str) -> str:
    """``code``'s output, run with ``args`` in a new process whose environment has ``variables``
    and no other proxy or certificate variable. Nothing may go to its stderr."""
    environment = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("SSL_CERT")}
    environment.update(variables)
    done = subprocess.run([sys.executable, "-c", code, *args], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


class SocksServer:
    """A SOCKS5 proxy on 127.0.0.1 (no authentication) that connects every request to
    ``127.0.0.1:target_port``, whatever host it names, and records the host and port named."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.asked: list[tuple[str, int]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = conn.recv(n - len(data))
                if not chunk:
                    raise OSError("closed")
                data += chunk
            return data

        with conn:
            try:
                _, methods = exactly(2)
                exactly(methods)
                conn.sendall(b"\x05\x00")  # no authentication
                _, command, _, kind = exactly(4)
                if kind == 3:  # a host name: socks5h
                    host = exactly(exactly(1)[0]).decode()
                else:
                    host = socket.inet_ntop(socket.AF_INET if kind == 1 else socket.AF_INET6, exactly(4 if kind == 1 else 16))
                port = int.from_bytes(exactly(2), "big")
                self.asked.append((host, port))
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
                conn.sendall(b"\x05\x00\x00\x01" + bytes(4) + bytes(2))
                pipe(conn, upstream)
            except OSError:
                pass

    def close(self) -> None:
        self._sock.close()


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copies bytes both ways until either side closes."""
    with b:
        while True:
            ready, _, _ = select.select([a, b], [], [], 30)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)


LOOPBACK_CALLS = """
import sensorium
from sensorium.testing import Emulator
with Emulator() as emu:
    print(emu.client(max_retries=0).files.info()["num_files"])
    named = emu.base_url.replace("127.0.0.1", "localhost")
    print(sensorium.Client(emu.api_key, named, max_retries=0).files.info()["num_files"])
"""


@pytest.mark.parametrize("variable, scheme", [("HTTP_PROXY", "http"), ("http_proxy", "http"), ("ALL_PROXY", "http"),
                                              ("ALL_PROXY", "socks5h"), ("all_proxy", "socks5")])
def test_loopback_never_goes_through_a_proxy(variable, scheme):
    """With a proxy variable set, calls to the embedded emulator went to the proxy, with the key,
    and failed naming the proxy's answer (or 'unsupported scheme socks5h')."""
    with FakeServer(lambda head: [response(502, b"{}")]) as proxy:
        port = proxy.base_url.split(":")[2].split("/")[0]
        assert run_in_process(LOOPBACK_CALLS, {variable: f"{scheme}://127.0.0.1:{port}"}).split() == ["0", "0"]
        assert proxy.requests == []


PROXIED_CALL = """
import sys, sensorium
client = sensorium.Client("sk-proxied-key-0001", sys.argv[1], max_retries=0)
try:
    print(client.files.info()["num_files"])
except sensorium.errors.SensoriumError as e:
    print(type(e).__name__, e)
"""


def test_a_remote_host_goes_through_the_proxy_and_its_failures_name_it():
    def proxy_answer(head: bytes) -> list[bytes]:
        if b" http://platform.invalid/v0.5/files/info " in head:
            return [response(200, b'{"num_files": 7, "num_bytes": 0}')]
        return [response(502, b"")]

    with FakeServer(proxy_answer) as proxy:
        port = proxy.base_url.split(":")[2].split("/")[0]
        variables = {"HTTP_PROXY": f"http://bob:hunter2@127.0.0.1:{port}"}
        assert run_in_process(PROXIED_CALL, variables, "http://platform.invalid/v0.5") == "7"
        # A gateway's answer that may be the proxy's says so.
        out = run_in_process(PROXIED_CALL, variables, "http://other.invalid/v0.5")
        assert out.startswith("InternalServerError") and f"the proxy http://127.0.0.1:{port} (from HTTP_PROXY)" in out
        assert "hunter2" not in out and "bob" not in out, out
    # A proxy that cannot be reached is named, without its credentials.
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    out = run_in_process(PROXIED_CALL, {"HTTP_PROXY": f"http://bob:hunter2@127.0.0.1:{port}"}, "http://platform.invalid")
    assert out.startswith("APIConnectionError") and f"through the proxy http://127.0.0.1:{port} (from HTTP_PROXY)" in out
    assert "hunter2" not in out, out


@pytest.mark.parametrize("scheme", ["socks5h", "socks5"])
def test_a_socks_proxy_from_all_proxy_is_used(emu, scheme):
    """ALL_PROXY=socks5://... (SSH tunnels, VPN clients) failed every request with 'unsupported scheme'."""
    socks = SocksServer(emu.port)
    try:
        # socks5h hands the host name to the proxy; socks5 resolves it first, so it names one that
        # resolves without a network (and is not loopback, which would go direct).
        host = "platform.invalid" if scheme == "socks5h" else "192.0.2.1"
        base_url = f"http://{host}:{emu.port}/v0.5"
        out = run_in_process(PROXIED_CALL.replace("sk-proxied-key-0001", emu.api_key), {"ALL_PROXY": f"{scheme}://127.0.0.1:{socks.port}"}, base_url)
        assert out == "0"
        assert socks.asked == [(host, emu.port)]
    finally:
        socks.close()


def test_a_client_made_after_the_proxy_variables_change_follows_them(monkeypatch):
    """The variables are read when a connection pool is built; a client made while an earlier one
    was open shared its pool, and so the variables as they were then (a notebook that sets
    HTTP_PROXY, or SSL_CERT_FILE, after a first failure kept failing until restarted)."""
    for name in [k for k in os.environ if "proxy" in k.lower()]:
        monkeypatch.delenv(name)
    with FakeServer(lambda head: [response(200, b'{"num_files": 7, "num_bytes": 0}')]) as proxy:
        with sensorium.Client("sk-first-0001", "http://platform.invalid", max_retries=0):
            monkeypatch.setenv("HTTP_PROXY", proxy.base_url.rsplit("/", 1)[0])
            with sensorium.Client("sk-second-0001", "http://platform.invalid", max_retries=0) as second:
                assert second.files.info()["num_files"] == 7
        assert b"GET http://platform.invalid/v0.5/files/info " in proxy.requests[0]


CERTIFICATES = Path(__file__).parent / "certificates"

TLS_CALLS = """
import os, socket, ssl, sys, threading
import sensorium
certificate, key = sys.argv[1:3]
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(certificate, key)
listener = socket.create_server(("127.0.0.1", 0))
base_url = f"https://127.0.0.1:{listener.getsockname()[1]}"
connections = []
def serve():
    while True:
        conn, _ = listener.accept()
        connections.append(conn)
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(65536)
                tls.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 16\\r\\n\\r\\n{\\"num_files\\": 1}")
        except OSError:
            pass
threading.Thread(target=serve, daemon=True).start()
first = sensorium.Client("sk-tls-test-0001", base_url, max_retries=2)
try:
    print(first.files.info()["num_files"])
except sensorium.errors.APIConnectionError as e:
    print(e)
print(len(connections))
if len(sys.argv) > 3:  # the CA to trust, set while the first client is still open
    os.environ["SSL_CERT_FILE"] = sys.argv[3]
    print(sensorium.Client("sk-tls-test-0001", base_url).files.info()["num_files"])
"""


@pytest.mark.parametrize("certificate, refusal", [
    ("self-signed", "it is a CA certificate serving as the server's own (a self-signed one, most likely)"),
    ("server", "it is not signed by a certificate authority this machine trusts"),
])
def test_a_refused_certificate_is_said_in_words_once_and_not_retried(certificate, refusal):
    """rustls's `invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))`, tried
    max_retries + 1 times, each time printing `failed to verify TLS certificate` to stderr."""
    pem, key = CERTIFICATES / f"{certificate}.pem", CERTIFICATES / f"{certificate}.key"
    message, connections = run_in_process(TLS_CALLS, {}, str(pem), str(key)).splitlines()
    assert message.startswith("connection error: GET https://127.0.0.1:") and "/v0.5/files/info: " in message
    assert f"the server's TLS certificate was refused: {refusal}" in message, message
    assert "set SSL_CERT_FILE to its PEM file" in message and "sk-tls-test" not in message, message
    assert connections == "1"


def test_ssl_cert_file_set_after_a_first_client_is_trusted_by_the_next():
    pem, key = CERTIFICATES / "server.pem", CERTIFICATES / "server.key"
    message, connections, answer = run_in_process(TLS_CALLS, {}, str(pem), str(key), str(CERTIFICATES / "ca.pem")).splitlines()
    assert "not signed by a certificate authority" in message and answer == "1"
