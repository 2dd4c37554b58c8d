"""Progress reporting for transfers: a callback ``on_progress(bytes_done, bytes_total)`` and/or a
tqdm bar, fed from the byte counts the native core keeps. Callbacks run on the caller's thread
(blocking calls) or the event loop (async calls), about every 200 ms and once at the end."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Callable, Iterator, Optional

from . import _core
from .errors import InvalidArgumentError

ProgressCallback = Callable[[int, int], Any]

TICK_SECONDS = 0.2


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
            try:
                from tqdm.auto import tqdm  # type: ignore[import-untyped, unused-ignore]
            except ImportError:
                raise InvalidArgumentError(
                    "progress: progress=True shows a tqdm bar, and tqdm is not installed "
                    f"(pip install 'sensorium[progress]'); or pass {argument}=callback(done, total)",
                    argument="progress",
                ) from None
            scaled = unit == "B"
            self._bar = tqdm(total=0 if scaled else None, unit=unit, unit_scale=scaled, unit_divisor=1024,
                             desc=description)

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


@asynccontextmanager
async def reporting_async(
    on_progress: Optional[ProgressCallback], bar: bool, description: str
) -> AsyncIterator[_Reporter]:
    """For async calls: a task on the running loop ticks while the transfer runs."""
    reporter = _Reporter(on_progress, bar, description)

    async def poll() -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            reporter.tick()

    poller = asyncio.ensure_future(poll()) if reporter.active else None
    try:
        yield reporter
        if poller is not None:
            poller.cancel()
            poller = None
        reporter.tick()
    finally:
        if poller is not None:
            poller.cancel()
        reporter.close()
