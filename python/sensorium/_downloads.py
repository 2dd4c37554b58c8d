"""Downloading every file a listing names (batch outputs, agent results) into one folder, written
once for both clients: the files move in parallel inside the core, each atomically (a temporary
file renamed when complete), into one byte count; the ones whose presigned URL expired are
listed afresh and fetched again.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Protocol, TypeVar

from ._endpoints import CollectList, ListRequest, Native, Operation, Surface
from ._progress import ProgressCallback
from .errors import APIStatusError, InvalidArgumentError

__all__ = ["DEFAULT_CONCURRENCY", "download_listed"]

# Files in flight at once. Output files are small (tens to hundreds of KB), so a download is
# mostly round trip; 16 keeps a handful of connections busy without flooding the host
# (benchmarks/downloads.py compares 8, 16 and 64).
DEFAULT_CONCURRENCY = 16
MAX_CONCURRENCY = 256


class _Listed(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def filename(self) -> Optional[str]: ...
    @property
    def ref(self) -> Optional[str]: ...
    @property
    def num_bytes(self) -> Optional[int]: ...


L = TypeVar("L", bound=_Listed)


def concurrency_of(value: Optional[int]) -> int:
    """``concurrency=`` checked before anything is sent."""
    if value is None:
        return DEFAULT_CONCURRENCY
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"concurrency: expected an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidArgumentError(f"concurrency: is {value}; it takes 1 to {MAX_CONCURRENCY}", argument="concurrency")
    return value


def _targets(records: list[L], directory: Path, argument: str) -> list[Path]:
    """Where each file goes: its server-given name, kept inside ``directory`` (only the last
    component is used); a name listed twice gets the record's id before its suffix, so no file
    overwrites another."""
    taken: set[str] = set()
    paths: list[Path] = []
    for record in records:
        name = PurePosixPath(record.filename or "").name
        if not name or not record.ref:
            raise InvalidArgumentError(f"{argument}: {record.id} has no filename or ref to download", argument=argument)
        if name in taken:
            stem = PurePosixPath(name)
            name = f"{stem.stem}__{record.id}{stem.suffix}"
        taken.add(name)
        paths.append(directory / name)
    return paths


def _expired(outcome: Any, reference: str) -> bool:
    """A presigned URL that the storage refused: listing again gives a fresh one. Relative refs
    are authenticated API paths and do not expire."""
    return (isinstance(outcome, APIStatusError) and 400 <= outcome.status_code < 500
            and reference.startswith(("http://", "https://")))


def download_listed(
    listing: ListRequest[L],
    directory: Path,
    *,
    surface: Surface,
    concurrency: Optional[int],
    on_progress: Optional[ProgressCallback],
    progress: bool,
    argument: str,
) -> Operation[list[Path]]:
    """Every file ``listing`` names, into ``directory`` (created when missing); the paths in
    listing order. Relative refs resolve against ``surface``'s base URL. When some files fail for good, the others are still written and the first
    failure is raised."""
    in_flight = concurrency_of(concurrency)
    records: list[L] = yield CollectList(listing)
    paths = _targets(records, directory, argument)
    directory.mkdir(parents=True, exist_ok=True)
    refs = [record.ref or "" for record in records]

    def fetch(indices: list[int]) -> Native[list[Any]]:
        items = [(refs[i], os.fspath(paths[i]), records[i].num_bytes) for i in indices]
        return Native("download_many", (surface, items, in_flight), (on_progress, progress, directory.name or "files"))

    everything = list(range(len(records)))
    outcomes: list[Any] = yield fetch(everything)
    stale = [i for i in everything if _expired(outcomes[i], refs[i])]
    if stale:
        fresh = {record.id: record.ref for record in (yield CollectList(listing))}
        for i in stale:
            refs[i] = fresh.get(records[i].id) or refs[i]
        for i, outcome in zip(stale, (yield fetch(stale))):
            outcomes[i] = outcome
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return paths
