"""``client.files``: names that need exact encoding or cannot be sent, where a download writes
(symlinks, folders that are files), what a failed write reports, and how ``timeout`` bounds a
transfer's wait for its answer. Each test runs on ``Client`` and ``AsyncClient``."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
from pathlib import Path
from typing import Iterator

import pytest

from _fake_server import FakeServer, response
from _helpers import run_on
from sensorium.errors import APITimeoutError, InvalidArgumentError, NotFoundError


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if "partial" in p.name or p.name.startswith(".sensorium")]


def opts(emu, **extra):
    return dict(api_key=emu.api_key, base_url=emu.base_url, **extra)


# Defect: a tab, CR or LF in a file_id was dropped from the download URL, fetching another file.

def test_download_of_a_name_with_a_tab_gets_that_file(emu, client, client_kind, tmp_path):
    client.files.upload_base64("tab.txt", b"A")
    client.files.upload_base64("tab\t.txt", b"B")
    out = run_on(client_kind, lambda c: c.files.download("tab\t.txt", tmp_path / "out.txt"), **opts(emu))
    assert out.read_bytes() == b"B"
    assert [r.path for r in emu.requests if r.method == "GET"][-1].endswith("/files/download/tab%09.txt")


@pytest.mark.parametrize("name", ["a\rb.txt", "a\nb.txt", "a\r\nb.txt"])
def test_download_of_a_name_with_cr_or_lf_never_fetches_the_stripped_name(emu, client, client_kind, tmp_path, name):
    client.files.upload_base64("ab.txt", b"not this one")
    out = tmp_path / "out.txt"
    with pytest.raises(NotFoundError):
        run_on(client_kind, lambda c: c.files.download(name, out), **opts(emu))
    assert not out.exists()
    assert all(r.path.endswith("/files/download/ab.txt") is False for r in emu.requests if r.method == "GET")


# Defect: CR and LF went raw into the multipart part header (header injection). And a name with whitespace at either end was stored trimmed (the simple upload renamed the
# file without a word; the direct upload sent the bytes, then failed on the name it got back).
CONTROL = "control character"
WHITESPACE = "whitespace"


@pytest.mark.parametrize("name, why", [*[(n, CONTROL) for n in ["a\r\nb.txt", "a\nb.txt", "a\rb.txt", "a\x00b.txt",
                                                                  "a\x1bb.txt", "a\x7fb.txt"]],
                                        (" lead.txt", WHITESPACE), ("trail.jsonl ", WHITESPACE), ("\tlead.csv", WHITESPACE)])
def test_upload_base64_refuses_a_name_that_cannot_be_sent(emu, client_kind, name, why):
    with pytest.raises(InvalidArgumentError, match=why) as info:
        run_on(client_kind, lambda c: c.files.upload_base64(name, b"x"), **opts(emu))
    assert info.value.argument == "name"
    assert emu.requests == []


@pytest.mark.parametrize("method", ["auto", "simple", "direct"])
@pytest.mark.parametrize("name, why", [("a\r\nb.txt", CONTROL), ("a\nb.csv", CONTROL), ("a\x1bb.txt", CONTROL),
                                       (" lead.txt", WHITESPACE), ("trail.jsonl ", WHITESPACE), ("\tlead.csv", WHITESPACE)])
def test_upload_refuses_a_file_whose_name_cannot_be_sent(emu, client_kind, tmp_path, name, why, method):
    path = tmp_path / name
    path.write_bytes(b"x,y\n")
    with pytest.raises(InvalidArgumentError, match=why) as info:
        run_on(client_kind, lambda c: c.files.upload(path, method=method), **opts(emu))
    assert info.value.argument == "path"
    assert emu.requests == []


# Defect: a data of the wrong type was an InvalidArgumentError, not the house's TypeError.

@pytest.mark.parametrize("data", [None, [1, 2], 12345, 1.5, {"a": 1}])
def test_upload_base64_data_of_the_wrong_type_is_a_type_error(emu, client_kind, data):
    with pytest.raises(TypeError, match="data"):
        run_on(client_kind, lambda c: c.files.upload_base64("x.txt", data), **opts(emu))
    assert emu.requests == []


# Defect: downloading onto a symlink replaced the link instead of writing through it.

def test_download_onto_a_symlink_writes_its_target(emu, client, client_kind, tmp_path):
    client.files.upload_base64("new.txt", b"new content")
    links, targets = tmp_path / "links", tmp_path / "targets"
    links.mkdir()
    targets.mkdir()
    target = targets / "real.txt"
    target.write_bytes(b"old")
    link = links / "link.txt"
    link.symlink_to(os.path.relpath(target, links))
    chained = links / "chained.txt"
    chained.symlink_to(link)
    for dest in (link, chained):
        out = run_on(client_kind, lambda c: c.files.download("new.txt", dest), **opts(emu))
        assert out == dest
        assert dest.is_symlink()
        assert target.read_bytes() == b"new content"
        target.write_bytes(b"old")
    assert link.is_symlink() and os.readlink(chained) == str(link)
    assert sorted(p.name for p in links.iterdir()) == ["chained.txt", "link.txt"]
    assert [p.name for p in targets.iterdir()] == ["real.txt"]


def test_download_onto_a_dangling_symlink_creates_its_target(emu, client, client_kind, tmp_path):
    client.files.upload_base64("new.txt", b"fresh")
    link = tmp_path / "link.txt"
    link.symlink_to("made.txt")
    run_on(client_kind, lambda c: c.files.download("new.txt", link), **opts(emu))
    assert link.is_symlink()
    assert (tmp_path / "made.txt").read_bytes() == b"fresh"
    assert leftovers(tmp_path) == []


def test_download_onto_a_symlink_loop_is_an_os_error(emu, client, client_kind, tmp_path):
    client.files.upload_base64("new.txt", b"x")
    loop = tmp_path / "loop.txt"
    loop.symlink_to("loop.txt")
    with pytest.raises(OSError) as info:
        run_on(client_kind, lambda c: c.files.download("new.txt", loop), **opts(emu))
    assert info.value.errno == errno.ELOOP
    assert loop.is_symlink() and leftovers(tmp_path) == []


# Defect: a destination under a regular file was reported as a missing folder.

def test_download_under_a_regular_file_says_it_is_not_a_folder(emu, client, client_kind, tmp_path):
    client.files.upload_base64("a.txt", b"x")
    (tmp_path / "plain").write_bytes(b"I am a file")
    with pytest.raises(InvalidArgumentError, match="is not a folder") as info:
        run_on(client_kind, lambda c: c.files.download("a.txt", tmp_path / "plain" / "a.txt"), **opts(emu))
    assert info.value.argument == "path"
    assert (tmp_path / "plain").read_bytes() == b"I am a file"


# Defect: a failed write lost errno and the OSError subclass for small downloads.

@contextlib.contextmanager
def file_size_limit() -> Iterator[None]:
    """RLIMIT_FSIZE lowered to 1000 bytes (writes past it fail with EFBIG) inside the block
    only, SIGXFSZ ignored so the process lives. Works as root too, unlike a read-only folder.
    The limit is the whole process's: pytest's own report, written to a file, would fail under
    it, so nothing but the call under test runs inside."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("size", [5_000, 6 * 1024 * 1024], ids=["in-memory", "streamed-to-disk"])
