"""Waiting on long work (agent runs, evaluations, optimizations, fine-tuning and batch jobs),
written once: poll with backoff, interruptible by Ctrl-C (blocking) or cancellation (asyncio),
an optional tqdm line, a timeout, and the failure raised with its record."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable, Iterable, Optional, TypeVar

from ._endpoints import Operation, Request, Sleep
from .errors import AgentRunError, InvalidArgumentError, SensoriumError, WaitTimeoutError
from .types import TERMINAL_STATUSES, AgentLog

R = TypeVar("R")

# Log event types that say a run has ended; the status field is known to lag behind them.
TERMINAL_EVENTS = {"job.completed": "completed", "job.failed": "failed", "job.canceled": "canceled",
                   "job.cancelled": "canceled"}
# The first poll comes quickly (runs are often short), later ones back off to MAX_POLL_SECONDS.
FIRST_POLL_SECONDS = 0.25
MAX_POLL_SECONDS = 5.0
POLL_GROWTH = 1.3
# While the logs are polled, the record is read too every this many rounds.
RECORD_EVERY = 4


def agent_status(record: Any) -> str:
    """The status word of an agent-family record: ``completed``, ``failed``, ``canceled`` (both
    spellings) or whatever non-terminal word it carries."""
    status = (getattr(record, "status", None) or "").lower()
    return "canceled" if status == "cancelled" else status


def agent_failure(record: Any, logs: list[AgentLog], what: str) -> SensoriumError:
    error = getattr(record, "error", None) or next(
        (log.message for log in logs if log.event_type == "job.failed" and log.message), None)
    return AgentRunError(f"{what} failed: {error or '(no error given)'}", agent=record, error=error, logs=logs)

def _poll_delays() -> Iterable[float]:
    delay = FIRST_POLL_SECONDS
    while True:
        yield delay
        delay = min(delay * POLL_GROWTH, MAX_POLL_SECONDS)


class _StatusBar:
    """``progress=True`` on ``wait``: a tqdm line with the status and the time waited."""

    def __init__(self, enabled: bool, description: str) -> None:
        self._bar: Any = None
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            raise InvalidArgumentError("progress: progress=True needs tqdm (pip install 'sensorium[progress]')",
                                       argument="progress") from None
        self._bar = tqdm(total=None, desc=description, bar_format="{desc}: {postfix} [{elapsed}]")

    def show(self, status: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(status)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def wait_for(get: Callable[[], Request[R]], recent_logs: Optional[Callable[[], Request[list[AgentLog]]]],
             timeout: Optional[float], progress: bool, what: str, *,
             status_of: Callable[[Any], str] = agent_status,
             failure: Callable[[Any, list[AgentLog], str], SensoriumError] = agent_failure) -> Operation[R]:
    """Polls with backoff until ``status_of(record)`` is ``completed``, ``failed`` or
    ``canceled``. With ``recent_logs`` the logs decide too, because the status field lags: while
    the record says running, each round reads only the newest log lines (one request), and the
    record is fetched again when they show the terminal event (then returned with the status the
    logs show), or every few rounds in case a deployment logs nothing. A failed end raises
    ``failure(record, logs, what)``."""
    # NaN compares false with everything, so `timeout < 0` let it through and the wait had no end.
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
                                or math.isnan(timeout)):
        raise InvalidArgumentError(f"timeout: is {timeout!r}; it takes seconds (0 or more) or None",
                                   argument="timeout")
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = _StatusBar(progress, what)
    delays = iter(_poll_delays())
    logs: list[AgentLog] = []
    ended: Optional[str] = None
    try:
        record: Any = yield get()
        round_number = 0
        while True:
            round_number += 1
            status = status_of(record)
            if status not in TERMINAL_STATUSES and ended is not None:
                status = ended
                record = replace(record, status=ended)
            bar.show(status or "?")
            if status in TERMINAL_STATUSES:
                if status == "failed":
                    if not logs and recent_logs is not None:
                        logs = yield recent_logs()
                    raise failure(record, logs, what)
                finished: R = record
                return finished
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeoutError(f"{what} is still {status or 'unfinished'} after {timeout}s; it goes on on the "
                                       "platform (wait again, or cancel it)", record=record)
            delay = next(delays)
            yield Sleep(delay if remaining is None else min(delay, remaining))
            if recent_logs is not None and round_number % RECORD_EVERY != 0:
                logs = yield recent_logs()
                ended = next((TERMINAL_EVENTS[log.event_type] for log in logs if log.event_type in TERMINAL_EVENTS),
                             None)
                if ended is None:
                    continue
            record = yield get()
    finally:
        bar.close()


