"""Waiting on long work (agent runs, evaluations, optimizations, fine-tuning and batch jobs),
written once: poll with backoff, interruptible by Ctrl-C (blocking) or cancellation (asyncio),
riding out polls that fail with a retryable error, an optional tqdm line, a timeout, and the
failure raised with its record; and canceling it, where a repeated cancel's 409 is settled by
the record."""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

from . import _core
from ._arguments import flag
from ._endpoints import Operation, Request, Scrub, Sleep
from ._progress import bar_class
from .errors import (
    AgentRunError,
    APIConnectionError,
    APIError,
    APIStatusError,
    ConflictError,
    InvalidArgumentError,
    SensoriumError,
    WaitTimeoutError,
    _answer_text,
)
from .types import TERMINAL_STATUSES, AgentLog, record_status

R = TypeVar("R")
T = TypeVar("T")

# Log event types that say a run has ended; the status field is known to lag behind them.
TERMINAL_EVENTS = {"job.completed": "completed", "job.failed": "failed", "job.canceled": "canceled",
                   "job.cancelled": "canceled"}
# The first poll comes quickly (runs are often short), later ones back off to MAX_POLL_SECONDS.
FIRST_POLL_SECONDS = 0.25
MAX_POLL_SECONDS = 5.0
POLL_GROWTH = 1.3
# While the logs are polled, the record is read too every this many rounds.
RECORD_EVERY = 4
# When the logs show a failure before the record does (the status lags), the record is read
# again, with the usual backoff, for at most this long (and never past the wait's timeout): its
# `error` is the run's own message, which the `job.failed` line only quotes in its own words.
# Past it, the failure is raised with the lagging record (status set to `failed`, `error` unset)
# and the log line's message as the error text.
FAILED_RECORD_SECONDS = 10.0
# The client's retry rule (the core's statuses, and connection failures): a record poll that
# fails with one of these, after the client's own retries, is logged and made again at the next
# poll interval while the wait's timeout allows; any other failure (400, 401, 404...) ends the
# wait at once, since polling again cannot change it.
RETRYABLE_STATUSES = frozenset(_core.RETRYABLE_STATUSES)
# A wait without a timeout still gives up once its record polls have failed for this long with no
# success between (and raises the last failure): a gateway blip is ridden out, but a platform
# unreachable for five minutes is an outage the caller should hear about rather than a silent hang.
GIVE_UP_AFTER_FAILING_FOR = 300.0

_log = logging.getLogger("sensorium")


# How much of an error entry of no known shape a failure's message shows.
ERROR_TEXT_CHARS = 300


def agent_status(record: Any) -> str:
    """The status word of an agent-family record: ``completed``, ``failed``, ``canceled`` (both
    spellings) or whatever non-terminal word it carries; a status that is no string raises
    ``APIResponseValidationError`` (``record_status``)."""
    status = record_status(record).lower()
    return "canceled" if status == "cancelled" else status


def error_texts(errors: Any) -> list[str]:
    """The texts of a failed record's errors, whatever shape they came in: the spec's list of
    error objects (each its ``message``, else its ``code``); one bare error object (the spec's
    Errors section: fine-tuning and some batch errors come without the list); a string; a list
    of strings. Anything else (a number, an object with neither field) is its JSON, cut to
    ``ERROR_TEXT_CHARS``. Nothing (null, empty) gives no texts."""
    entries = errors if isinstance(errors, list) else [errors]
    texts = []
    for entry in entries:
        if isinstance(entry, dict):
            said = next((entry[k] for k in ("message", "code") if isinstance(entry.get(k), str) and entry[k]), None)
            if said is not None:
                texts.append(said)
                continue
        if isinstance(entry, str):
            text = entry
        elif entry is None or entry == {} or entry == []:
            continue
        else:
            text = _answer_text(entry)
            if len(text) > ERROR_TEXT_CHARS:
                text = text[:ERROR_TEXT_CHARS] + "…"
        if text:
            texts.append(text)
    return texts


def agent_failure(record: Any, logs: list[AgentLog], what: str) -> SensoriumError:
    error = "; ".join(error_texts(getattr(record, "error", None))) or next(
        (log.message for log in logs if log.event_type == "job.failed" and isinstance(log.message, str)
         and log.message), None)
    return AgentRunError(f"{what} failed: {error or '(no error given)'}", agent=record, error=error, logs=logs)


def _terminal_line(logs: list[AgentLog]) -> Optional[AgentLog]:
    # A line's event_type of another type (a list would not even hash) is no terminal event.
    return next((log for log in logs if isinstance(log.event_type, str) and log.event_type in TERMINAL_EVENTS), None)


