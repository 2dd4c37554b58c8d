"""``client.fine_tuning.jobs``: fine-tuning jobs on ``/v0.6``, written once for both clients.

Example::

    from sensorium import fine_tuning as ft

    job = client.fine_tuning.jobs.create("omega", name="pump states", method=ft.head(n_epochs=5),
                                         training_files=[ft.n_shot("idle.csv", "idle")])
    job = client.fine_tuning.jobs.wait(job.id, progress=True)      # JobFailedError if it failed
    best = max(client.fine_tuning.jobs.checkpoints(job.id), key=lambda c: c.step or 0)
"""

from __future__ import annotations

from typing import Any, Optional, Union

from .._arguments import limit as page_size
from .._arguments import string, text
from .._endpoints import (
    CollectList, ListRequest, Namespace, Operation, Request, Resource, Runner, Scrub, awaited, cursor_walk, query,
    segment, warn_caller,
)
from .._waiting import canceling, error_texts, wait_for
from ..errors import (
    APIResponseValidationError, APIStatusError, InvalidArgumentError, JobFailedError, SensoriumError, _answer_text,
    _json_kind,
)
from ..fine_tuning import check_job
from ..pagination import Rows
from ..types import AgentLog, Checkpoint, FineTuningEvent, FineTuningJob, record_status

__all__ = ["FineTuning", "AsyncFineTuning"]

# The spec's page sizes of `GET /fine_tuning/jobs/{id}/logs`.
MAX_LOGS_LIMIT = 100


def job_status(record: Any) -> str:
    """A fine-tuning or batch status as the waiting loop reads it: ``SUCCEEDED`` (some
    deployments) is ``COMPLETED``; ``CANCELLED`` is ``canceled``. A status that is no string
    raises ``APIResponseValidationError`` (``record_status``)."""
    status = record_status(record).upper()
    return {"COMPLETED": "completed", "SUCCEEDED": "completed", "FAILED": "failed", "CANCELLED": "canceled",
            "CANCELED": "canceled"}.get(status, status.lower())


def job_failure(record: Any, _logs: list[AgentLog], what: str) -> SensoriumError:
    errors = error_texts(getattr(record, "errors", None))
    how = "failed"
    if job_status(record) == "completed":
        how = "completed with outcome FAILED (it produced nothing)"
    return JobFailedError(f"{what} {how}: {'; '.join(errors) or '(no error given)'}", job=record, errors=errors)


def _invalid_move(error: APIStatusError) -> bool:
    # The spec gives the refusal's code, not its status (the emulator answers 409).
    return error.status == 409 or error.has_code("invalid_state_transition")


def _metrics_row(item: Any) -> dict[str, Any]:
    # Not `dict(item)`: a string or a number raised a bare ValueError or TypeError, and a list of
    # pairs became a row the server never sent.
    if not isinstance(item, dict):
        raise APIResponseValidationError(f"expected a metrics row (a JSON object), got {_json_kind(item)}",
                                         body=_answer_text(item))
    return item


