"""The SDK's direct-to-cloud upload against the emulator's: round trips, part faults, expired
URLs and resume, seen through ``client.files.upload``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator

import pytest

from sensorium.errors import TransferError
from sensorium.testing import Emulator

from _helpers import write

PART = 1024 * 1024


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(upload_part_size=PART) as e:
        yield e




def downloaded(emu: Emulator, name: str) -> str:
    import urllib.request

    req = urllib.request.Request(
        f"{emu.base_url}/files/download/{name}", headers={"Authorization": f"Bearer {emu.api_key}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return hashlib.sha256(resp.read()).hexdigest()


def part_puts(emu: Emulator) -> list[tuple[int, int]]:
    return [(int(r.path.rsplit("/", 1)[1]), r.status) for r in emu.requests if r.method == "PUT"]


@pytest.mark.parametrize("size", [0, 1, PART, 3 * PART + 7])
def test_direct_upload_round_trip(emu: Emulator, tmp_path: Path, size: int) -> None:
    path, digest = write(tmp_path, f"f{size}.bin", size)
    with emu.client() as client:
        rec = client.files.upload(path, method="direct")
    assert rec.file_id == f"f{size}.bin"
    assert downloaded(emu, f"f{size}.bin") == digest
    assert all("authorization" not in r.headers for r in emu.requests if r.method == "PUT")


def test_part_faults_are_retried(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "rows.jsonl", 3 * PART)
    emu.inject_upload_part(2, action="reset")
    emu.inject_upload_part(3, status=503)
    with emu.client(max_retries=2) as client:
        client.files.upload(path, concurrency=1)
    assert downloaded(emu, "rows.jsonl") == digest
    assert sorted(part_puts(emu)) == [(1, 200), (2, 0), (2, 200), (3, 200), (3, 503)]


def test_interrupted_upload_resumes_with_missing_parts_only(emu: Emulator, tmp_path: Path) -> None:
    path, digest = write(tmp_path, "big.bin", 4 * PART)
    # Part 3 fails for good on the first run (a 400 is not retried), so the run stops part-way;
    # with one part at a time, parts 1 and 2 are sent and checkpointed before it.
    emu.inject_upload_part(3, status=400, times=None)
    with emu.client(max_retries=0) as client:
        with pytest.raises(TransferError) as info:
            client.files.upload(path, method="direct", concurrency=1)
        assert info.value.resumable and info.value.upload_id
        emu.clear_faults()
        emu.expire_upload_urls()  # the old URLs are useless; a resume gets fresh ones
        emu.clear_requests()
        client.files.upload(path, method="direct", concurrency=1)
    assert downloaded(emu, "big.bin") == digest
    # Only what was not checkpointed went again (parts 1 and 2 were, before part 3 failed).
    assert sorted(n for n, _ in part_puts(emu)) == [3, 4]
