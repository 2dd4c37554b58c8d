"""``client.batch``: batch jobs and the pipeline registry, written once for both clients.

Example::

    job = client.batch.jobs.create("line 3", pipeline_key="machine-state-classification",
                                   inputs={"worker.inference": ["a.csv", "b.csv"]})
    job = client.batch.jobs.wait(job.id, progress=True)     # JobFailedError if it failed
    for failure in client.batch.jobs.failed_inputs(job.id):
        print(failure["input_id"], failure["message"])
"""

from __future__ import annotations

import builtins
import time
from typing import Any, Mapping, Optional

from .._arguments import StrPath, flag, folder, mapping, string, text
from .._arguments import limit as page_size
from .._downloads import download_listed
from .._endpoints import (
    CollectList, ListRequest, Namespace, Operation, Request, Resource, Runner, awaited, query, segment, warn_caller,
)
from .._progress import ProgressCallback
from .._waiting import canceling, check_timeout, error_texts, wait_for
from ..errors import InvalidArgumentError, JobFailedError, NotFoundError, SensoriumError, WaitTimeoutError
from ..types import AgentLog, BatchEvent, BatchJob, BatchOutput, FileRecord, Pipeline
from .fine_tuning import job_status

__all__ = ["Batch", "AsyncBatch"]


# Cursor-style batch lists page with `?limit=N&cursor=<next_cursor>` (CHOICES); offset-style
# pages are recognised and followed with `offset`.
CURSOR = "cursor"
# The platform refuses one job with more inputs than this (413); refused before sending.
MAX_INPUTS = 10_000
# The port that takes a fine-tuning checkpoint (wire notes: `{kind: "checkpoint", checkpoint_id}`).
CHECKPOINT_PORT = "worker.fine_tune_checkpoint"


def _entry(item: Any, port: str) -> dict[str, Any]:
    """One input of a port: a file id, a ``FileRecord``, ``{file_id, metadata}``, or (the
    checkpoint port) a ``Checkpoint``, its ``ckp_`` id or ``{kind: "checkpoint", checkpoint_id}``."""
    from ..types import Checkpoint

    if isinstance(item, Checkpoint):
        return {"kind": "checkpoint", "checkpoint_id": item.id}
    if port == CHECKPOINT_PORT and isinstance(item, str) and item:
        # A string there is a checkpoint id: sent as a file id, the platform refuses it (400).
        return {"kind": "checkpoint", "checkpoint_id": item}
    if isinstance(item, FileRecord):
        item = item.file_id
    if isinstance(item, str) and item:
        return {"file_id": item}
    if isinstance(item, Mapping) and item.get("kind") == "checkpoint" and isinstance(item.get("checkpoint_id"), str) \
            and item["checkpoint_id"]:
        return dict(item)
    if isinstance(item, Mapping) and isinstance(item.get("file_id"), str) and item["file_id"]:
        return dict(item)
    raise InvalidArgumentError(f"inputs: {item!r} on port {port!r} is not a file id, a FileRecord, a "
                               "{file_id, metadata} entry or a checkpoint", argument="inputs")


def _inputs(inputs: Any) -> dict[str, list[dict[str, Any]]]:
    if not isinstance(inputs, Mapping) or not inputs:
        raise InvalidArgumentError("inputs: maps each port name (e.g. 'worker.inference') to its inputs",
                                   argument="inputs")
    out: dict[str, list[dict[str, Any]]] = {}
    for port, items in inputs.items():
        if not isinstance(port, str) or not port:
            raise InvalidArgumentError(f"inputs: port names are strings, got {port!r}", argument="inputs")
        if isinstance(items, (str, Mapping, FileRecord)) or not hasattr(items, "__iter__"):
            items = [items]
        out[port] = [_entry(item, port) for item in items]
        if not out[port]:
            raise InvalidArgumentError(f"inputs: port {port!r} has no inputs; give it at least one or leave it out",
                                       argument="inputs")
    total = sum(len(v) for v in out.values())
    if total > MAX_INPUTS:
        raise InvalidArgumentError(f"inputs: {total} inputs; the platform takes at most {MAX_INPUTS} per job",
                                   argument="inputs")
    return out


def batch_failure(record: Any, _logs: list[AgentLog], what: str) -> SensoriumError:
    # The spec gives batch jobs no `errors` field; some deployments send one (kept in `extra`).
    errors = error_texts(record.extra.get("errors"))
    return JobFailedError(f"{what} failed: {'; '.join(errors) or '(no error given)'}", job=record, errors=errors)


