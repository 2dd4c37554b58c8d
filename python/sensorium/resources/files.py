"""``client.files``: upload, list, read, download and delete your organization's files."""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from .._endpoints import ListRequest, Native, Request, Resource, awaited, query, segment
from .._arguments import StrPath, count, flag, local_path, text, utf8_text
from .._progress import ProgressCallback
from ..errors import InvalidArgumentError
from ..types import FileRecord

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
    raise TypeError(f"data: expected bytes or base64 str, got {type(data).__name__}")


# Sort keys and orders of `GET /files/metadata`. The spec does not name the parameters; these
# follow the platform's other lists (`sort`, `order`).
SORT_FIELDS = ("created_at", "num_bytes", "status", "file_id")
ORDERS = ("asc", "desc")
MAX_FILE_TYPE_FILTERS = 50
#: Parts in flight at most: past this, parallel PUTs into one upload only queue at the storage.
MAX_UPLOAD_CONCURRENCY = 256


def _file_types(file_type: str | Sequence[str] | None) -> Optional[str]:
    """The ``file_type`` filter as sent: one comma-separated list, blank entries left out."""
    if file_type is None:
        return None
    if isinstance(file_type, str):
        types = file_type.split(",")
    elif isinstance(file_type, (list, tuple)) and all(isinstance(t, str) for t in file_type):
        types = list(file_type)
    else:
        raise TypeError(f"file_type: expected a MIME type or a list of them, got {file_type!r:.80}")
    types = [t.strip() for t in types if t.strip()]
    if len(types) > MAX_FILE_TYPE_FILTERS:
        raise InvalidArgumentError(
            f"file_type: has {len(types)} entries; the platform accepts at most {MAX_FILE_TYPE_FILTERS}",
            argument="file_type")
    return ",".join(types) or None


def _file_id(file_id: Any, argument: str = "file_id") -> str:
    """``file_id`` as one path segment; a path or an empty name is refused before sending."""
    if isinstance(file_id, str) and (not file_id or "/" in file_id or "\\" in file_id):
        raise InvalidArgumentError(
            f"{argument}: {file_id!r} is not a file name (file_id is the uploaded file's base name)",
            argument=argument)
    return segment(file_id, argument)


def _choice(value: Optional[str], allowed: Sequence[str], argument: str) -> Optional[str]:
    if value is not None and value not in allowed:
        raise InvalidArgumentError(f"{argument}: is {value!r}; it takes one of {', '.join(allowed)}",
                                   argument=argument)
    return value


def _target(file_id: str, path: StrPath) -> Path:
    # A path ending in a separator names a folder even before it exists (then the download
    # reports the missing folder instead of writing a file named like the folder).
    given = local_path(path, "path")
    if not given:
        # Path("") is the current folder, which the caller did not name (as download_outputs says).
        raise InvalidArgumentError("path: is empty; give a file or a folder ('.' for the current one)", argument="path")
    target = Path(given)
    names_folder = given.endswith(os.sep) or (os.altsep is not None and given.endswith(os.altsep))
    return target / file_id if names_folder or target.is_dir() else target