def ended_in(logs: list[AgentLog]) -> Optional[str]:
    """The terminal status the log lines show (``completed``, ``failed``, ``canceled``), if any."""
    line = _terminal_line(logs)
    return None if line is None else TERMINAL_EVENTS[line.event_type or ""]


def with_status(record: R, status: str, logs: Sequence[AgentLog] = ()) -> R:
    """``record`` saying ``status``, in its attributes and in ``to_dict()`` alike (a record whose
    attribute and JSON disagreed would tell a caller who saves ``to_dict()`` the stale status).
    A lagging record has no ``completed_at`` yet either (the spec: null only while unfinished); the
    terminal log line's time fills it, so an ended run never reads as ended at no time."""
    fields = {**record.to_dict(), "status": status}  # type: ignore[attr-defined]
    line = _terminal_line(list(logs))
    if hasattr(record, "completed_at") and fields.get("completed_at") is None and line is not None \
            and line.created_at is not None:
        fields["completed_at"] = line.created_at
    rebuilt: R = type(record).from_dict(fields)  # type: ignore[attr-defined]
    return rebuilt


def _already_ended(error: APIStatusError) -> bool:
    return isinstance(error, ConflictError)


def canceling(cancel: Request[R], get: Callable[[], Request[R]], ok_if_terminal: bool, *,
              status_of: Callable[[Any], str] = agent_status,
              ended: Optional[Callable[[R], Operation[R]]] = None,
              refused: Callable[[APIStatusError], bool] = _already_ended) -> Operation[R]:
    """A cancel (``cancel`` must be ``repeatable``) whose "already ended" refusal (``refused``:
    409 by default) is settled by the record ``get()`` reads (passed through ``ended``, which
    may correct a lagging status). With ``ok_if_terminal`` any ended record is the answer. Without
    it the refusal still reaches the caller, except when it follows a lost answer
    (``after_lost_response``): the first attempt may have been the cancel that ended the work,
    so a record that says canceled is returned, as that attempt's answer would have said; one
    that ended otherwise (completed, failed) keeps the refusal."""
    try:
        answer: R = yield cancel
        return answer
    except APIStatusError as e:
        if not refused(e) or not (ok_if_terminal or e.after_lost_response):
            raise
        refusal = e
    current: R = yield get()
    if ended is not None:
        current = yield from ended(current)
    if ok_if_terminal or status_of(current) == "canceled":
        return current
    raise refusal


