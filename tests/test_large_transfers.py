"""Large-file transfers through the public API against the emulator: direct-to-cloud uploads
around part boundaries, part faults and expired URLs, resume after a failure, a SIGKILL or a
Ctrl-C, ``resume=False`` and ``abort_upload``, downloads that never leave partial files, and
progress reporting.

Parts are 1 MiB here so that a few MiB span several parts. Processes that are killed or
interrupted run in a child Python talking to this process's emulator.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from sensorium.errors import (
    APIConnectionError,
    ConflictError,
    InvalidArgumentError,
    TransferError,
)
from sensorium.testing import Emulator, RecordedRequest

from _helpers import run_on, write

PART = 1024 * 1024


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(upload_part_size=PART) as e:
        yield e


# --------------------------------------------------------------------------------------------
# helpers




def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetched(client: Any, file_id: str, tmp_path: Path) -> str:
    """sha256 of the file as ``client.files.download`` brings it back."""
    folder = tmp_path / "fetched"
    folder.mkdir(exist_ok=True)
    return sha256_of(client.files.download(file_id, folder / file_id))


def part_puts(emu: Emulator) -> list[tuple[int, int]]:
    """(part number, status) of every storage PUT, in the order recorded."""
    return [(int(r.path.rsplit("/", 1)[1]), r.status) for r in emu.requests if r.method == "PUT"]


def put_numbers(emu: Emulator) -> list[int]:
    return sorted(n for n, _ in part_puts(emu))


def put_upload_ids(emu: Emulator) -> set[str]:
    return {r.path.split("/")[-2] for r in emu.requests if r.method == "PUT"}


def platform_calls(emu: Emulator, suffix: str) -> list[RecordedRequest]:
    return [r for r in emu.requests if r.method == "POST" and r.path.endswith(suffix)]


def fail_part_for_good(emu: Emulator, client: Any, path: Path, part: int) -> TransferError:
    """Runs an upload, one part at a time, in which part ``part`` is refused (400, not retried)
    every time: parts before it are sent and checkpointed, then the upload stops."""
    emu.inject_upload_part(part, status=400, times=None)
    with pytest.raises(TransferError) as info:
        client.files.upload(path, method="direct", concurrency=1)
    emu.clear_faults()
    emu.clear_requests()
    return info.value


class Recorder:
    """An ``on_progress`` callback that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


# --------------------------------------------------------------------------------------------
# round trips


SIZES = [0, 1, PART - 1, PART, PART + 1, 3 * PART + 5]