class Files(Resource):
    """Files of your organization. ``file_id`` is the file's name. Written once for ``Client`` and
    ``AsyncClient`` (``files.pyi`` spells both).

    >>> rec = client.files.upload("notes.txt")            # doctest: +SKIP
    >>> [f.file_id for f in client.files.list()]          # doctest: +SKIP
    ['notes.txt']
    """

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
    ) -> Any:
        """Uploads a file from disk, streamed. Its name becomes its ``file_id``; the type comes from
        the extension (``content_type`` is used only for unknown extensions).

        ``method="auto"`` sends small files in one request and files above ``direct_threshold``
        (default 100 MB) and every JSONL file through the direct-to-cloud flow: parts in parallel
        (``concurrency``), each retried and checkpointed. If that is interrupted (crash, Ctrl-C),
        calling ``upload`` again on the same path resumes it (``resume=True``) and sends only the
        missing parts. Only an upload started from this file on this machine is resumed: if the
        file was edited since, or the platform's unfinished upload of that name and size came from
        another file or machine, that upload is discarded and the file sent afresh, so two files
        are never joined. ``resume=False`` discards the unfinished upload and starts over.
        ``on_progress(bytes_done, bytes_total)`` is called about every 200 ms; ``progress=True``
        shows a tqdm bar.

        >>> client.files.upload("notes.txt").file_id      # doctest: +SKIP
        'notes.txt'
        >>> client.files.upload("recording.jsonl", progress=True)  # doctest: +SKIP
        """
        local = local_path(path, "path")
        if not isinstance(method, str):
            # The core names the choices for a wrong string; anything else would reach it as a
            # conversion error naming no argument.
            raise TypeError(f"method: expected 'auto', 'simple' or 'direct', got {type(method).__name__}")
        flag(progress, "progress", optional=False)
        args = (local, None if content_type is None else utf8_text(content_type, "content_type"), method,
                flag(resume, "resume", optional=False), count(concurrency, "concurrency", 1, MAX_UPLOAD_CONCURRENCY),
                count(direct_threshold, "direct_threshold", 0, 2**62))
        label = os.path.basename(local)
        return self._native(Native("upload_file", args, (on_progress, progress, label), FileRecord.from_dict))

    def abort_upload(self, upload_id: str) -> Any:
        """Discards an unfinished direct upload (``TransferError.upload_id`` names it).

        >>> client.files.abort_upload("upl_123")  # doctest: +SKIP
        """
        path = f"/files/uploads/{segment(upload_id, 'upload_id')}/abort"
        # Discarding twice discards nothing more (the core's own abort is retried the same way).
        return self._call(Request("POST", path, cast=lambda _: None, repeatable=True))

    def upload_base64(
        self, name: str, data: bytes | bytearray | memoryview | str, *, content_type: str | None = None
    ) -> Any:
        """Uploads in-memory content under ``name`` through the base64 endpoint. ``data`` is the raw
        content as bytes, or base64 text as a str.

        >>> client.files.upload_base64("hello.txt", b"hello").file_id  # doctest: +SKIP
        'hello.txt'
        """
        content_type = None if content_type is None else utf8_text(content_type, "content_type")
        return self._native(Native("upload_base64", (name, _content(data), content_type), cast=FileRecord.from_dict))

    def list(
        self,
        *,
        file_type: str | Sequence[str] | None = None,
        sort: str | None = None,
        order: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> Any:
        """Iterates your files lazily, following cursors. ``file_type`` takes one MIME type or several;
        ``sort`` is one of created_at, num_bytes, status, file_id; ``order`` is asc or desc.

        >>> [f.file_id for f in client.files.list(file_type="text/plain")]  # doctest: +SKIP
        ['notes.txt']
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit: expected an int, got {type(limit).__name__}")
        if limit is not None and not 1 <= limit <= 1000:
            raise InvalidArgumentError(f"limit: is {limit}; it takes 1 to 1000", argument="limit")
        params = query(file_type=_file_types(file_type), sort=_choice(sort, SORT_FIELDS, "sort"),
                       order=_choice(order, ORDERS, "order"), limit=limit)
        return self._list(ListRequest("/files/metadata", FileRecord.from_dict, params, start=text(after, "after")))

    def metadata(self, file_id: str) -> Any:
        """One file's full metadata.

        >>> client.files.metadata("notes.txt").num_bytes  # doctest: +SKIP
        342
        """
        return self._call(Request("GET", f"/files/metadata/{_file_id(file_id)}", cast=FileRecord.from_dict))

    def info(self) -> Any:
        """The organization's storage summary, as the platform reports it.

        >>> client.files.info()  # doctest: +SKIP
        {'num_files': 1, 'num_bytes': 342}
        """
        return self._call(Request("GET", "/files/info"))

    def download(
        self,
        file_id: str,
        path: StrPath,
        *,
        on_progress: Optional[ProgressCallback] = None,
        progress: bool = False,
    ) -> Any:
        """Streams a file to ``path`` (a file path, or a folder to save it in under its name). The bytes
        go to a temporary file renamed only when complete: an interrupted download never leaves a
        truncated file under ``path``. A symbolic link at ``path`` is followed, as ``open()`` follows
        it: the file it points at is written and the link kept. Returns the path written. Progress
        as in :meth:`upload`.

        >>> client.files.download("notes.txt", "/tmp/")  # doctest: +SKIP
        PosixPath('/tmp/notes.txt')
        """
        _file_id(file_id)
        flag(progress, "progress", optional=False)
        target = _target(file_id, path)
        step = Native("download_file", (file_id, os.fspath(target)), (on_progress, progress, file_id), lambda _: target)
        return self._native(step)

    def delete(self, file_id: str) -> Any:
        """Deletes a file; it leaves listings at once.

        >>> client.files.delete("notes.txt").is_valid  # doctest: +SKIP
        True
        """
        return self._call(Request("DELETE", f"/files/delete/{_file_id(file_id)}", cast=FileRecord.from_dict))


@awaited("upload", "abort_upload", "upload_base64", "metadata", "info", "download", "delete")
class AsyncFiles(Files):
    """``Files`` with awaitables. See :class:`Files` for each method."""