class Jobs(Resource):
    """Batch jobs of your organization."""

    def create(self, name: str, *, pipeline_key: str, inputs: Any, parameters: Optional[Mapping[str, Any]] = None,
               pipeline_type: str = "batch", pipeline_version: Optional[str] = None) -> Any:
        """Starts a batch job of ``pipeline_key`` over ``inputs`` (port name -> inputs: file ids,
        ``FileRecord``s, ``{file_id, metadata}`` entries, a ``Checkpoint`` on the checkpoint port).

        >>> job = client.batch.jobs.create("line 3", pipeline_key="machine-state-classification",  # doctest: +SKIP
        ...                                inputs={"worker.inference": ["a.csv", "b.csv"]})
        >>> job.status  # doctest: +SKIP
        'PENDING'
        """
        text(name, "name", required=True)
        segment(pipeline_key, "pipeline_key")
        text(pipeline_type, "pipeline_type", required=True)
        body = query(name=name, pipeline_type=pipeline_type, pipeline_key=pipeline_key,
                     pipeline_version=text(pipeline_version, "pipeline_version"), inputs=_inputs(inputs),
                     parameters=mapping(parameters, "parameters"))
        return self._call(Request("POST", "/batch/jobs", body=body, cast=BatchJob.from_dict))

    def list(self, *, status: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """Every batch job, page by page (either list style).

        >>> [(j.name, j.status) for j in client.batch.jobs.list(status="RUNNING")]  # doctest: +SKIP
        [('line 3', 'RUNNING')]
        """
        return self._list(ListRequest("/batch/jobs", BatchJob.from_dict,
                                      query(status=string(status, "status"), limit=page_size(limit)), cursor_param=CURSOR))

    def _path(self, job_id: str, tail: str = "") -> str:
        return f"/batch/jobs/{segment(job_id, 'job_id')}{tail}"

    def get(self, job_id: str) -> Any:
        """One job.

        >>> client.batch.jobs.get(job.id).status  # doctest: +SKIP
        'RUNNING'
        """
        return self._call(Request("GET", self._path(job_id), cast=BatchJob.from_dict))

    def delete(self, job_id: str) -> Any:
        """Deletes a job (a pending or running one must be canceled first: 409).

        >>> client.batch.jobs.delete(job.id)  # doctest: +SKIP
        """
        return self._call(Request("DELETE", self._path(job_id)))

    def retry(self, job_id: str) -> Any:
        """Runs a failed or cancelled job again.

        >>> client.batch.jobs.retry(job.id).status  # doctest: +SKIP
        'PENDING'
        """
        return self._call(Request("POST", self._path(job_id, "/retry"), cast=BatchJob.from_dict))

    def cancel(self, job_id: str, *, ok_if_terminal: bool = False) -> Any:
        """Cancels a job and returns its ``BatchJob`` as the server answers (``{id, status,
        cancelled_at}``, the rest of the record in ``get``). 409 once it has ended; success then
        with ``ok_if_terminal=True``, which returns the job's record. An unknown id is still
        ``NotFoundError``; a 409 that follows this call's own lost answer is not raised when the
        job is ``CANCELLED``.

        >>> client.batch.jobs.cancel(job.id).status  # doctest: +SKIP
        'CANCELLED'
        """
        segment(job_id, "job_id")
        return self._drive(self._cancel(job_id, bool(flag(ok_if_terminal, "ok_if_terminal"))))

    def _cancel(self, job_id: str, ok_if_terminal: bool) -> Operation[BatchJob]:
        # Safe to repeat: a repeat meets 409 already-terminal, settled by the record.
        return (yield from canceling(Request("POST", self._path(job_id, "/cancel"), cast=BatchJob.from_dict,
                                             repeatable=True),
                                     lambda: Request("GET", self._path(job_id), cast=BatchJob.from_dict),
                                     ok_if_terminal, status_of=job_status))

    def queue(self) -> Any:
        """Global queue depths by pipeline type, as the platform gives them.

        >>> client.batch.jobs.queue()  # doctest: +SKIP
        {...}
        """
        return self._call(Request("GET", "/batch/jobs/queue"))

    def events(self, job_id: str, *, level: Optional[str] = None, event_type: Optional[str] = None,
               input_id: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """The job's events, page by page; ``level`` matches exactly.

        >>> for event in client.batch.jobs.events(job.id, level="FAILED"):  # doctest: +SKIP
        ...     print(event.input_id, event.message)
        """
        return self._list(ListRequest(self._path(job_id, "/events"), BatchEvent.from_dict,
                                      query(level=string(level, "level"), event_type=string(event_type, "event_type"),
                                            input_id=string(input_id, "input_id"), limit=page_size(limit)),
                                      cursor_param=CURSOR))

    def inputs(self, job_id: str, *, port: Optional[str] = None, status: Optional[str] = None,
               search: Optional[str] = None) -> Any:
        """The inputs of every port, as dicts; ``port``, ``status`` and ``search`` (file name or id)
        narrow them.

        >>> for item in client.batch.jobs.inputs(job.id, port="worker.inference"):  # doctest: +SKIP
        ...     print(item)
        """
        return self._list(ListRequest(self._path(job_id, "/inputs"), dict,
                                      query(port=string(port, "port"), status=string(status, "status"),
                                            search=string(search, "search")), cursor_param=CURSOR))

    def outputs(self, job_id: str) -> Any:
        """The job's output files, page by page (``download_outputs`` fetches them all).

        >>> [(o.filename, o.num_bytes) for o in client.batch.jobs.outputs(job.id)]  # doctest: +SKIP
        [('...', ...), ...]
        """
        return self._list(ListRequest(self._path(job_id, "/outputs"), BatchOutput.from_dict, cursor_param=CURSOR))

    def download_outputs(self, job_id: str, directory: StrPath, *,
                         concurrency: Optional[int] = None, on_progress: Optional[ProgressCallback] = None,
                         progress: bool = False) -> Any:
        """Downloads every output file of a job into ``directory`` (created when missing), each
        under its ``filename``, ``concurrency`` at a time (16 by default) from the core, each
        atomic (a temporary file renamed when complete). Presigned URLs and relative API refs
        alike; URLs that expired are listed afresh. Returns the paths, in listing order; byte
        progress as ``on_progress(done, total)`` or a tqdm bar (``progress=True``). When a file
        fails for good (a listed output with no ``ref`` or ``filename`` among them, as an
        ``APIResponseValidationError``) the others are still written, and the first failure is
        raised with the whole outcome, of its own class and a ``sensorium.errors.DownloadError``
        too: its message counts and names every failed file, ``e.written`` lists the paths
        written and ``e.failed`` maps each failed output's id to its error. An error before any
        file is fetched (an unknown job) is not a ``DownloadError``. A name listed twice gets the
        output's id before its suffix. The server chose the names, so the files stay in
        ``directory``: a symbolic link there under a listed name is replaced by the file, never
        written through to what it points at (``files.download``, whose path you name, follows one).

        >>> client.batch.jobs.download_outputs(job.id, "predictions/")  # doctest: +SKIP
        [PosixPath('predictions/pred_pump_a_part_0.csv'), ...]
        >>> from sensorium.errors import DownloadError
        >>> try:  # doctest: +SKIP
        ...     client.batch.jobs.download_outputs(job.id, "predictions/")
        ... except DownloadError as e:
        ...     print(len(e.written), "written;", list(e.failed), "to fetch again")
        """
        listing = ListRequest(self._path(job_id, "/outputs"), BatchOutput.from_dict, cursor_param=CURSOR)
        return self._drive(download_listed(listing, folder(directory), surface="api", concurrency=concurrency,
                                           on_progress=on_progress, progress=progress))

    def progress(self, job_id: str) -> Any:
        """The job's progress entries (``{entries: [{kind, step, message}]}``).

        >>> for entry in client.batch.jobs.progress(job.id)["entries"]:  # doctest: +SKIP
        ...     print(entry["kind"], entry["step"], entry["message"])
        """
        return self._call(Request("GET", self._path(job_id, "/progress")))

    def failed_inputs(self, job_id: str) -> Any:
        """The inputs that failed in a job (from its ``FAILED`` events), as ``{input_id, message}``:
        a ``COMPLETED`` job can hold them.

        >>> for failure in client.batch.jobs.failed_inputs(job.id):  # doctest: +SKIP
        ...     print(failure["input_id"], failure["message"])
        """
        return self._drive(self._failed_inputs(job_id))

    def _failed_inputs(self, job_id: str, deadline: Optional[float] = None) -> Operation[builtins.list[dict[str, Any]]]:
        events: builtins.list[BatchEvent] = yield CollectList(
            ListRequest(self._path(job_id, "/events"), BatchEvent.from_dict, {"level": "FAILED"}, cursor_param=CURSOR),
            deadline)
        return [{"input_id": e.input_id, "message": e.message} for e in events if e.input_id]

    def wait(self, job_id: str, *, timeout: Optional[float] = None, progress: bool = False) -> Any:
        """Waits until the job ends and returns its record. ``FAILED`` raises ``JobFailedError``; a
        ``COMPLETED`` job with failed inputs warns (``failed_inputs`` lists them). That check reads
        the job's events within what is left of ``timeout``; when they cannot be read (a platform
        before 1.1.0 has none, the feed fails or is too slow) the record is still returned, with a
        warning that its failed inputs could not be checked and why. A poll that fails with a
        retryable error (5xx, 429, no connection) is logged and made again while ``timeout`` allows.

        >>> client.batch.jobs.wait(job.id, timeout=3600).status  # doctest: +SKIP
        'COMPLETED'
        """
        segment(job_id, "job_id")
        return self._drive(self._wait(job_id, timeout, progress))

    def _wait(self, job_id: str, timeout: Optional[float], progress: bool) -> Operation[BatchJob]:
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        job: BatchJob = yield from wait_for(lambda: Request("GET", self._path(job_id), cast=BatchJob.from_dict), None,
                                            timeout, progress, f"batch job {job_id}", status_of=job_status,
                                            failure=batch_failure)
        if job_status(job) != "completed":
            return job
        # The check only adds a warning to a job that did complete: none of its failures (a 404
        # from a platform without batch events, a failing or slow feed, the wait's timeout running
        # out) may take the record's place. A cancellation (Ctrl-C, asyncio) is no
        # SensoriumError and still ends the wait.
        try:
            failed: builtins.list[dict[str, Any]] = yield from self._failed_inputs(job_id, deadline)
        except SensoriumError as unread:
            if isinstance(unread, WaitTimeoutError) or (deadline is not None and time.monotonic() >= deadline):
                why = f"the wait's timeout ran out while its events were read ({unread.__cause__ or unread})"
            elif isinstance(unread, NotFoundError):
                why = f"its events could not be read; batch events need platform 1.1.0 or later ({unread})"
            else:
                why = f"its events could not be read ({unread})"
            warn_caller(f"batch job {job_id} completed, but its failed inputs could not be checked: {why}; "
                        "client.batch.jobs.failed_inputs(job_id) lists them")
        else:
            if failed:
                warn_caller(f"batch job {job_id} completed with {len(failed)} failed input(s); "
                            "client.batch.jobs.failed_inputs(job_id) lists them")
        return job


class Pipelines(Resource):
    """The batch pipeline registry."""

    def list(self) -> Any:
        """Every pipeline, page by page.

        >>> [p.key for p in client.batch.pipelines.list()]  # doctest: +SKIP
        ['machine-state-classification', 'activity-detection', ...]
        """
        return self._list(ListRequest("/batch/registry/pipelines", Pipeline.from_dict, cursor_param=CURSOR))

    def get(self, pipeline_id: str) -> Any:
        """One pipeline, by its ``id``.

        >>> pipeline = client.batch.pipelines.get(pipeline_id)  # doctest: +SKIP
        >>> pipeline.key  # doctest: +SKIP
        'machine-state-classification'
        """
        return self._call(Request("GET", f"/batch/registry/pipelines/{segment(pipeline_id, 'pipeline_id')}",
                                  cast=Pipeline.from_dict))

    def schema(self, pipeline_id: str) -> Any:
        """The pipeline's parameter schema, as the platform gives it (a dict).

        >>> schema = client.batch.pipelines.schema(pipeline.id)  # doctest: +SKIP
        """
        return self._call(Request("GET", f"/batch/registry/pipelines/{segment(pipeline_id, 'pipeline_id')}/schema"))


# The resources of `async_client.batch`: the same methods, which return awaitables and async
# pagers there (the runner decides); the classes exist so that the stubs' names are real.
@awaited("create", "get", "delete", "retry", "cancel", "queue", "download_outputs", "progress", "failed_inputs",
         "wait")
class AsyncJobs(Jobs):
    """``async_client.batch.jobs``."""


@awaited("get", "schema")
class AsyncPipelines(Pipelines):
    """``async_client.batch.pipelines``."""


class Batch(Namespace):
    """``client.batch``: ``jobs`` and ``pipelines``."""

    def __init__(self, runner: Runner) -> None:
        self.jobs = (AsyncJobs if runner.asynchronous else Jobs)(runner)
        self.pipelines = (AsyncPipelines if runner.asynchronous else Pipelines)(runner)


class AsyncBatch(Batch):
    """``async_client.batch``."""
