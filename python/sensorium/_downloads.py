"""Downloading every file a listing names (batch outputs, agent results) into one folder, written
once for both clients: the files move in parallel inside the core, each atomically (a temporary
file renamed when complete), into one byte count; the ones whose presigned URL expired are
listed afresh and fetched again.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Protocol, TypeVar, cast

from ._arguments import flag
from ._core import DOWNLOAD_PARTIAL_PREFIX
from ._endpoints import CollectList, ListRequest, Native, Operation, Surface
from ._progress import ProgressCallback, bar_class
from .errors import (
    APIResponseValidationError, APIStatusError, DownloadError, InvalidArgumentError, _download_error,
)

__all__ = ["DEFAULT_CONCURRENCY", "download_listed"]

# Files in flight at once. Output files are small (tens to hundreds of KB), so a download is
# mostly round trip; 16 keeps a handful of connections busy without flooding the host
# (benchmarks/downloads.py compares 8, 16 and 64).
DEFAULT_CONCURRENCY = 16
MAX_CONCURRENCY = 256
# Failed files named one by one in the raised error's message (``failed`` holds them all).
MESSAGE_NAMES = 10


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


def _same_on_disk(name: str) -> str:
    """``name`` as a file system compares it: case-insensitively on macOS and Windows, and in
    one Unicode form (macOS stores names decomposed), so ``A.csv``, ``a.csv`` and a decomposed
    ``ä.csv`` beside a composed one are one file there. Compared so everywhere, a listing gets the
    same file names on every machine."""
    return unicodedata.normalize("NFC", name).casefold()


# Names Windows keeps for devices, whatever the extension (`aux.csv` opens the AUX device).
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))]
)


def _local_name(filename: str, windows: bool = os.name == "nt") -> str:
    """The file name a server-given ``filename`` is written under: its last component, split at
    ``/`` and ``\\`` alike (a server's name is not a local path, and on Windows a backslash or a
    drive would lead out of the folder), so a listing lands the same on every system. On Windows
    the characters it refuses in a name (``<>:"|?*``, control characters: ``:`` would also name a
    drive or an alternate data stream) become ``_``, trailing dots and spaces (which it drops)
    go, and a device name gets a leading ``_``. ``""`` when nothing usable is left."""
    name = re.split(r"[/\\]", filename)[-1]
    if windows:
        name = re.sub(r'[<>:"|?*\x00-\x1f]', "_", name).rstrip(" .")
        if name.split(".")[0].upper() in _WINDOWS_DEVICES:
            name = "_" + name
    return "" if name in (".", "..") else name


def _source(record: _Listed) -> tuple[str, str]:
    """Where a listed file comes from and the name it is written under (see ``_local_name``).
    A record that cannot be fetched (no ref, no usable name, a field of the wrong JSON type) is
    ``APIResponseValidationError``: the server's data, not the caller's argument, and it costs
    only that file."""
    filename, ref = record.filename, record.ref  # of the wrong type: raises, naming the field
    name = _local_name(filename or "") if ref else ""
    if ref and name:
        return ref, name
    missing = " and ".join(what for what, value in (("filename", filename), ("ref", ref)) if not value)
    reason = f"has no {missing}" if missing else f"has the filename {filename!r}, which names no file"
    raise APIResponseValidationError(f"{record.id} {reason} to download", body=repr(record)[:2000])


def _sources(records: list[L]) -> list[tuple[str, str] | APIResponseValidationError]:
    """Each record's ``_source``, or why it has none."""
    sources: list[tuple[str, str] | APIResponseValidationError] = []
    for record in records:
        try:
            sources.append(_source(record))
        except APIResponseValidationError as unusable:
            sources.append(unusable)
    return sources


def _targets(records: list[L], names: list[str], directory: Path) -> list[Optional[Path]]:
    """Where each file goes: its server-given name from ``names`` (see ``_local_name``), inside
    ``directory``; ``None`` for a record without one. A name listed twice gets the record's id
    before its suffix (and a count after it while that is taken too), so no file overwrites
    another, whatever names the listing holds. Every first use of a name is reserved before any
    renaming, so a renamed file never takes a name the server gave another. A name in the prefix
    of sensorium's temporary download files is renamed so too, less its leading dot: kept, the
    next download into the folder would remove the file as a dead download's leftover."""
    taken: set[str] = set()
    keeps: list[bool] = []
    for name in names:
        ours = name.startswith(DOWNLOAD_PARTIAL_PREFIX)
        keeps.append(bool(name) and not ours and _same_on_disk(name) not in taken)
        if name and not ours:
            taken.add(_same_on_disk(name))
    paths: list[Optional[Path]] = []
    for record, name, keep in zip(records, names, keeps):
        if not name:
            paths.append(None)
            continue
        if not keep:
            stem, suffix = PurePosixPath(name).stem, PurePosixPath(name).suffix
            if name.startswith(DOWNLOAD_PARTIAL_PREFIX):
                stem = stem.removeprefix(".")
            tag = re.sub(r"[^A-Za-z0-9_.-]", "_", record.id)
            name, n = f"{stem}__{tag}{suffix}", 2
            while _same_on_disk(name) in taken:
                name, n = f"{stem}__{tag}_{n}{suffix}", n + 1
            taken.add(_same_on_disk(name))
        paths.append(directory / name)
    return paths


