"""The exceptions sensorium raises.

Every exception derives from :class:`SensoriumError`. Answers from the platform with a non-2xx
status raise an :class:`APIStatusError` subclass chosen by status; failures to get an answer
raise :class:`APIConnectionError` (or its subclass :class:`APITimeoutError`).

Example::

    import sensorium
    from sensorium.errors import NotFoundError, RateLimitError

    try:
        client.files.metadata("missing.txt")
    except NotFoundError as e:
        print(e.code, e.message, e.error_uid)
"""

from __future__ import annotations

import json as _json
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, TypeVar, cast

__all__ = [
    "SensoriumError",
    "LensEventError",
    "ConfigurationError",
    "ClientClosedError",
    "InvalidArgumentError",
    "APIError",
    "APIStatusError",
    "BadRequestError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "UnprocessableEntityError",
    "RateLimitError",
    "InternalServerError",
    "GatewayTimeoutError",
    "APIConnectionError",
    "APITimeoutError",
    "APIResponseValidationError",
    "QueryFailedError",
    "TransferError",
    "InternalError",
    "AgentRunError",
    "WaitTimeoutError",
    "JobFailedError",
    "EmbedManyError",
    "DownloadError",
    "ErrorDetail",
]


def _state(error: BaseException) -> dict[str, Any]:
    """What a pickled error carries besides its constructor's arguments: every attribute set on
    it, such as a ``DownloadError``'s ``written`` and ``failed`` (restored by
    ``BaseException.__setstate__``; an object in both is stored once). Also ``__cause__`` when it
    pickles: an ``EmbedManyError``'s cause is the error to fix, and a Dask or multiprocessing
    worker's error always reaches its caller pickled (Python drops the cause there)."""
    state = dict(error.__dict__)
    cause = error.__cause__
    if cause is not None:
        try:
            pickle.dumps(cause)
        except Exception:  # an unpicklable cause costs only itself
            pass
        else:
            state["__cause__"] = cause
    return state


class SensoriumError(Exception):
    """Root of every exception sensorium raises."""


class InternalError(SensoriumError):
    """A bug in sensorium itself (an internal panic was caught). The message names the call; the
    details are logged once at error level on the ``sensorium`` logger. Please report it."""


class AgentRunError(SensoriumError):
    """A run (or an evaluation or optimization) ended ``failed``. ``agent`` is its final record,
    ``error`` the failure text and ``logs`` its last log lines (newest first)."""

    def __init__(self, message: str, *, agent: Any = None, error: str | None = None, logs: list[Any] | None = None):
        super().__init__(message)
        self.agent = agent
        self.error = error
        self.logs = list(logs or [])

    def __reduce__(self) -> Any:
        return (_rebuild_agent_run_error, (str(self), self.agent, self.error, self.logs), _state(self))


def _rebuild_agent_run_error(message: str, agent: Any, error: str | None, logs: list[Any]) -> AgentRunError:
    return AgentRunError(message, agent=agent, error=error, logs=logs)