def progress_counts(record: Any) -> Optional[tuple[int, int]]:
    """``(done, total)`` from a record's ``progress`` (optimizations: trials ``completed`` and
    ``failed`` of ``pending + running + completed + failed``, or of ``budget.max_trials``), or
    ``None`` when the record carries no counts (agent runs, evaluations, batch and fine-tuning
    jobs: the spec gives their records no progress count)."""
    progress = getattr(record, "progress", None)
    if not isinstance(progress, dict):
        return None
    counts = {k: v for k, v in progress.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
    if "completed" not in counts:
        return None
    done = counts["completed"] + counts.get("failed", 0)
    budget = getattr(record, "budget", None)
    total = budget.get("max_trials") if isinstance(budget, dict) else None
    if not isinstance(total, int) or isinstance(total, bool) or total < done:
        total = sum(counts.get(k, 0) for k in ("pending", "running", "completed", "failed"))
    return done, max(total, done)


def _poll_delays() -> Iterable[float]:
    """The pauses between polls: growing, each taken at 75-100 % at random. Waits started together
    (a hundred jobs gathered) otherwise polled in lockstep, a hundred GETs at each step, and
    against a rate limit of 20/s met 3,000 answers of 429 where 300 polls were needed."""
    delay = FIRST_POLL_SECONDS
    while True:
        yield delay * random.uniform(0.75, 1.0)
        delay = min(delay * POLL_GROWTH, MAX_POLL_SECONDS)


class _StatusBar:
    """``progress=True`` on ``wait``: a tqdm line with the status and the time waited, and a bar
    of done/total where the record counts its progress: ``agent agt_1: running [00:03]``. The
    status goes in the description, not the postfix: tqdm puts ", " before a postfix, which read
    ``agent agt_1: , running``."""

    def __init__(self, enabled: bool, description: str) -> None:
        self._bar: Any = None
        self._description = description
        if not enabled:
            return
        self._bar = bar_class()(total=None, desc=description, bar_format="{desc} [{elapsed}]")

    def show(self, status: str, counts: Optional[tuple[int, int]] = None) -> None:
        if self._bar is None:
            return
        if counts is not None:
            done, total = counts
            if self._bar.total != total:
                self._bar.total = total
                self._bar.bar_format = "{desc} {n}/{total} {bar} [{elapsed}]"
            self._bar.n = done
        self._bar.set_description_str(f"{self._description}: {status}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _DeadlinePassed(Exception):
    """A poll could not be answered before the wait's deadline; ``__cause__`` says why."""


def retryable(error: BaseException) -> bool:
    """Whether the client's retry rule retries ``error`` (429, 500, 502, 503, 504, no connection)."""
    if isinstance(error, APIConnectionError):
        return True
    return isinstance(error, APIStatusError) and error.status in RETRYABLE_STATUSES


def _poll(request: Request[T], deadline: Optional[float]) -> Operation[T]:
    """One poll, retried by the client's retry rule; under a deadline the core cuts its
    attempts there and raises ``WaitTimeoutError`` (from the last failure) rather than retry or
    pause past it. Each attempt still gets a second, so a wait whose time is up looks once."""
    try:
        answer: T = yield replace(request, deadline=deadline)
    except WaitTimeoutError as passed:
        raise _DeadlinePassed() from passed.__cause__
    return answer


def _read_record(get: Callable[[], Request[R]], deadline: Optional[float], delays: Iterable[float],
                 what: str) -> Operation[R]:
    """The record, polled until a poll answers: one that fails with a ``retryable`` error is
    logged (a warning on the ``sensorium`` logger) and made again after the next of ``delays``,
    until ``deadline`` (then ``_DeadlinePassed`` from that error) or, with no deadline, until
    the polls have failed for ``GIVE_UP_AFTER_FAILING_FOR`` (then that error). Any other failure
    is raised at once."""
    pauses = iter(delays)
    failing_since: Optional[float] = None
    while True:
        try:
            record: R = yield from _poll(get(), deadline)
            return record
        except APIError as error:
            if not retryable(error):
                raise
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                raise _DeadlinePassed() from error
            if remaining is None and now - failing_since >= GIVE_UP_AFTER_FAILING_FOR:
                raise
            pause = next(pauses)
            # A server that says when to come back (429/503 `Retry-After`) is taken at its word,
            # up to the stretch a wait without timeout gives failing polls.
            if isinstance(error, APIStatusError) and error.retry_after is not None:
                pause = min(max(pause, error.retry_after), GIVE_UP_AFTER_FAILING_FOR)
            if remaining is not None:
                pause = min(pause, remaining)
            _log.warning("%s: polling its record failed (%s); polling again in %.1fs", what, error, pause)
            yield Sleep(pause)


def wait_for(get: Callable[[], Request[R]], recent_logs: Optional[Callable[[], Request[list[AgentLog]]]],
             timeout: Optional[float], progress: bool, what: str, *,
             status_of: Callable[[Any], str] = agent_status,
             failure: Callable[[Any, list[AgentLog], str], SensoriumError] = agent_failure,
             counts: Callable[[Any], Optional[tuple[int, int]]] = progress_counts) -> Operation[R]:
    """Polls with backoff until ``status_of(record)`` is ``completed``, ``failed`` or
    ``canceled``. With ``recent_logs`` the logs decide too, because the status field lags: while
    the record says running, each round reads only the newest log lines (one request), and the
    record is fetched again when they show the terminal event (then returned with the status the
    logs show), or every few rounds in case a deployment logs nothing; a round whose logs cannot
    be read reads the record. A failed end raises ``failure(record, logs, what)`` with the newest
    log lines, and the client's key taken out of it; when the logs show the failure first, the
    record is read again for a while (``FAILED_RECORD_SECONDS``) so the failure carries the failed
    record and its own error. ``timeout`` bounds
    the polls' retries too; when it passes, ``WaitTimeoutError`` (from the last poll's error, if
    one failed). A record poll that fails with a retryable error (5xx, 429, no connection), once
    the client's retries are spent, is logged as a warning and made again at the next poll
    interval while the timeout allows; without a timeout, until the polls have failed for
    ``GIVE_UP_AFTER_FAILING_FOR`` seconds in a row, and then that failure is raised. Any other
    failure (400, 401, 404...) is raised at once."""
    check_timeout(timeout)
    flag(progress, "progress")
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = _StatusBar(progress, what)
    delays = iter(_poll_delays())
    logs: list[AgentLog] = []
    ended: Optional[str] = None
    record: Any = None
    status = ""
    try:
        record = yield from _read_record(get, deadline, delays, what)
        round_number = 0
        while True:
            round_number += 1
            status = status_of(record)
            if status not in TERMINAL_STATUSES and ended == "failed":
                record = yield from _failed_record(get, record, status_of, deadline)
                status = status_of(record)
            if status not in TERMINAL_STATUSES and ended is not None:
                status = ended
                record = with_status(record, ended, logs)
            bar.show(status or "?", counts(record))
            if status in TERMINAL_STATUSES:
                if status == "failed":
                    if recent_logs is not None and ended != "failed":
                        # The record showed the failure: lines read in an earlier round (if any)
                        # predate it and lack its `job.failed` line. (When the logs showed it,
                        # they were read this round.)
                        logs = yield from _latest_logs(recent_logs, logs, deadline)
                    record, logs = yield Scrub((record, logs))
                    raise failure(record, logs, what)
                finished: R = record
                return finished
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise _timed_out(what, status, timeout, record)
            delay = next(delays)
            yield Sleep(delay if remaining is None else min(delay, remaining))
            if recent_logs is not None and round_number % RECORD_EVERY != 0:
                try:
                    logs = yield from _poll(recent_logs(), deadline)
                except APIError:
                    # The status is the wait's signal; the logs only see a lagging end sooner. A
                    # logs poll that failed (after its retries) makes this round read the record
                    # instead, so while the logs keep failing the wait goes on from the status
                    # alone (ending when the record shows the end); a failing record poll is
                    # made again or raised as `_read_record` says.
                    pass
                else:
                    ended = ended_in(logs)
                    if ended is None:
                        continue
            record = yield from _read_record(get, deadline, delays, what)
    except _DeadlinePassed as passed:
        left = None if deadline is None else deadline - time.monotonic()
        raise _timed_out(what, status, timeout, record, passed.__cause__, left) from passed.__cause__
    finally:
        bar.close()


def _latest_logs(recent_logs: Callable[[], Request[list[AgentLog]]], earlier: list[AgentLog],
                 deadline: Optional[float]) -> Operation[list[AgentLog]]:
    """The newest log lines for a failure, or ``earlier`` when they cannot be read: the failure
    matters more than its log lines."""
    try:
        latest: list[AgentLog] = yield from _poll(recent_logs(), deadline)
        return latest
    except (_DeadlinePassed, APIError):
        return earlier


def _failed_record(get: Callable[[], Request[R]], record: R, status_of: Callable[[Any], str],
                   deadline: Optional[float]) -> Operation[R]:
    """The record once it shows the end the logs showed (a failure), read again for at most
    ``FAILED_RECORD_SECONDS`` (and not past ``deadline``); else the last record read. A read
    that fails ends the reading: the failure is known, and is raised rather than that error."""
    give_up = time.monotonic() + FAILED_RECORD_SECONDS
    if deadline is not None:
        give_up = min(give_up, deadline)
    delays = iter(_poll_delays())
    while True:
        remaining = give_up - time.monotonic()
        if remaining <= 0:
            return record
        yield Sleep(min(next(delays), remaining))
        try:
            record = yield from _poll(get(), give_up)
        except (_DeadlinePassed, APIError):
            return record
        if status_of(record) in TERMINAL_STATUSES:
            return record


def check_timeout(timeout: Any) -> None:
    """``wait``'s ``timeout``: seconds, 0 or more and finite, or ``None``. NaN would never
    compare as expired (the wait would never end), and infinity is what ``None`` says."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgumentError(f"timeout: is {timeout!r}; it takes seconds (0 or more, finite), or None for no "
                                   "limit", argument="timeout")


def _timed_out(what: str, status: str, timeout: Optional[float], record: Any,
               cause: Optional[BaseException] = None, left: Optional[float] = None) -> WaitTimeoutError:
    # A failing poll whose `Retry-After` reaches past the deadline ends the wait before its time
    # is up (the core does not wait past it): the message says so, rather than claim the whole
    # timeout went by. `left`: the seconds of the timeout that were left when it ended.
    retry_after = getattr(cause, "retry_after", None)
    if retry_after is not None and left is not None and left >= 0.5 and retry_after > left:
        return WaitTimeoutError(
            f"{what} is still {status or 'unfinished'}: the platform answered a poll with {getattr(cause, 'status', '?')} "
            f"and asked to be polled again in {retry_after:g}s, past the {left:.0f}s left of the wait's timeout of "
            f"{timeout}s; it goes on on the platform (wait again later, or cancel it)", record=record)
    return WaitTimeoutError(f"{what} is still {status or 'unfinished'} after {timeout}s; it goes on on the platform "
                            "(wait again, or cancel it)", record=record)