def _fresh_ref(record: _Listed) -> Optional[str]:
    """A record's ref in a listing made again; ``None`` when it has no usable one (the old ref
    is then tried again)."""
    try:
        return record.ref
    except APIResponseValidationError:
        return None


def _summary(records: list[L], paths: list[Optional[Path]], outcomes: list[Any]) -> DownloadError:
    """The first failure, told the whole outcome: its message counts and names every file that
    failed, ``written`` lists the paths written and ``failed`` maps each failed record's id to its
    error (as it came). It stays of the first failure's class, with its status and fields, so
    ``except NotFoundError`` and the like still catch it, and is a ``DownloadError`` too, which
    declares ``written`` and ``failed`` (see ``errors.DownloadError``)."""
    # The core hands back Exception instances (never a KeyboardInterrupt and the like, which it
    # raises), so `DownloadError.failed` declares Exception.
    failed = {record.id: cast(Exception, outcome) for record, outcome in zip(records, outcomes)
              if isinstance(outcome, BaseException)}
    written = [path for path, outcome in zip(paths, outcomes)
               if path is not None and not isinstance(outcome, BaseException)]
    first = next(iter(failed.values()))
    named = [f"{path.name if path else record.id}: {outcome}" for record, path, outcome in zip(records, paths, outcomes)
             if isinstance(outcome, BaseException)]
    # A job of thousands of files that all failed the same way needs the first few, not a page each.
    shown = "; ".join(named[:MESSAGE_NAMES]) + (f"; and {len(named) - MESSAGE_NAMES} more" if len(named) > MESSAGE_NAMES
                                                else "")
    message = f"{len(named)} of {len(records)} files not downloaded ({len(written)} written): {shown}"
    # A copy, so that `failed` keeps each failure as it came, the first one included.
    return _download_error(first, message, written, failed)


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
) -> Operation[list[Path]]:
    """Every file ``listing`` names, into ``directory`` (created when missing); the paths in
    listing order; relative refs resolve against ``surface``'s base URL. A symbolic link in
    ``directory`` under a listed name is replaced by the file, not written through: the server
    chose the names, and the bytes stay in the folder. When some files fail for
    good (a record with no ref or filename among them), the others are still written and the first
    failure is raised, told the whole outcome (see ``_summary``); a listing's bad record is the
    server's data, never blamed on the caller's arguments."""
    in_flight = concurrency_of(concurrency)
    if flag(progress, "progress", optional=False):
        bar_class("on_progress")  # tqdm's absence is told before the listing is read
    records: list[L] = yield CollectList(listing)
    sources = _sources(records)
    paths = _targets(records, [source[1] if isinstance(source, tuple) else "" for source in sources], directory)
    directory.mkdir(parents=True, exist_ok=True)
    refs = [source[0] if isinstance(source, tuple) else "" for source in sources]

    def fetch(indices: list[int]) -> Native[list[Any]]:
        items = [(refs[i], os.fspath(paths[i] or ""), records[i].num_bytes) for i in indices]
        # follow_links=False: the server chose these names, so a link the folder holds under one is
        # replaced, never written through to wherever it points.
        return Native("download_many", (surface, items, in_flight, False),
                      (on_progress, progress, directory.name or "files"))

    usable = [i for i, path in enumerate(paths) if path is not None]
    outcomes: list[Any] = [None if isinstance(source, tuple) else source for source in sources]
    for i, outcome in zip(usable, (yield fetch(usable))):
        outcomes[i] = outcome
    stale = [i for i in usable if _expired(outcomes[i], refs[i])]
    if stale:
        fresh = {record.id: _fresh_ref(record) for record in (yield CollectList(listing))}
        for i in stale:
            refs[i] = fresh.get(records[i].id) or refs[i]
        for i, outcome in zip(stale, (yield fetch(stale))):
            outcomes[i] = outcome
    if any(isinstance(outcome, BaseException) for outcome in outcomes):
        raise _summary(records, paths, outcomes)
    return [path for path in paths if path is not None]