def test_download_write_failure_keeps_errno_and_filename(emu, client, client_kind, tmp_path, size):
    client.files.upload_base64("big.txt", b"x" * size)
    dest = tmp_path / "big.txt"
    failure: OSError | None = None
    with file_size_limit():
        try:
            run_on(client_kind, lambda c: c.files.download("big.txt", dest), **opts(emu))
        except OSError as error:
            failure = error
    assert failure is not None, "the download did not fail"
    assert failure.errno == errno.EFBIG
    assert failure.filename == str(dest)
    assert not dest.exists() and leftovers(tmp_path) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("size", [5_000, 6 * 1024 * 1024], ids=["in-memory", "streamed-to-disk"])
def test_download_into_a_read_only_folder_is_a_permission_error(emu, client, client_kind, tmp_path, size):
    client.files.upload_base64("big.txt", b"x" * size)
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    try:
        with pytest.raises(PermissionError) as info:
            run_on(client_kind, lambda c: c.files.download("big.txt", folder / "big.txt"), **opts(emu))
        assert info.value.errno == errno.EACCES and info.value.filename == str(folder / "big.txt")
    finally:
        folder.chmod(0o755)


# Defect: `timeout` did not bound a transfer's wait for the server's answer.

@pytest.mark.timeout(60)
def test_timeout_bounds_the_wait_for_an_upload_answer(emu, client_kind, tmp_path):
    path = tmp_path / "slow.txt"
    path.write_bytes(b"hello")
    emu.inject(None, "/files*", delay=3, times=None)
    with pytest.raises(APITimeoutError, match="timeout"):
        run_on(client_kind, lambda c: c.files.upload(path), **opts(emu, timeout=1, max_retries=0))


@pytest.mark.timeout(60)
def test_timeout_bounds_the_wait_for_a_download_answer(emu, client, client_kind, tmp_path):
    client.files.upload_base64("slow.txt", b"hello")
    emu.inject(None, "/files*", delay=3, times=None)
    out = tmp_path / "slow.txt"
    with pytest.raises(APITimeoutError, match="timeout"):
        run_on(client_kind, lambda c: c.files.download("slow.txt", out), **opts(emu, timeout=1, max_retries=0))
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.timeout(60)
def test_timeout_does_not_cut_a_download_body_that_keeps_moving(client_kind, tmp_path):
    """Once the answer has begun, only a stall (``read_timeout``) ends a transfer: a body that
    trickles in for longer than ``timeout`` completes."""
    body = b"abcdef"
    head = response(200, b"", length=len(body))
    steps: list[bytes | float] = [head]
    for byte in body:
        steps += [0.4, bytes([byte])]
    with FakeServer(lambda _head: steps) as server:
        out = run_on(client_kind, lambda c: c.files.download("t.txt", tmp_path / "t.txt"),
                     api_key="k", base_url=server.base_url, timeout=1, read_timeout=5, max_retries=0)
    assert out.read_bytes() == body
