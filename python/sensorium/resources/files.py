"""``client.files``: upload, list, read, download and delete your organization's files."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Sequence, Union

from .._progress import ProgressCallback, reporting, reporting_async
from ..errors import InvalidArgumentError
from ..pagination import AsyncPager, Page, SyncPager
from ..types import FileRecord

if TYPE_CHECKING:
    from .._options import HasCore

StrPath = Union[str, "os.PathLike[str]"]
UploadMethod = Literal["auto", "simple", "direct"]

__all__ = ["Files", "AsyncFiles"]


def _content(data: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(data, str):
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgumentError(
                "data: a str is taken as base64 text and this one is not valid base64; pass the raw "
                "content as bytes instead",
                argument="data",
            ) from None
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"data: expected bytes or base64 str, got {type(data).__name__}", argument="data")


def _file_types(file_type: str | Sequence[str] | None) -> list[str]:
    if file_type is None:
        return []
    if isinstance(file_type, str):
        return file_type.split(",")
    if not isinstance(file_type, (list, tuple)) or not all(isinstance(t, str) for t in file_type):
        raise TypeError(f"file_type: expected a MIME type or a list of them, got {file_type!r:.80}")
    return list(file_type)


def _target(file_id: str, path: StrPath) -> Path:
    # A path ending in a separator names a folder even before it exists (then the download
    # reports the missing folder instead of writing a file named like the folder).
    text = os.fspath(path)
    target = Path(text)
    names_folder = text.endswith(os.sep) or (os.altsep is not None and text.endswith(os.altsep))
    return target / file_id if names_folder or target.is_dir() else target


def _page(raw: dict[str, Any]) -> Page[FileRecord]:
    return Page.from_raw(raw, FileRecord.from_dict)


class Files:
    """Files of your organization. ``file_id`` is the file's name.

    >>> rec = client.files.upload("notes.txt")            # doctest: +SKIP
    >>> [f.file_id for f in client.files.list()]          # doctest: +SKIP
    ['notes.txt']
    """

    def __init__(self, client: HasCore) -> None:
        self._client = client

    def upload(
        self,
        path: StrPath,
        *,
        method: UploadMethod = "auto",
        resume: bool = True,
        concurrency: int | None = None,
        direct_threshold: int | None = None,
        on_progress: Optional[ProgressCallback] = None,
        progress: bool = False,
        content_type: str | None = None,
    ) -> FileRecord:
        """Uploads a file from disk, streamed. Its name becomes its ``file_id``; the type comes from
        the extension (``content_type`` is used only for unknown extensions).

        ``method="auto"`` sends small files in one request and files above ``direct_threshold``
        (default 100 MB) and every JSONL file through the direct-to-cloud flow: parts in parallel
        (``concurrency``), each retried and checkpointed. If that is interrupted (crash, Ctrl-C),
        calling ``upload`` again on the same path resumes it (``resume=True``) and sends only the
        missing parts (if the file was edited since, it is sent afresh instead, so two versions are
        never joined); ``resume=False`` discards the unfinished upload and starts over.
        ``on_progress(bytes_done, bytes_total)`` is called about every 200 ms; ``progress=True``
        shows a tqdm bar.

        >>> client.files.upload("notes.txt").file_id      # doctest: +SKIP
        'notes.txt'
        >>> client.files.upload("recording.jsonl", progress=True)  # doctest: +SKIP
        """
        with reporting(on_progress, progress, os.path.basename(os.fspath(path))) as r:
            raw = self._client._core.upload_file(
                os.fspath(path), content_type, method, resume, concurrency, direct_threshold, r.handle,
                r.tick if r.active else None, False,
            )
        return FileRecord.from_dict(raw)

    def abort_upload(self, upload_id: str) -> None:
        """Discards an unfinished direct upload (``TransferError.upload_id`` names it).

        >>> client.files.abort_upload("upl_123")  # doctest: +SKIP
        """
        self._client._core.abort_upload(upload_id, False)

    def upload_base64(
        self, name: str, data: bytes | bytearray | memoryview | str, *, content_type: str | None = None
    ) -> FileRecord:
        """Uploads in-memory content under ``name`` through the base64 endpoint. ``data`` is the raw
        content as bytes, or base64 text as a str.

        >>> client.files.upload_base64("hello.txt", b"hello").file_id  # doctest: +SKIP
        'hello.txt'
        """
        return FileRecord.from_dict(self._client._core.upload_base64(name, _content(data), content_type, False))

    def list(
        self,
        *,
        file_type: str | Sequence[str] | None = None,
        sort: str | None = None,
        order: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> SyncPager[FileRecord]:
        """Iterates your files lazily, following cursors. ``file_type`` takes one MIME type or several;
        ``sort`` is one of created_at, num_bytes, status, file_id; ``order`` is asc or desc.

        >>> [f.file_id for f in client.files.list(file_type="text/plain")]  # doctest: +SKIP
        ['notes.txt']
        """
        types = _file_types(file_type)

        def fetch(cursor: str | None) -> Page[FileRecord]:
            return _page(self._client._core.list_files(types, sort, order, limit, cursor, False))

        return SyncPager(fetch, after)

    def metadata(self, file_id: str) -> FileRecord:
        """One file's full metadata.

        >>> client.files.metadata("notes.txt").num_bytes  # doctest: +SKIP
        342
        """
        return FileRecord.from_dict(self._client._core.file_metadata(file_id, False))

    def info(self) -> dict[str, Any]:
        """The organization's storage summary, as the platform reports it.

        >>> client.files.info()  # doctest: +SKIP
        {'num_files': 1, 'num_bytes': 342}
        """
        result: dict[str, Any] = self._client._core.files_info(False)
        return result

    def download(
        self,
        file_id: str,
        path: StrPath,
        *,
        on_progress: Optional[ProgressCallback] = None,
        progress: bool = False,
    ) -> Path:
        """Streams a file to ``path`` (a file path, or a folder to save it in under its name). The bytes
        go to a temporary file renamed only when complete: an interrupted download never leaves a
        truncated file under ``path``. Returns the path written. Progress as in :meth:`upload`.

        >>> client.files.download("notes.txt", "/tmp/")  # doctest: +SKIP
        PosixPath('/tmp/notes.txt')
        """
        target = _target(file_id, path)
        with reporting(on_progress, progress, file_id) as r:
            self._client._core.download_file(file_id, os.fspath(target), r.handle, r.tick if r.active else None,
                                             False)
        return target

    def delete(self, file_id: str) -> FileRecord:
        """Deletes a file; it leaves listings at once.

        >>> client.files.delete("notes.txt").is_valid  # doctest: +SKIP
        True
        """
        return FileRecord.from_dict(self._client._core.delete_file(file_id, False))


class AsyncFiles:
    """``Files`` with awaitables. See :class:`Files` for each method."""

    def __init__(self, client: HasCore) -> None:
        self._client = client

    async def upload(
        self,
        path: StrPath,
        *,
        method: UploadMethod = "auto",
        resume: bool = True,
        concurrency: int | None = None,
        direct_threshold: int | None = None,
        on_progress: Optional[ProgressCallback] = None,
        progress: bool = False,
        content_type: str | None = None,
    ) -> FileRecord:
        """See :meth:`Files.upload`."""
        async with reporting_async(on_progress, progress, os.path.basename(os.fspath(path))) as r:
            raw = await self._client._core.upload_file(
                os.fspath(path), content_type, method, resume, concurrency, direct_threshold, r.handle, None, True
            )
        return FileRecord.from_dict(raw)

    async def abort_upload(self, upload_id: str) -> None:
        """See :meth:`Files.abort_upload`."""
        await self._client._core.abort_upload(upload_id, True)

    async def upload_base64(
        self, name: str, data: bytes | bytearray | memoryview | str, *, content_type: str | None = None
    ) -> FileRecord:
        """See :meth:`Files.upload_base64`."""
        return FileRecord.from_dict(await self._client._core.upload_base64(name, _content(data), content_type, True))

    def list(
        self,
        *,
        file_type: str | Sequence[str] | None = None,
        sort: str | None = None,
        order: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> AsyncPager[FileRecord]:
        """See :meth:`Files.list`; use ``async for``."""
        types = _file_types(file_type)

        async def fetch(cursor: str | None) -> Page[FileRecord]:
            return _page(await self._client._core.list_files(types, sort, order, limit, cursor, True))

        return AsyncPager(fetch, after)

    async def metadata(self, file_id: str) -> FileRecord:
        """See :meth:`Files.metadata`."""
        return FileRecord.from_dict(await self._client._core.file_metadata(file_id, True))

    async def info(self) -> dict[str, Any]:
        """See :meth:`Files.info`."""
        result: dict[str, Any] = await self._client._core.files_info(True)
        return result

    async def download(
        self,
        file_id: str,
        path: StrPath,
        *,
        on_progress: Optional[ProgressCallback] = None,
        progress: bool = False,
    ) -> Path:
        """See :meth:`Files.download`."""
        target = _target(file_id, path)
        async with reporting_async(on_progress, progress, file_id) as r:
            await self._client._core.download_file(file_id, os.fspath(target), r.handle, None, True)
        return target

    async def delete(self, file_id: str) -> FileRecord:
        """See :meth:`Files.delete`."""
        return FileRecord.from_dict(await self._client._core.delete_file(file_id, True))