class FineTuningJobs(Resource):
    """Fine-tuning jobs of your organization."""

    def create(self, model: str, *, name: str, method: Any, training_files: Any, validation_files: Any = None,
               suffix: Optional[str] = None, seed: Optional[int] = None,
               checkpoint_id: Union[str, Checkpoint, None] = None) -> Any:
        """Starts a fine-tuning job of ``model`` (``newton`` or ``omega``). ``method`` and the files
        come from ``sensorium.fine_tuning``; a method or file that does not fit the model is refused
        before sending. ``checkpoint_id`` (a ``ckp_`` id or a ``Checkpoint``) warm-starts it.

        >>> client.fine_tuning.jobs.create("newton", name="tone", method=ft.lora(),  # doctest: +SKIP
        ...                                training_files=[ft.plain("train.jsonl")])
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("name: a fine-tuning job needs a name", argument="name")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidArgumentError(f"seed: is {seed!r}; it takes an integer", argument="seed")
        body = check_job(model, method, training_files, validation_files)
        # A Checkpoint record is taken as its id, as the batch checkpoint port takes it.
        if isinstance(checkpoint_id, Checkpoint):
            checkpoint_id = checkpoint_id.id
        body.update(query(name=name, suffix=string(suffix, "suffix"), seed=seed,
                          checkpoint_id=text(checkpoint_id, "checkpoint_id")))
        return self._call(Request("POST", "/fine_tuning/jobs", body=body, surface="fine_tuning",
                                  cast=FineTuningJob.from_dict))

    def list(self, *, limit: Optional[int] = None) -> Any:
        """Every fine-tuning job, newest first, page by page.

        >>> [(j.name, j.status) for j in client.fine_tuning.jobs.list(limit=20)]  # doctest: +SKIP
        [('pump states', 'RUNNING')]
        """
        return self._list(ListRequest("/fine_tuning/jobs", FineTuningJob.from_dict, query(limit=page_size(limit)),
                                      "fine_tuning", item_cursors=True))

    def _path(self, job_id: str, tail: str = "") -> str:
        return f"/fine_tuning/jobs/{segment(job_id, 'job_id')}{tail}"

    def get(self, job_id: str) -> Any:
        """One job.

        >>> client.fine_tuning.jobs.get(job.id).status  # doctest: +SKIP
        'RUNNING'
        """
        return self._call(Request("GET", self._path(job_id), surface="fine_tuning", cast=FineTuningJob.from_dict))

    def cancel(self, job_id: str) -> Any:
        """Cancels a job (``CANCELLED``, not resumable); an invalid move is ``invalid_state_transition``,
        except when it follows this call's own lost answer and the job is ``CANCELLED`` (the lost
        attempt was the cancel).

        >>> client.fine_tuning.jobs.cancel(job.id).status  # doctest: +SKIP
        'CANCELLED'
        """
        segment(job_id, "job_id")
        return self._drive(canceling(
            Request("POST", self._path(job_id, "/cancel"), surface="fine_tuning", cast=FineTuningJob.from_dict,
                    repeatable=True),
            lambda: Request("GET", self._path(job_id), surface="fine_tuning", cast=FineTuningJob.from_dict), False,
            status_of=job_status, refused=_invalid_move))

    def pause(self, job_id: str) -> Any:
        """Pauses a job gracefully: ``PAUSED`` may follow a moment later.

        >>> job = client.fine_tuning.jobs.pause(job.id)  # doctest: +SKIP
        """
        return self._call(Request("POST", self._path(job_id, "/pause"), surface="fine_tuning",
                                  cast=FineTuningJob.from_dict))

    def resume(self, job_id: str) -> Any:
        """Resumes a paused job.

        >>> job = client.fine_tuning.jobs.resume(job.id)  # doctest: +SKIP
        """
        return self._call(Request("POST", self._path(job_id, "/resume"), surface="fine_tuning",
                                  cast=FineTuningJob.from_dict))

    def checkpoints(self, job_id: str) -> Any:
        """The job's checkpoints, page by page.

        >>> [(c.id, c.step) for c in client.fine_tuning.jobs.checkpoints(job.id)]  # doctest: +SKIP
        [('ckp_...', ...), ...]
        """
        return self._list(ListRequest(self._path(job_id, "/checkpoints"), Checkpoint.from_dict, surface="fine_tuning",
                                      item_cursors=True))

    def events(self, job_id: str) -> Any:
        """The job's events, newest first.

        >>> for event in client.fine_tuning.jobs.events(job.id):  # doctest: +SKIP
        ...     print(event.level, event.type, event.message)
        """
        return self._list(ListRequest(self._path(job_id, "/events"), FineTuningEvent.from_dict,
                                      surface="fine_tuning", item_cursors=True))

    def logs(self, job_id: str, *, level: Optional[str] = None, q: Optional[str] = None,
             limit: Optional[int] = None, after: Optional[str] = None, before: Optional[str] = None) -> Any:
        """All events, worker events included, newest first, page by page. ``level`` matches
        exactly; ``q`` searches message and type; ``limit`` (the page size) is 1 to 100; ``after``
        starts below (older than) an event id, ``before`` lists the events newer than it, oldest
        first (from the id outwards).

        >>> [e.message for e in client.fine_tuning.jobs.logs(job.id, level="ERROR", limit=100)]  # doctest: +SKIP
        []
        """
        direction, start = cursor_walk(after, before)
        params = query(level=string(level, "level"), q=string(q, "q"), limit=page_size(limit, most=MAX_LOGS_LIMIT))
        # The spec's answer is `{object, data, has_more}`: the events' ids are the cursors (so
        # for every fine-tuning list, whose pages may come in the same shape).
        return self._list(ListRequest(self._path(job_id, "/logs"), FineTuningEvent.from_dict, params, "fine_tuning",
                                      cursor_param=direction, start=start, item_cursors=True))

    def metrics(self, job_id: str) -> Any:
        """The job's training metrics (a list of dicts, one per step and metric; ``.to_pandas()``
        makes it a DataFrame).

        >>> curves = client.fine_tuning.jobs.metrics(job.id).to_pandas()  # doctest: +SKIP
        """
        return self._drive(self._metrics(job_id))

    def _metrics(self, job_id: str) -> Operation[Rows[dict[str, Any]]]:
        rows: list[dict[str, Any]] = yield CollectList(ListRequest(self._path(job_id, "/metrics"), _metrics_row,
                                                                   surface="fine_tuning", item_cursors=True))
        return Rows(rows)

    def checkpoint_options(self) -> Any:
        """The checkpoints a new job may start from (``create(..., checkpoint_id=...)``).

        >>> [c.id for c in client.fine_tuning.jobs.checkpoint_options()]  # doctest: +SKIP
        [...]
        """
        return self._list(ListRequest("/fine_tuning/checkpoint_options", Checkpoint.from_dict, surface="fine_tuning",
                                      item_cursors=True))

    def wait(self, job_id: str, *, timeout: Optional[float] = None, progress: bool = False) -> Any:
        """Waits until the job ends and returns its final record (``COMPLETED`` or ``SUCCEEDED``
        and ``CANCELLED`` end it); ``FAILED`` raises ``JobFailedError`` with the job and its errors,
        and so does a ``COMPLETED`` job whose ``outcome`` is ``FAILED`` (it produced nothing). An
        ``outcome`` of ``PARTIAL`` warns and returns the record. A poll that fails with a retryable
        error (5xx, 429, no connection) is logged and made again while ``timeout`` allows.

        >>> client.fine_tuning.jobs.wait(job.id, timeout=3600).status  # doctest: +SKIP
        'COMPLETED'
        """
        segment(job_id, "job_id")
        return self._drive(self._wait(job_id, timeout, progress))

    def _wait(self, job_id: str, timeout: Optional[float], progress: bool) -> Operation[FineTuningJob]:
        what = f"fine-tuning job {job_id}"
        job: FineTuningJob = yield from wait_for(
            lambda: Request("GET", self._path(job_id), surface="fine_tuning", cast=FineTuningJob.from_dict),
            None, timeout, progress, what, status_of=job_status, failure=job_failure)
        # An outcome of another type or word (a newer platform's) is left to the caller.
        outcome = job.outcome.upper() if isinstance(job.outcome, str) and job_status(job) == "completed" else ""
        if outcome == "FAILED":
            # "Produced nothing" (the spec): a failure in all but its status, raised as a FAILED
            # status is, so that code after wait() does not go on as if training had succeeded.
            job = yield Scrub(job)
            raise job_failure(job, [], what)
        if outcome == "PARTIAL":
            # As batch wait warns for a COMPLETED job with failed inputs: the job did produce
            # something, so its record is the answer.
            warn_caller(f"{what} completed with outcome PARTIAL (some of its work failed); "
                        "client.fine_tuning.jobs.events(job_id) tells what")
        return job

    def plot_metrics(self, job_id: str) -> Any:
        """Draws the job's loss and metric curves over the steps with matplotlib (``pip install
        matplotlib``) and returns the figure. Blocking client only.

        >>> client.fine_tuning.jobs.plot_metrics(job.id).savefig("curves.png")  # doctest: +SKIP
        """
        if self._runner.asynchronous:
            raise InvalidArgumentError("plot_metrics: call it on sensorium.Client (it draws on this thread)",
                                       argument="job_id")
        try:
            import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise InvalidArgumentError("plot_metrics needs matplotlib (pip install matplotlib)",
                                       argument="job_id") from None
        series: dict[str, list[tuple[float, float]]] = {}
        for row in self.metrics(job_id):
            step = row.get("step")
            for name, value in row.items():
                if name != "step" and isinstance(value, (int, float)) and isinstance(step, (int, float)):
                    series.setdefault(name, []).append((step, value))
        figure, axis = plt.subplots()
        for name, points in sorted(series.items()):
            points.sort()
            axis.plot([p[0] for p in points], [p[1] for p in points], label=name)
        axis.set_xlabel("step")
        axis.set_title(f"fine-tuning job {job_id}")
        axis.legend()
        return figure


@awaited("create", "get", "cancel", "pause", "resume", "metrics", "wait")
class AsyncFineTuningJobs(FineTuningJobs):
    """``async_client.fine_tuning.jobs``: the same methods, which return awaitables and async
    pagers there (the runner decides); the class exists so that the stub's name is real."""


class FineTuning(Namespace):
    """``client.fine_tuning``: ``jobs``."""

    def __init__(self, runner: Runner) -> None:
        self.jobs = (AsyncFineTuningJobs if runner.asynchronous else FineTuningJobs)(runner)


class AsyncFineTuning(FineTuning):
    """``async_client.fine_tuning``."""