@pytest.mark.parametrize("size", SIZES)
def test_direct_round_trip_around_part_boundaries(emu: Emulator, tmp_path: Path, size: int) -> None:
    path, digest = write(tmp_path, f"r{size}.bin", size)
    with emu.client() as client:
        rec = client.files.upload(path, method="direct")
        assert rec.file_id == path.name
        assert fetched(client, path.name, tmp_path) == digest
    # One PUT per part, each part once, and no platform upload for it.
    expected_parts = list(range(1, max(1, -(-size // PART)) + 1))
    assert put_numbers(emu) == expected_parts
    assert not platform_calls(emu, "/files")


@pytest.mark.parametrize("size", [0, PART + 1, 3 * PART + 5])
async def test_direct_round_trip_async(emu: Emulator, tmp_path: Path, size: int) -> None:
    path, digest = write(tmp_path, f"a{size}.bin", size)
    async with emu.async_client() as client:
        rec = await client.files.upload(path, method="direct", concurrency=2)
        assert rec.file_id == path.name
        target = await client.files.download(path.name, tmp_path / "back.bin")
    assert sha256_of(target) == digest
    assert put_numbers(emu) == list(range(1, max(1, -(-size // PART)) + 1))


def test_auto_picks_direct_above_threshold_and_simple_at_or_below(emu: Emulator, tmp_path: Path) -> None:
    at, at_digest = write(tmp_path, "at.csv", PART)
    above, above_digest = write(tmp_path, "above.csv", PART + 1)
    with emu.client() as client:
        client.files.upload(at, direct_threshold=PART)
        assert len(platform_calls(emu, "/files")) == 1
        assert not part_puts(emu) and not platform_calls(emu, "/initiate")
        emu.clear_requests()

        client.files.upload(above, direct_threshold=PART)
        assert not platform_calls(emu, "/files")
        assert len(platform_calls(emu, "/initiate")) == 1
        assert put_numbers(emu) == [1, 2]

        assert fetched(client, "at.csv", tmp_path) == at_digest
        assert fetched(client, "above.csv", tmp_path) == above_digest


async def test_auto_sends_jsonl_direct_whatever_its_size(emu: Emulator, tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    big, big_digest = write(tmp_path, "big.jsonl", 2 * PART + 3)
    async with emu.async_client() as client:
        await client.files.upload(small)
        await client.files.upload(big)
        assert not platform_calls(emu, "/files")
        assert len(platform_calls(emu, "/initiate")) == 2
        back = await client.files.download("small.jsonl", tmp_path / "small.back")
        big_back = await client.files.download("big.jsonl", tmp_path / "big.back")
    assert back.read_bytes() == small.read_bytes()
    assert sha256_of(big_back) == big_digest


def test_auto_sends_jsonl_named_by_content_type_direct(emu: Emulator, client_kind: str, tmp_path: Path) -> None:
    """Issue 3: "always for JSONL (application/x-ndjson)", whether the extension or content_type
    says it is JSONL."""
    path = tmp_path / "rows.bin"
    path.write_bytes(b'{"a": 1}\n')
    options = {"api_key": emu.api_key, "base_url": emu.base_url}
    rec = run_on(client_kind, lambda c: c.files.upload(path, content_type="application/x-ndjson"), **options)
    assert rec.file_id == "rows.bin"
    assert not platform_calls(emu, "/files")
    assert len(platform_calls(emu, "/initiate")) == 1


# --------------------------------------------------------------------------------------------
# part faults


@pytest.mark.parametrize(
    "fault",
    [{"status": 500}, {"status": 503}, {"action": "reset"}],
    ids=["500", "503", "reset"],
)
def test_part_fault_is_retried_and_only_that_part_resent(
    emu: Emulator, tmp_path: Path, fault: dict[str, Any]
) -> None:
    path, digest = write(tmp_path, "faulty.bin", 3 * PART)
    emu.inject_upload_part(2, **fault)
    with emu.client(max_retries=1) as client:
        client.files.upload(path, method="direct", concurrency=1)
        assert fetched(client, path.name, tmp_path) == digest
    failed = 0 if fault.get("action") == "reset" else fault["status"]
    assert part_puts(emu) == [(1, 200), (2, failed), (2, 200), (3, 200)]


def test_part_answer_truncated_still_completes(emu: Emulator, tmp_path: Path) -> None:
    # A part's answer is an empty 200 with an ETag; cutting "half its body" leaves the whole
    # (empty) answer, so the part counts as stored. The upload must still come out whole.
    path, digest = write(tmp_path, "cut.bin", 3 * PART)
    emu.inject_upload_part(2, action="truncate")
    with emu.client(max_retries=1) as client:
        client.files.upload(path, method="direct", concurrency=1)
        assert fetched(client, path.name, tmp_path) == digest
    assert [n for n, _ in part_puts(emu)].count(2) in (1, 2)
    assert sorted(set(put_numbers(emu))) == [1, 2, 3]


def test_expired_urls_are_refreshed_not_counted_as_retries(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "expiring.bin", 4 * PART)
    # Part 2 waits 0.6 s before the storage looks at its URL: progress ticks meanwhile, and the
    # callback expires every URL issued so far (all four came with initiate).
    emu.inject_upload_part(2, delay=0.6)
    expired: list[int] = []

    def on_progress(done: int, total: int) -> None:
        if not expired and done >= PART:
            emu.expire_upload_urls()
            expired.append(done)

    with emu.client(max_retries=0) as client:
        client.files.upload(path, method="direct", concurrency=1, on_progress=on_progress)
        assert fetched(client, path.name, tmp_path) == digest
    assert expired, "the progress callback never ran while part 2 was held"
    # Part 1 went before the expiry; parts 2-4 each met 403 once, got a fresh URL and went again.
    assert part_puts(emu) == [(1, 200), (2, 403), (2, 200), (3, 403), (3, 200), (4, 403), (4, 200)]
    refreshes = platform_calls(emu, "/parts/urls")
    assert len(refreshes) == 3
    import json

    assert sorted(json.loads(bytes(r.body or b"{}"))["part_numbers"] for r in refreshes) == [[2], [3], [4]]


def test_part_failing_for_good_is_resumable_and_resume_sends_the_rest(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "stubborn.jsonl", 3 * PART)
    emu.inject_upload_part(2, status=503, times=None)
    with emu.client(max_retries=1) as client:
        with pytest.raises(TransferError) as info:
            client.files.upload(path, concurrency=1)
        err = info.value
        assert err.resumable is True
        assert err.upload_id and err.upload_id.startswith("upl_")
        assert err.upload_id in str(err)
        # Part 2 was tried once and retried once; part 3 never started.
        assert part_puts(emu) == [(1, 200), (2, 503), (2, 503)]

        emu.clear_faults()
        emu.clear_requests()
        client.files.upload(path, concurrency=1)
        assert put_numbers(emu) == [2, 3]
        assert put_upload_ids(emu) == {err.upload_id}
        assert fetched(client, path.name, tmp_path) == digest


def test_failed_complete_is_resumable_and_resume_sends_no_part_again(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "last-step.jsonl", 2 * PART)
    emu.inject("POST", "/files/uploads/*/complete", status=500)
    with emu.client(max_retries=0) as client:
        with pytest.raises(TransferError) as info:
            client.files.upload(path)
        assert info.value.resumable and info.value.upload_id
        assert put_numbers(emu) == [1, 2]
        emu.clear_requests()
        client.files.upload(path)
        assert part_puts(emu) == []
        assert len(platform_calls(emu, "/complete")) == 1
        assert fetched(client, path.name, tmp_path) == digest


def test_parts_stored_before_a_sibling_fails_are_not_sent_again(emu: Emulator, tmp_path: Path) -> None:
    # The TransferError says "Parts already sent are kept". Here part 1 is stored (PUT 200) and
    # its checkpoint is on its way when part 2 fails for good; the resume must not send part 1
    # again. (With 400 MiB parts and 4 in flight, one failure must not throw away the others.)
    path, digest = write(tmp_path, "siblings.jsonl", 3 * PART)
    emu.inject("POST", "/files/uploads/*/parts/checkpoint", delay=0.5)
    emu.inject_upload_part(2, status=400, delay=0.2, times=None)
    with emu.client(max_retries=0) as client:
        with pytest.raises(TransferError) as info:
            client.files.upload(path, concurrency=2)
        assert info.value.resumable
        assert (1, 200) in part_puts(emu)
        time.sleep(0.6)  # let the delayed checkpoint land, if it was sent at all
        emu.clear_faults()
        emu.clear_requests()
        client.files.upload(path, concurrency=2)
        assert fetched(client, path.name, tmp_path) == digest
    puts = put_numbers(emu)
    assert 1 not in puts, f"part 1 was stored before the failure and was sent again: {part_puts(emu)}"
    assert 2 in puts and len(puts) == len(set(puts))


async def test_cancelled_async_upload_is_resumable(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "cancelled.jsonl", 3 * PART)
    emu.inject_upload_part(2, delay=30)
    async with emu.async_client() as client:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.files.upload(path, concurrency=1), 1.0)
        assert put_numbers(emu) == [1]
        emu.clear_faults()
        emu.clear_requests()
        await client.files.upload(path, concurrency=1)
        assert put_numbers(emu) == [2, 3]
        back = await client.files.download(path.name, tmp_path / "back")
    assert sha256_of(back) == digest


def test_resume_false_aborts_the_unfinished_upload_and_resends_everything(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "again.jsonl", 4 * PART)
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, path, 3)
        assert err.resumable and err.upload_id

        client.files.upload(path, resume=False, concurrency=2)
        aborts = platform_calls(emu, "/abort")
        assert [r.path.split("/")[-2] for r in aborts] == [err.upload_id]
        assert put_numbers(emu) == [1, 2, 3, 4]
        assert err.upload_id not in put_upload_ids(emu)
        assert fetched(client, path.name, tmp_path) == digest


@pytest.mark.parametrize("other", ["another file of the same name and size", "no local record of it"])
def test_an_unfinished_upload_not_started_from_this_file_here_is_never_joined(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    # The platform offers any unfinished upload of the same (name, type, size) for resuming; its
    # parts may hold another file's bytes (another folder, another machine), so they must not
    # be completed with this file's remaining parts.
    first, _ = write(tmp_path, "data.jsonl", 3 * PART)
    (tmp_path / "second").mkdir()
    second, digest = write(tmp_path / "second", "data.jsonl", 3 * PART)
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, first, 3)
        assert err.resumable and err.upload_id
        if other == "no local record of it":  # a fresh container, another machine, a Dask worker
            monkeypatch.setenv("SENSORIUM_CACHE_DIR", str(tmp_path / "empty-cache"))
            second.unlink()
            second, digest = write(tmp_path, "data.jsonl", 3 * PART)  # same path, new bytes

        client.files.upload(second, concurrency=2)
        assert [r.path.split("/")[-2] for r in platform_calls(emu, "/abort")] == [err.upload_id]
        assert put_numbers(emu) == [1, 2, 3]
        assert err.upload_id not in put_upload_ids(emu)
        assert fetched(client, "data.jsonl", tmp_path) == digest


def test_abort_upload_discards_it_and_the_next_upload_starts_fresh(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "dropped.jsonl", 3 * PART)
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, path, 3)
        assert err.upload_id
        client.files.abort_upload(err.upload_id)
        assert [r.path.split("/")[-2] for r in platform_calls(emu, "/abort")] == [err.upload_id]
        emu.clear_requests()

        client.files.upload(path)  # resume=True, but there is nothing left to resume
        assert put_numbers(emu) == [1, 2, 3]
        assert err.upload_id not in put_upload_ids(emu)
        assert fetched(client, path.name, tmp_path) == digest


async def test_abort_upload_async(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "adropped.jsonl", 2 * PART)
    emu.inject_upload_part(2, status=400, times=None)
    async with emu.async_client(max_retries=0) as client:
        with pytest.raises(TransferError) as info:
            await client.files.upload(path, concurrency=1)
        assert info.value.resumable and info.value.upload_id
        emu.clear_faults()
        await client.files.abort_upload(info.value.upload_id)
        emu.clear_requests()
        await client.files.upload(path)
        assert put_numbers(emu) == [1, 2]
        back = await client.files.download(path.name, tmp_path / "back")
    assert sha256_of(back) == digest


def test_existing_file_id_conflicts_before_any_byte_is_sent(emu: Emulator, tmp_path: Path) -> None:
    path, _ = write(tmp_path, "taken.jsonl", 2 * PART)
    with emu.client() as client:
        client.files.upload(path)
        emu.clear_requests()
        with pytest.raises(ConflictError):
            client.files.upload(path)
        with pytest.raises(ConflictError):
            client.files.upload(path, method="direct", resume=False)
    assert part_puts(emu) == []
    assert not platform_calls(emu, "/complete")


# --------------------------------------------------------------------------------------------
# progress


def test_upload_progress_is_monotonic_and_ends_exactly_at_total(emu: Emulator, tmp_path: Path) -> None:
    size = 4 * PART + 17
    path, _ = write(tmp_path, "watched.bin", size)
    emu.inject_upload_part(3, delay=0.5)  # so the callback also runs mid-upload
    seen = Recorder()
    with emu.client() as client:
        client.files.upload(path, method="direct", concurrency=1, on_progress=seen)
    assert len(seen.calls) >= 2, seen.calls
    assert seen.calls[-1] == (size, size)
    dones = [d for d, _ in seen.calls]
    assert dones == sorted(dones), seen.calls
    assert all(t in (0, size) and d <= size for d, t in seen.calls), seen.calls
    assert any(0 < d < size for d, _ in seen.calls), seen.calls


def test_upload_progress_after_a_retried_part_still_ends_at_total(emu: Emulator, tmp_path: Path) -> None:
    # A failed part's bytes are taken back off (so the count may drop), and the end is exact.
    size = 3 * PART
    path, _ = write(tmp_path, "retried.bin", size)
    emu.inject_upload_part(2, action="reset")
    seen = Recorder()
    with emu.client(max_retries=1) as client:
        client.files.upload(path, method="direct", concurrency=1, on_progress=seen)
    assert seen.calls[-1] == (size, size)
    assert all(0 <= d <= t for d, t in seen.calls if t), seen.calls


def test_resumed_upload_progress_starts_at_checkpointed_bytes(emu: Emulator, tmp_path: Path) -> None:
    size = 4 * PART
    path, _ = write(tmp_path, "resumed.jsonl", size)
    with emu.client(max_retries=0) as client:
        fail_part_for_good(emu, client, path, 3)  # parts 1 and 2 checkpointed
        emu.inject_upload_part(3, delay=0.5)
        seen = Recorder()
        client.files.upload(path, concurrency=1, on_progress=seen)
    assert put_numbers(emu) == [3, 4]
    assert len(seen.calls) >= 2, seen.calls
    assert all(d >= 2 * PART for d, _ in seen.calls), seen.calls
    assert seen.calls[-1] == (size, size)


def test_empty_file_progress_ends_at_zero_of_zero(emu: Emulator, tmp_path: Path) -> None:
    path, _ = write(tmp_path, "empty.bin", 0)
    up, down = Recorder(), Recorder()
    with emu.client() as client:
        client.files.upload(path, method="direct", on_progress=up)
        client.files.download("empty.bin", tmp_path / "empty.back", on_progress=down)
    assert up.calls[-1] == (0, 0) and down.calls[-1] == (0, 0)


async def test_async_progress_ends_exactly_at_total(emu: Emulator, tmp_path: Path) -> None:
    size = 3 * PART + 1
    path, _ = write(tmp_path, "apro.bin", size)
    emu.inject_upload_part(2, delay=0.5)
    up, down = Recorder(), Recorder()
    async with emu.async_client() as client:
        await client.files.upload(path, method="direct", concurrency=1, on_progress=up)
        await client.files.download(path.name, tmp_path / "apro.back", on_progress=down)
    assert len(up.calls) >= 2 and up.calls[-1] == (size, size), up.calls
    assert [d for d, _ in up.calls] == sorted(d for d, _ in up.calls)
    assert down.calls[-1] == (size, size), down.calls


class Refusal(Exception):
    """What a progress callback raises to stop a transfer."""


def refusing_callback() -> Any:
    def on_progress(done: int, total: int) -> None:
        if done > 0:
            raise Refusal(f"stop at {done} of {total}")

    return on_progress


def test_progress_callback_raising_stops_the_upload(emu: Emulator, client_kind: str, tmp_path: Path) -> None:
    path, _ = write(tmp_path, "stopped.bin", 4 * PART)
    for part in range(1, 5):
        emu.inject_upload_part(part, delay=0.4)
    with pytest.raises(Refusal):
        run_on(client_kind,
               lambda c: c.files.upload(path, method="direct", concurrency=1, on_progress=refusing_callback()),
               base_url=emu.base_url, api_key=emu.api_key)
    assert not platform_calls(emu, "/complete")
    with emu.client() as client:
        assert [f.file_id for f in client.files.list()] == []


def test_progress_callback_raising_stops_the_download(emu: Emulator, client_kind: str, tmp_path: Path) -> None:
    path, _ = write(tmp_path, "held.txt", 64 * 1024)
    with emu.client() as client:
        client.files.upload(path)
    # Half the body arrives, then nothing: the callback sees bytes and raises while the download
    # waits for the rest (for the read timeout; then a retry would fetch it whole).
    emu.inject("GET", "/files/download/held.txt", action="stall", times=1)
    target = tmp_path / "out" / "held.txt"
    target.parent.mkdir()
    with pytest.raises(Refusal):
        run_on(client_kind, lambda c: c.files.download("held.txt", target, on_progress=refusing_callback()),
               base_url=emu.base_url, api_key=emu.api_key, read_timeout=2.0)
    assert list(target.parent.iterdir()) == []


def test_download_progress_reaches_exactly_the_file_size(emu: Emulator, tmp_path: Path) -> None:
    size = 2 * PART + 9
    path, digest = write(tmp_path, "dl.csv", size)
    seen = Recorder()
    with emu.client() as client:
        client.files.upload(path)
        target = client.files.download("dl.csv", tmp_path / "out.csv", on_progress=seen)
    assert sha256_of(target) == digest
    assert seen.calls[-1] == (size, size)
    assert [d for d, _ in seen.calls] == sorted(d for d, _ in seen.calls)


async def test_progress_true_without_tqdm_names_the_argument(emu: Emulator, tmp_path: Path) -> None:
    assert "tqdm" not in sys.modules
    path, _ = write(tmp_path, "bar.jsonl", 10)
    with emu.client() as client:
        with pytest.raises(InvalidArgumentError) as info:
            client.files.upload(path, progress=True)
        assert info.value.argument == "progress"
        with pytest.raises(InvalidArgumentError) as info:
            client.files.download("bar.jsonl", tmp_path / "x", progress=True)
        assert info.value.argument == "progress"
    async with emu.async_client() as aclient:
        with pytest.raises(InvalidArgumentError) as info:
            await aclient.files.upload(path, progress=True)
        assert info.value.argument == "progress"
        with pytest.raises(InvalidArgumentError) as info:
            await aclient.files.download("bar.jsonl", tmp_path / "x", progress=True)
        assert info.value.argument == "progress"
    assert emu.requests == []


# --------------------------------------------------------------------------------------------
# downloads that fail


@pytest.mark.parametrize("action", ["truncate", "reset"])
def test_failed_download_leaves_no_file(emu: Emulator, tmp_path: Path, action: str) -> None:
    # Above the 4 MiB that downloads gather in memory, so the bytes stream to a temporary file.
    path, _ = write(tmp_path, "dl.csv", 6 * 1024 * 1024)
    out = tmp_path / "out"
    out.mkdir()
    with emu.client(max_retries=0) as client:
        client.files.upload(path)
        emu.inject("GET", "/files/download/*", action=action)
        with pytest.raises(APIConnectionError):
            client.files.download("dl.csv", out / "dl.csv")
    assert list(out.iterdir()) == []


def test_failed_download_leaves_an_existing_file_untouched(emu: Emulator, tmp_path: Path) -> None:
    # Above the 4 MiB that downloads gather in memory, so the bytes stream to a temporary file.
    path, _ = write(tmp_path, "dl.csv", 6 * 1024 * 1024)
    out = tmp_path / "out"
    out.mkdir()
    (out / "dl.csv").write_bytes(b"the previous version")
    with emu.client(max_retries=0) as client:
        client.files.upload(path)
        emu.inject("GET", "/files/download/*", action="truncate")
        with pytest.raises(APIConnectionError):
            client.files.download("dl.csv", out)
    assert [p.name for p in out.iterdir()] == ["dl.csv"]
    assert (out / "dl.csv").read_bytes() == b"the previous version"


def test_retried_download_starts_over_and_is_whole(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "dl.csv", 2 * PART)
    out = tmp_path / "out"
    out.mkdir()
    seen = Recorder()
    with emu.client(max_retries=1) as client:
        client.files.upload(path)
        emu.inject("GET", "/files/download/*", action="truncate")
        target = client.files.download("dl.csv", out, on_progress=seen)
    assert target == out / "dl.csv"
    assert sha256_of(target) == digest
    assert [p.name for p in out.iterdir()] == ["dl.csv"]
    assert seen.calls[-1] == (2 * PART, 2 * PART)


# --------------------------------------------------------------------------------------------
# killed and interrupted processes

CHILD = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if the parent ignores SIGINT
    import sensorium

    base_url, api_key, mode, path = sys.argv[1:5]
    client = sensorium.Client(api_key=api_key, base_url=base_url, max_retries=0)

    def report(done, total):
        print(f"progress {done} {total}", flush=True)

    print("started", flush=True)
    try:
        if mode == "upload":
            client.files.upload(path, concurrency=1, on_progress=report)
        else:
            client.files.download(sys.argv[5], path, on_progress=report)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic()!r}", flush=True)
        sys.exit(3)
    """
)


class Child:
    """A child Python running CHILD against ``emu``; its stdout lines are read into a queue."""

    def __init__(self, emu: Emulator, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, emu.base_url, emu.api_key, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def next_line(self, timeout: float) -> Optional[str]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return None
        self.seen.append(line)
        return line

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> None:
        """Waits until ``predicate()`` holds (reading the child's lines meanwhile)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"child ended early: {self.seen} {self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; child said {self.seen}")
            self.next_line(0.02)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def progress(self) -> list[int]:
        return [int(s.split()[1]) for s in self.seen if s.startswith("progress ")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.stop()


def checkpointed(emu: Emulator) -> int:
    return sum(1 for r in platform_calls(emu, "/parts/checkpoint") if r.status == 200)


@pytest.mark.timeout(60)
def test_upload_killed_mid_way_resumes_without_resending_checkpointed_parts(
    emu: Emulator, tmp_path: Path, children: list[Child]
) -> None:
    path, digest = write(tmp_path, "killed.jsonl", 4 * PART)
    emu.inject_upload_part(3, delay=30)  # the child sits in part 3 until it is killed
    child = Child(emu, "upload", str(path))
    children.append(child)
    child.wait_for(lambda: checkpointed(emu) >= 2 and any(d >= 2 * PART for d in child.progress()))
    first_id = put_upload_ids(emu)
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait(timeout=10)
    assert child.proc.returncode == -signal.SIGKILL
    assert "finished" not in child.seen

    emu.clear_faults()
    emu.clear_requests()
    seen = Recorder()
    with emu.client() as client:
        client.files.upload(path, on_progress=seen)  # resume=True is the default
        assert fetched(client, path.name, tmp_path) == digest
    puts = put_numbers(emu)
    assert 1 not in puts and 2 not in puts, puts
    assert puts == [3, 4]
    assert put_upload_ids(emu) == first_id
    assert seen.calls[-1] == (4 * PART, 4 * PART)
    assert all(d >= 2 * PART for d, _ in seen.calls), seen.calls


@pytest.mark.timeout(60)
def test_ctrl_c_stops_an_upload_promptly_and_leaves_it_resumable(
    emu: Emulator, tmp_path: Path, children: list[Child]
) -> None:
    path, digest = write(tmp_path, "interrupted.jsonl", 3 * PART)
    emu.inject_upload_part(2, delay=30)
    child = Child(emu, "upload", str(path))
    children.append(child)
    child.wait_for(lambda: checkpointed(emu) >= 1 and any(d >= PART for d in child.progress()))
    sent_at = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    child.wait_for(lambda: any(s.startswith("interrupted") for s in child.seen), timeout=10)
    stopped_at = float(next(s for s in child.seen if s.startswith("interrupted")).split()[1])
    # CLOCK_MONOTONIC is system-wide: the child's KeyboardInterrupt came long before the 30 s
    # stalled part would have ended (the bound is loose for a loaded 2-core CI machine).
    assert stopped_at - sent_at < 5.0
    assert child.proc.wait(timeout=10) == 3
    assert "finished" not in child.seen

    emu.clear_faults()
    emu.clear_requests()
    with emu.client() as client:
        client.files.upload(path)
        assert fetched(client, path.name, tmp_path) == digest
    assert put_numbers(emu) == [2, 3]


@pytest.mark.timeout(60)
def test_ctrl_c_during_a_download_leaves_no_file(emu: Emulator, tmp_path: Path, children: list[Child]) -> None:
    # Above the 4 MiB that downloads gather in memory, so the bytes stream to a temporary file.
    path, _ = write(tmp_path, "dl.csv", 6 * 1024 * 1024)
    out = tmp_path / "out"
    out.mkdir()
    with emu.client() as client:
        client.files.upload(path)
    emu.inject("GET", "/files/download/*", action="stall")  # half the body, then nothing
    child = Child(emu, "download", str(out / "dl.csv"), "dl.csv")
    children.append(child)
    # Mid-download: bytes have arrived (writes to disk are buffered, so watch progress) and the
    # temporary file exists beside the target.
    child.wait_for(
        lambda: any(s.startswith("progress") and int(s.split()[1]) > 0 for s in child.seen) and any(out.iterdir())
    )
    sent_at = time.monotonic()
    child.proc.send_signal(signal.SIGINT)
    child.wait_for(lambda: any(s.startswith("interrupted") for s in child.seen), timeout=10)
    stopped_at = float(next(s for s in child.seen if s.startswith("interrupted")).split()[1])
    assert stopped_at - sent_at < 5.0  # the stalled body would never end
    assert child.proc.wait(timeout=10) == 3
    assert list(out.iterdir()) == []


def test_a_file_changed_since_the_interrupted_upload_is_sent_afresh(emu: Emulator, tmp_path: Path) -> None:
    """The platform matches unfinished uploads by name, type and size only; a file edited in
    place (same size) must not be completed from old and new parts."""
    path, _ = write(tmp_path, "edited.jsonl", 3 * PART)
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, path, 3)
        assert err.resumable
        new_data = os.urandom(3 * PART)
        with open(path, "r+b") as f:  # same file (inode), same size, new bytes
            f.write(new_data)
        client.files.upload(path, concurrency=1)
        assert put_numbers(emu) == [1, 2, 3], "every part of the new version is sent"
        assert err.upload_id not in put_upload_ids(emu)
        aborted = platform_calls(emu, "/abort")
        assert [r.path.split("/")[-2] for r in aborted] == [err.upload_id]
        assert fetched(client, path.name, tmp_path) == hashlib.sha256(new_data).hexdigest()


def test_an_unchanged_file_still_resumes_where_it_stopped(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "same.jsonl", 3 * PART)
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, path, 3)
        client.files.upload(path, concurrency=1)
        assert put_numbers(emu) == [3]
        assert put_upload_ids(emu) == {err.upload_id}
        assert platform_calls(emu, "/abort") == []
        assert fetched(client, path.name, tmp_path) == digest


def test_a_file_rewritten_as_it_was_with_its_mtime_set_back_is_sent_afresh(emu: Emulator, tmp_path: Path) -> None:
    """A re-export that keeps size and inode and sets the modification time back (``cp -p``,
    ``rsync -t``, data loggers) changes the inode change time, which no user can set back."""
    path, _ = write(tmp_path, "export.jsonl", 3 * PART)
    before = path.stat()
    with emu.client(max_retries=0) as client:
        err = fail_part_for_good(emu, client, path, 3)
        new_data = os.urandom(3 * PART)
        with open(path, "r+b") as f:
            f.write(new_data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
            before.st_size, before.st_mtime_ns, before.st_ino)
        client.files.upload(path, concurrency=1)
        assert put_numbers(emu) == [1, 2, 3], "every part of the new version is sent"
        assert err.upload_id not in put_upload_ids(emu)
        assert fetched(client, path.name, tmp_path) == hashlib.sha256(new_data).hexdigest()


def _changing_during_the_upload(path: Path, change: Any) -> Any:
    """An ``on_progress`` callback that applies ``change(path)`` once, while the upload is under
    way (some bytes sent, not all)."""
    state = {"done": False}

    def on_progress(done: int, total: int) -> None:
        if not state["done"] and 0 < done < total:
            state["done"] = True
            change(path)

    on_progress.state = state  # type: ignore[attr-defined]
    return on_progress


def _rewrite_same_size(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"B" * path.stat().st_size)


def _shrink(path: Path) -> None:
    os.truncate(path, PART // 2)


@pytest.mark.parametrize("change", [_rewrite_same_size, _shrink], ids=["rewritten", "shrunk"])
def test_a_file_changed_during_a_direct_upload_is_not_completed(
    emu: Emulator, client_kind: str, tmp_path: Path, change: Any
) -> None:
    """Parts read before and after an edit would be registered as one file that never existed.
    The upload stops with a clear error, the platform's upload is aborted and nothing is
    registered; the next call sends the file afresh."""
    path = tmp_path / "live.csv"
    path.write_bytes(b"A" * (6 * PART))
    for n in range(1, 7):  # a slow link, so the edit lands while parts are still going
        emu.inject_upload_part(n, delay=0.3, times=None)
    on_progress = _changing_during_the_upload(path, change)
    options = {"api_key": emu.api_key, "base_url": emu.base_url, "max_retries": 0}
    with pytest.raises(TransferError) as info:
        run_on(client_kind, lambda c: c.files.upload(path, method="direct", concurrency=2,
                                                      on_progress=on_progress), **options)
    assert on_progress.state["done"]
    err = info.value
    assert "changed during the upload" in str(err), str(err)
    assert not err.resumable and err.upload_id is None
    assert "signature=" not in str(err) and "?" not in str(err), str(err)
    started = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/initiate")]
    assert len(started) == 1
    assert platform_calls(emu, "/complete") == []
    assert len(platform_calls(emu, "/abort")) == 1
    with emu.client() as client:
        assert [f.file_id for f in client.files.list()] == []
        emu.clear_faults()
        emu.clear_requests()
        client.files.upload(path, method="direct")
        size = path.stat().st_size
        assert put_numbers(emu) == list(range(1, max(1, -(-size // PART)) + 1)), "sent afresh"
        assert fetched(client, path.name, tmp_path) == sha256_of(path)


@pytest.mark.parametrize("change", [_rewrite_same_size, _shrink], ids=["rewritten", "shrunk"])
def test_a_file_changed_during_a_simple_upload_is_not_kept(
    emu: Emulator, client_kind: str, tmp_path: Path, change: Any
) -> None:
    """As for the direct upload: a clear error, not a connection error, and no file on the
    platform that mixes two versions (a rewrite of the same size arrives whole, and is deleted)."""
    path = tmp_path / "rotated.csv"
    with open(path, "wb") as f:
        f.truncate(64 * PART)
    # The emulator waits before reading the body, so the upload is still sending when the
    # file changes.
    emu.inject("POST", "/files", delay=1.0)
    on_progress = _changing_during_the_upload(path, change)
    options = {"api_key": emu.api_key, "base_url": emu.base_url}
    with pytest.raises(TransferError) as info:
        run_on(client_kind, lambda c: c.files.upload(path, method="simple", on_progress=on_progress), **options)
    assert on_progress.state["done"]
    assert "changed during the upload" in str(info.value), str(info.value)
    assert not info.value.resumable
    assert len(platform_calls(emu, "/files")) <= 1, "a changed file is not sent again"
    with emu.client() as client:
        assert [f.file_id for f in client.files.list()] == []