class JobFailedError(SensoriumError):
    """A batch or fine-tuning job ended ``FAILED``. ``job`` is its final record and ``errors`` the
    error texts it carries."""

    def __init__(self, message: str, *, job: Any = None, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.job = job
        self.errors = list(errors or [])

    def __reduce__(self) -> Any:
        return (_rebuild_job_failed_error, (str(self), self.job, self.errors), _state(self))


def _rebuild_job_failed_error(message: str, job: Any, errors: list[str]) -> JobFailedError:
    return JobFailedError(message, job=job, errors=errors)


class EmbedManyError(SensoriumError):
    """Some windows of ``embed_many`` were not embedded. ``partial`` is the float32 array (N,
    channels, 768) with NaN rows for them, ``failed`` their indices (ascending), and
    ``__cause__`` the error to fix.

    Usually a few windows failed (after their retries, or without being sent: a NaN, a wrong
    shape) and every other window was embedded. An error no window can escape (the key refused,
    an unknown model, an address with no encoder) stops the batch instead: nothing more is sent,
    ``__cause__`` is that error, and ``not_sent`` lists the windows never sent (they are in
    ``failed`` too; an iterator is not read further).

    Example::

        try:
            vectors = client.embed_many(model, windows)
        except EmbedManyError as e:
            vectors = e.partial                      # keep the work done
            retry = client.embed_many(model, windows[e.failed])
            vectors[e.failed] = retry
    """

    def __init__(
        self,
        message: str,
        *,
        partial: Any = None,
        failed: list[int] | None = None,
        not_sent: list[int] | None = None,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.failed = list(failed or [])
        self.not_sent = list(not_sent or [])

    def __reduce__(self) -> Any:
        return (_rebuild_embed_many_error, (str(self), self.partial, self.failed, self.not_sent), _state(self))


def _rebuild_embed_many_error(
    message: str, partial: Any, failed: list[int], not_sent: list[int] | None = None
) -> EmbedManyError:
    return EmbedManyError(message, partial=partial, failed=failed, not_sent=not_sent)


class DownloadError(SensoriumError):
    """Some files of a multi-file download (``batch.jobs.download_outputs``,
    ``agents.instances.download_results``) failed for good; the others were written.

    ``written`` lists the paths written (in listing order) and ``failed`` maps each failed file's
    id to its error, as it came. The error raised is the first failure's own class (a
    ``NotFoundError``, ``TransferError``, ``PermissionError``...) made a ``DownloadError`` as
    well, with its status and fields: ``except NotFoundError`` still catches it, and ``except
    DownloadError`` catches these whatever their class. An error that stops the call before any
    file is fetched (an unknown job, a refused key) is not one: nothing was written.

    Example::

        from sensorium.errors import DownloadError

        try:
            paths = client.batch.jobs.download_outputs(job.id, "predictions/")
        except DownloadError as e:
            print(len(e.written), "written;", list(e.failed), "to fetch again")
    """

    written: list[Path]
    failed: dict[str, Exception]

    def __init__(self, message: str, *, written: Optional[list[Path]] = None,
                 failed: Optional[dict[str, Exception]] = None) -> None:
        super().__init__(message)
        self.written = list(written or [])
        self.failed = dict(failed or {})


E = TypeVar("E", bound=BaseException)

# The DownloadError twin of each error class a download has failed with, made once per class
# (so that every NotFoundError a download raises is of one class).
_DOWNLOAD_CLASSES: dict[type[BaseException], type[DownloadError]] = {}
_DOWNLOAD_CLASSES_LOCK = threading.Lock()


def _download_class(cls: type[BaseException]) -> Optional[type[DownloadError]]:
    """``cls`` made a ``DownloadError`` too (a subclass of both, under ``cls``'s name), or
    ``None`` for a class that cannot be combined with it (a layout of its own)."""
    if issubclass(cls, DownloadError):
        return cls
    with _DOWNLOAD_CLASSES_LOCK:
        made = _DOWNLOAD_CLASSES.get(cls)
        if made is None:
            try:
                made = cast(type[DownloadError], type(cls.__name__, (cls, DownloadError), {
                    "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                    # Before the first failure's own __reduce__, which would name this class,
                    # which pickle cannot find by its name.
                    "__reduce__": _reduce_download_error,
                }))
            except TypeError:
                return None
            _DOWNLOAD_CLASSES[cls] = made
        return made


def _transplant(error: BaseException, cls: type[E]) -> E:
    """An instance of ``cls`` holding what ``error`` holds (its args, attributes, cause and, for
    an ``OSError``, errno and file names), without calling ``cls``'s constructor."""
    out: Any = cls.__new__(cls)
    out.__dict__.update(error.__dict__)
    out.args = error.args
    out.__cause__, out.__context__ = error.__cause__, error.__context__
    out.__suppress_context__ = error.__suppress_context__
    if isinstance(error, OSError):
        out.errno, out.strerror = error.errno, error.strerror
        out.filename, out.filename2 = error.filename, error.filename2
    return cast(E, out)


def _reduce_download_error(self: DownloadError) -> Any:
    # Pickled as the first failure's plain class (whose own pickling carries the attributes,
    # `written` and `failed` among them), made a DownloadError again when loaded.
    base = next(c for c in type(self).__bases__ if c is not DownloadError)
    return (_rebuild_download_error, (_transplant(self, base),))


def _rebuild_download_error(plain: BaseException) -> BaseException:
    made = _download_class(type(plain))
    return plain if made is None else _transplant(plain, made)


def _download_error(first: BaseException, message: str, written: list[Path],
                    failed: dict[str, Exception]) -> DownloadError:
    """The error a multi-file download raises: ``first`` (kept as it is, in ``failed``) copied
    into its ``DownloadError`` twin, with ``message`` and the whole outcome."""
    made = _download_class(type(first))
    if made is None:
        error = DownloadError(message, written=written, failed=failed)
        error.__cause__ = first
        return error
    error = _transplant(first, made)
    error.args = (message,)
    if isinstance(error, APIError):
        error.message = message
    elif isinstance(error, OSError) and error.strerror is not None:
        # An OSError with an errno prints its strerror, not its args; the errno stays in args
        # so that a pickled copy keeps it.
        error.strerror = message
        error.args = (error.errno, message)
    error.written, error.failed = written, failed
    return error


class WaitTimeoutError(SensoriumError, TimeoutError):
    """``wait(..., timeout=...)`` ran out before the work ended; ``record`` is the last state seen
    (the work goes on on the platform)."""

    def __init__(self, message: str, *, record: Any = None) -> None:
        super().__init__(message)
        self.record = record


class ConfigurationError(SensoriumError, ValueError):
    """The client is missing its API key or base URL, or they are malformed."""


class ClientClosedError(SensoriumError, RuntimeError):
    """The client was closed (``close()``, or the end of its ``with`` block); make a new one."""


class InvalidArgumentError(SensoriumError, ValueError):
    """An argument was wrong; nothing was sent. ``argument`` names it."""

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class ErrorDetail:
    """One entry of the platform's error list."""

    code: str | None = None
    message: str | None = None
    suggestion: str | None = None
    error_uid: str | None = None


class APIError(SensoriumError):
    """Something went wrong talking to the platform."""

    message: str

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class APIStatusError(APIError):
    """The platform answered with a non-2xx status.

    ``errors`` keeps every entry of the body (the envelope may hold several); ``code``,
    ``suggestion`` and ``error_uid`` come from the first entry that has them. ``body`` is the
    raw text and ``json`` the parsed body, whatever its shape. ``after_lost_response`` is True
    when an earlier attempt of the same call got no answer, so the platform may have acted on
    it: a 409 "already canceled" may then answer the call's own first attempt.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        errors: list[ErrorDetail] | None = None,
        body: str = "",
        json: Any = None,
        method: str = "",
        url: str = "",
        retry_after: float | None = None,
        after_lost_response: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.errors: list[ErrorDetail] = list(errors or [])
        self.body = body
        self.json = json
        self.method = method
        self.url = url
        self.retry_after = retry_after
        self.after_lost_response = after_lost_response

    @property
    def status_code(self) -> int:
        """Alias of ``status``."""
        return self.status

    @property
    def code(self) -> str | None:
        return next((e.code for e in self.errors if e.code), None)

    @property
    def suggestion(self) -> str | None:
        return next((e.suggestion for e in self.errors if e.suggestion), None)

    @property
    def error_uid(self) -> str | None:
        return next((e.error_uid for e in self.errors if e.error_uid), None)

    def has_code(self, code: str) -> bool:
        """Whether any entry carries ``code`` (case-insensitive: legacy codes are uppercase)."""
        wanted = code.lower()
        return any(e.code is not None and e.code.lower() == wanted for e in self.errors)

    def __reduce__(self) -> Any:
        return (
            _rebuild_status_error,
            (type(self), self.message, self.status, self.errors, self.body, self.json,
             self.method, self.url, self.retry_after, self.after_lost_response),
            _state(self),
        )


def _rebuild_status_error(cls: type[APIStatusError], message: str, status: int, errors: list[ErrorDetail],
                          body: str, json: Any, method: str, url: str, retry_after: float | None,
                          after_lost_response: bool = False) -> APIStatusError:
    return cls(message, status=status, errors=errors, body=body, json=json, method=method, url=url,
               retry_after=retry_after, after_lost_response=after_lost_response)


class BadRequestError(APIStatusError):
    """400."""


class AuthenticationError(APIStatusError):
    """401: missing or invalid API key."""


class PermissionDeniedError(APIStatusError):
    """403."""


class NotFoundError(APIStatusError):
    """404."""


class ConflictError(APIStatusError):
    """409: e.g. a file with that name exists, or a state conflict."""


class PayloadTooLargeError(APIStatusError):
    """413."""


class UnprocessableEntityError(APIStatusError):
    """422."""


class RateLimitError(APIStatusError):
    """429 (retried automatically before it is raised)."""


class InternalServerError(APIStatusError):
    """5xx (500, 502, 503 and 504 are retried automatically before they are raised; 501, 505 and
    the others would only repeat and are raised at once)."""


class GatewayTimeoutError(InternalServerError):
    """504: the gateway gave up. Retried like a 500, except the one that ends a ``/query``'s own
    ``max_wait_time_sec``, which is final."""


class APIConnectionError(APIError):
    """No answer: connection refused or reset, DNS or TLS failure, a body cut off.

    ``may_have_been_processed`` is True when the request may have reached the platform and was
    not sent again because repeating it is not safe (a POST that creates something: a bundle, a
    run, a blueprint, a lens...). The platform may have carried it out: check (list or get what it
    would have made) before calling again. Calls that are safe to repeat (GET, PUT, DELETE, queries,
    cancels, uploads) are retried instead, and then this is False.
    """

    def __init__(self, message: str, *, may_have_been_processed: bool = False) -> None:
        super().__init__(message)
        self.may_have_been_processed = may_have_been_processed


class APITimeoutError(APIConnectionError):
    """A timeout fired: connecting, the per-attempt deadline, or a stalled transfer."""


class APIResponseValidationError(APIError):
    """A 2xx answer whose body is not what the platform documents."""

    def __init__(self, message: str, *, body: str = "") -> None:
        super().__init__(message)
        self.body = body


def _json_kind(value: Any) -> str:
    """What JSON value ``value`` is, as the core's messages name it: ``None``, ``a boolean``,
    ``an integer``, ``a float``, ``a string``, ``a list``, ``a dict``."""
    if value is None:
        return "None"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                       (list, "a list"), (dict, "a dict")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _answer_text(data: Any) -> str:
    """A parsed answer as JSON text again (the whole of it, for ``APIResponseValidationError.body``)."""
    try:
        return _json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(data)


class QueryFailedError(APIError):
    """``/query`` answered 200 with ``status: "failed"``: the worker returned an error."""

    def __init__(self, message: str, *, query_id: str = "", error_msg: str = "", response: Any = None) -> None:
        super().__init__(message)
        self.query_id = query_id
        self.error_msg = error_msg
        self.response = response


class LensEventError(APIError):
    """A lens refused an event with a 200-style ``{type: "error", event_data: {is_valid: false,
    error_messages}}`` body (``process_event``, WebSocket calls). ``error_messages`` holds the
    platform's messages and ``body`` the whole answer."""

    def __init__(self, error_messages: list[str], *, body: Any = None) -> None:
        super().__init__("; ".join(m[:500] for m in error_messages)[:1000])
        self.error_messages = list(error_messages)
        self.body = body

    def __reduce__(self) -> Any:
        return (_rebuild_lens_event_error, (self.error_messages, self.body), _state(self))


def _rebuild_lens_event_error(error_messages: list[str], body: Any) -> LensEventError:
    return LensEventError(error_messages, body=body)


class TransferError(APIError):
    """An upload or download stopped part-way. ``resumable`` says whether calling the same upload
    again continues it; ``upload_id`` names the platform's upload (for ``files.abort_upload``)."""

    def __init__(self, message: str, *, resumable: bool = False, upload_id: str | None = None) -> None:
        super().__init__(message)
        self.resumable = resumable
        self.upload_id = upload_id

    def __reduce__(self) -> Any:
        return (_rebuild_transfer_error, (self.message, self.resumable, self.upload_id), _state(self))


def _rebuild_transfer_error(message: str, resumable: bool, upload_id: str | None) -> TransferError:
    return TransferError(message, resumable=resumable, upload_id=upload_id)


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    504: GatewayTimeoutError,
}


def _api_error(
    message: str,
    *,
    status: int,
    errors: list[dict[str, Any]],
    body: str,
    json: Any,
    method: str,
    url: str,
    retry_after: float | None,
    after_lost_response: bool = False,
) -> APIStatusError:
    """Called by the native core to build the exception for a non-2xx answer."""
    cls = _BY_STATUS.get(status) or (InternalServerError if status >= 500 else APIStatusError)
    details = [ErrorDetail(**e) for e in errors]
    return cls(message, status=status, errors=details, body=body, json=json, method=method, url=url,
               retry_after=retry_after, after_lost_response=after_lost_response)
