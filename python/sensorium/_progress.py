"""Progress reporting for transfers: a callback ``on_progress(bytes_done, bytes_total)`` and/or a
tqdm bar, fed from the byte counts the native core keeps. Callbacks run on the caller's thread
(blocking calls) or the event loop (async calls), about every 200 ms and once at the end."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, Optional, TypeVar

from . import _core
from .errors import InvalidArgumentError

ProgressCallback = Callable[[int, int], Any]

TICK_SECONDS = 0.2
# How long a cancelled transfer may take to stop before its caller's exception is raised anyway,
# and how often that is checked (only on this rare path).
SETTLE_SECONDS = 2.0
SETTLE_POLL_SECONDS = 0.005

T = TypeVar("T")


def bar_class(callback_argument: Optional[str] = None) -> Any:
    """tqdm's bar class, for ``progress=True``. Without tqdm, ``InvalidArgumentError`` naming
    ``progress`` (and ``callback_argument``, the call's callback, as the way without it). Asked for
    with the other argument checks, before anything is read or sent, not when the first bar is due
    (after a listing's pages)."""
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        instead = f"; or pass {callback_argument}=callback(done, total)" if callback_argument else ""
        raise InvalidArgumentError(
            f"progress: progress=True shows a tqdm bar, and tqdm is not installed (pip install 'sensorium[progress]')"
            f"{instead}", argument="progress") from None
    return tqdm


class _Reporter:
    """Feeds a callback and/or a tqdm bar from ``counts()`` (``(done, total)``; by default the
    byte counts of ``handle``, a ``_core.Progress`` the native core updates)."""

    def __init__(
        self,
        on_progress: Optional[Callable[..., Any]],
        bar: bool,
        description: str,
        *,
        unit: str = "B",
        argument: str = "on_progress",
        counts: Optional[Callable[[], tuple[int, Optional[int]]]] = None,
    ) -> None:
        if on_progress is not None and not callable(on_progress):
            raise InvalidArgumentError(f"{argument}: must be callable as {argument}(done, total)", argument=argument)
        self.handle = _core.Progress()
        self._counts = counts or (lambda: (self.handle.done, self.handle.total))
        self._last: tuple[int, Optional[int]] | None = None
        self._callback = on_progress
        self._bar: Any = None
        if bar:
            scaled = unit == "B"
            self._bar = bar_class(argument)(total=0 if scaled else None, unit=unit, unit_scale=scaled,
                                            unit_divisor=1024, desc=description)

    @property
    def active(self) -> bool:
        return self._callback is not None or self._bar is not None

    def tick(self) -> None:
        done, total = self._counts()
        if (done, total) == self._last:
            return
        self._last = (done, total)
        if self._bar is not None:
            if self._bar.total != total:
                self._bar.total = total
            self._bar.n = done
            self._bar.refresh()
        if self._callback is not None:
            self._callback(done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def reporting(on_progress: Optional[ProgressCallback], bar: bool, description: str) -> Iterator[_Reporter]:
    """For blocking calls: pass ``reporter.handle`` and ``reporter.tick`` (when active) to the core."""
    reporter = _Reporter(on_progress, bar, description)
    try:
        yield reporter
        reporter.tick()  # the final, exact count
    finally:
        reporter.close()


async def run_reported(
    on_progress: Optional[ProgressCallback],
    bar: bool,
    description: str,
    start: Callable[[_core.Progress], Awaitable[T]],
) -> T:
    """For async calls: awaits ``start(handle)`` (the native transfer, given the byte counts to
    keep) while ticking the reporter on this loop. Ticks run in this coroutine, not in a task of
    their own, so an exception from the callback is seen at once: the transfer is cancelled,
    waited for until it has really stopped (nothing more is sent, registered or written), and the
    callback's exception propagates, as on the blocking client."""
    reporter = _Reporter(on_progress, bar, description)
    try:
        transfer = asyncio.ensure_future(start(reporter.handle))
        try:
            while reporter.active and not transfer.done():
                await asyncio.wait({transfer}, timeout=TICK_SECONDS)
                if not transfer.done():
                    reporter.tick()
            result = await transfer
        except BaseException:  # the callback's or the transfer's exception, or this call cancelled
            await _stop(transfer, reporter.handle)
            raise
        reporter.tick()  # the final, exact count
        return result
    finally:
        reporter.close()


async def _stop(transfer: asyncio.Future[Any], handle: _core.Progress) -> None:
    """Cancels ``transfer`` unless it has ended, and waits until the native side has dropped it
    (it lets go of ``handle`` then), for at most ``SETTLE_SECONDS``."""
    if transfer.done():
        if not transfer.cancelled():
            transfer.exception()  # retrieved: the exception being raised supersedes its outcome
        return
    transfer.cancel()
    clock = asyncio.get_running_loop().time
    deadline = clock() + SETTLE_SECONDS
    while handle.busy and clock() < deadline:
        await asyncio.sleep(SETTLE_POLL_SECONDS)
