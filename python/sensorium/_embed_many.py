"""``embed_many``: the input side (which windows, in which chunks) and the loop that feeds the
native batch (``_core.EmbedBatch``) as room frees up, for both clients.

The requests themselves run in Rust; Python only hands over chunks of windows (views of a 3-D
array, items of a list, or the next items of an iterator), so an iterator is never read further
ahead than the batch can hold, and waits with the GIL released."""

from __future__ import annotations

import inspect
import itertools
import operator
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from ._endpoints import warn_caller
from ._numeric import as_channels, is_series, without_mask
from ._progress import _Reporter
from .errors import EmbedManyError, InvalidArgumentError, PayloadTooLargeError

EMBEDDING_DIM = 768

#: ``progress=`` of ``embed_many``: ``True`` for a tqdm bar, or ``callback(windows_done, windows_total)``
#: (``windows_total`` is ``None`` for an iterator of unknown length).
WindowProgress = Union[bool, Callable[[int, Optional[int]], Any]]


def _window(item: Any, index: int) -> Any:
    array = as_channels(item, f"windows[{index}]")
    if np.ndim(array) not in (1, 2):
        raise InvalidArgumentError(
            f"windows[{index}]: has shape {np.shape(array)}; each window is (channels, window)",
            argument=f"windows[{index}]",
        )
    return array


def _window_or_error(item: Any, index: int) -> Any:
    try:
        return _window(item, index)
    except InvalidArgumentError as e:
        return e


class _Source:
    """The windows, handed out in chunks. ``channels`` is known up front except for iterators."""

    def __init__(self, windows: Any) -> None:
        self.total: Optional[int] = None
        self.channels: Optional[int] = None
        self._array: Optional[np.ndarray] = None
        self._items: Optional[Iterator[Any]] = None
        self._next = 0
        if isinstance(windows, np.ndarray):
            if windows.ndim != 3:
                raise InvalidArgumentError(
                    f"windows: an array of windows is 3-D (N, channels, window); got shape {windows.shape}. "
                    "sensorium.windows(recording, window=...) cuts a (time, channels) recording",
                    argument="windows",
                )
            if windows.dtype.kind not in "iuf":
                raise InvalidArgumentError(
                    f"windows: has dtype {windows.dtype}, which is not a real number type", argument="windows"
                )
            if windows.shape[1] == 0 or windows.shape[2] == 0:
                raise InvalidArgumentError(f"windows: has empty windows (shape {windows.shape})", argument="windows")
            windows = without_mask(windows, "windows")
            self._array, self.total, self.channels = windows, windows.shape[0], windows.shape[1]
            return
        # A table of any library (pandas, polars...) is a recording, not windows.
        if isinstance(windows, (str, bytes, dict)) or is_series(windows) or hasattr(windows, "columns"):
            raise InvalidArgumentError(
                f"windows: takes a 3-D array, a list of 2-D arrays or an iterator of them, got {type(windows).__name__}; "
                "sensorium.windows(df, window=...) cuts a DataFrame into windows",
                argument="windows",
            )
        if isinstance(windows, Sequence):
            # Known length. A window that is not one (a wrong shape, a channel count unlike the
            # first window's, not an array) fails alone, as an iterator's does.
            self.total = len(windows)
            self._items = iter(windows)
            return
        try:
            self._items = iter(windows)
        except TypeError:
            raise InvalidArgumentError(
                f"windows: takes a 3-D array, a list of 2-D arrays or an iterator of them, got {type(windows).__name__}",
                argument="windows",
            ) from None
        hint = operator.length_hint(windows, -1)
        self.total = hint if hint >= 0 and not isinstance(windows, Iterator) else None

    #: What the iterator raised instead of giving the next window (the windows read before it are
    #: kept, and the batch finishes them).
    error: Optional[Exception] = None

    @property
    def read(self) -> int:
        """How many windows were taken so far."""
        return self._next

    def take(self, count: int) -> Any:
        """The next ``count`` windows at most (empty at the end). An item of an iterator that is
        not a window comes back as its ``InvalidArgumentError``, to fail alone; an exception of the
        iterator itself ends the chunk and is kept in ``error``."""
        start = self._next
        if self._array is not None:
            chunk: Any = self._array[start : start + count]
            self._next += len(chunk)
            return chunk
        assert self._items is not None
        chunk = []
        try:
            for item in itertools.islice(self._items, count):
                window = _window_or_error(item, start + len(chunk))
                if self.channels is None and not isinstance(window, InvalidArgumentError):
                    # The batch's partial result keeps this shape even if no window can be sent.
                    self.channels = np.shape(window)[0] if np.ndim(window) == 2 else 1
                chunk.append(window)
        except Exception as e:
            self.error = e
        self._next += len(chunk)
        return chunk


class _Run:
    """One ``embed_many`` call: checks the arguments, then feeds ``batch`` and reports progress."""

    def __init__(
        self,
        core: Any,
        model: Any,
        windows: Any,
        per_channel: Any,
        normalize_input: Any,
        concurrency: Any,
        progress: Any,
    ) -> None:
        if not isinstance(per_channel, bool):
            raise InvalidArgumentError(f"per_channel: takes True or False, got {per_channel!r}", argument="per_channel")
        if normalize_input is not None and not isinstance(normalize_input, bool):
            raise InvalidArgumentError(
                f"normalize_input: takes True, False or None, got {normalize_input!r}", argument="normalize_input"
            )
        if concurrency is not None:
            concurrency = _count(concurrency)
        if concurrency is not None and not -(2**63) <= concurrency < 2**63:  # the core checks the range itself
            raise InvalidArgumentError(f"concurrency: is {concurrency}, far more requests in flight than allowed",
                                       argument="concurrency")
        if not (isinstance(progress, bool) or callable(progress)):
            raise InvalidArgumentError(
                f"progress: takes True (a tqdm bar), False or a callback(done, total), got {progress!r}",
                argument="progress",
            )
        if inspect.iscoroutinefunction(progress) or inspect.iscoroutinefunction(getattr(progress, "__call__", None)):
            # Called from the feeding loop between waits, on both clients: a coroutine would be
            # created and never run.
            raise InvalidArgumentError(
                "progress: is an async function; embed_many calls progress(done, total) without awaiting it, "
                "so pass a plain function (it may schedule work with loop.call_soon or asyncio.create_task)",
                argument="progress",
            )
        self.per_channel = per_channel
        self.source = _Source(windows)
        self.batch = core.embed_many(model, normalize_input, per_channel, concurrency)
        self.exhausted = False
        self.reporter = _Reporter(
            None if isinstance(progress, bool) else progress,
            progress is True,
            "embed_many",
            unit="window",
            argument="progress",
            counts=lambda: (self.batch.finished, self.source.total),
        )

    def feed(self) -> None:
        """Hands the batch as many windows as it has room for; none once it has stopped."""
        if self.batch.stopped_by is not None:
            self.exhausted = True  # nothing more will be sent, so nothing more is read
            return
        room = self.batch.room
        if room == 0 or self.exhausted:
            return
        chunk = self.source.take(room)
        if self.source.error is not None:
            self.exhausted = True  # the windows read before it still go
        if len(chunk) == 0:
            self.exhausted = True
        elif isinstance(chunk, list) and any(isinstance(w, InvalidArgumentError) for w in chunk):
            # In order: the runs of good windows between the bad ones.
            run: list[Any] = []
            for w in chunk:
                if isinstance(w, InvalidArgumentError):
                    self.batch.push(run)
                    run = []
                    argument = w.argument or "windows"
                    self.batch.fail(argument, str(w).removeprefix(f"{argument}: "))
                else:
                    run.append(w)
            self.batch.push(run)
        else:
            self.batch.push(chunk)

    @property
    def must_wait(self) -> bool:
        return self.exhausted or self.batch.room == 0

    @property
    def done(self) -> bool:
        return self.exhausted and self.batch.pending == 0

    def result(self) -> npt.NDArray[np.float32]:
        self.reporter.tick()
        stopped_by = self.batch.stopped_by  # read before finish() hands the failures over
        vectors, failed, reported, not_sent, warnings = self.batch.finish()
        # Before any of the raises below: the warnings are about the windows that were embedded.
        _warn(warnings, len(vectors))
        if self.batch.submitted == 0 and self.source.error is None:
            return np.empty((0, self.source.channels or 0, EMBEDDING_DIM), dtype=np.float32)
        if stopped_by is not None:
            self._stopped(vectors, failed, reported, not_sent, stopped_by)
        if self.source.error is not None:
            self._iterator_failed(vectors, failed, not_sent)
        if not failed:
            return vectors  # type: ignore[no-any-return]
        hint = ""
        if isinstance(reported, PayloadTooLargeError) and not self.per_channel:
            hint = " The encoder refused the request size: per_channel=True sends one request per channel."
        first = f"windows[{failed[0]}]: "
        raise EmbedManyError(
            f"{len(failed)} of {len(vectors)} windows failed, the first {first}"
            f"{_sentence(reported).removeprefix(first)}.{hint} The others are in .partial (NaN rows for the failed "
            "ones, listed in .failed).",
            partial=self._shaped(vectors),
            failed=failed,
        ) from reported

    def _shaped(self, vectors: Any) -> Any:
        """``vectors`` with the input's channels even when no window was sent (the core learns the
        channel count from the first window it sends)."""
        if vectors.shape[1] == 0 and self.source.channels:
            return np.full((len(vectors), self.source.channels, EMBEDDING_DIM), np.nan, dtype=np.float32)
        return vectors

    def _iterator_failed(self, vectors: Any, failed: list[int], not_sent: list[int]) -> None:
        """Raises for an iterator that raised instead of giving the next window: the windows read
        before it were embedded (or failed) as usual; the one it could not give, and any after it
        when the length is known, are NaN rows listed in ``failed`` and ``not_sent``."""
        error = self.source.error
        vectors = self._shaped(vectors)
        read = len(vectors)
        total = self.source.total if self.source.total is not None and self.source.total > read else read + 1
        whole = np.full((total,) + vectors.shape[1:], np.nan, dtype=np.float32)
        whole[:read] = vectors
        unread = list(range(read, total))
        missing = sorted({*failed, *not_sent, *unread})
        raise EmbedManyError(
            f"embed_many: the windows iterator raised {type(error).__name__} at windows[{read}]: "
            f"{_sentence(error)}. The {read} windows read before it were sent: {total - len(missing)} of {total} "
            f"windows were embedded and are in .partial; the {len(missing)} others are NaN rows, listed in .failed "
            f"({len(unread) + len(not_sent)} of them never sent, listed in .not_sent).",
            partial=whole,
            failed=missing,
            not_sent=sorted({*not_sent, *unread}),
        ) from error

    def _stopped(self, vectors: Any, failed: list[int], reported: Any, not_sent: list[int], stopped_by: int) -> None:
        """Raises for a batch that stopped on an error no window escapes. With a known number of
        windows, ``partial`` still has a row for each (NaN for those never handed over), so
        ``e.partial[e.failed] = client.embed_many(model, windows[e.failed])`` completes it."""
        vectors = self._shaped(vectors)
        read, total = len(vectors), self.source.total
        if total is not None and total > read:
            whole = np.full((total,) + vectors.shape[1:], np.nan, dtype=np.float32)
            whole[:read] = vectors
            vectors, not_sent = whole, [*not_sent, *range(read, total)]
        missing = sorted({*failed, *not_sent})
        unread = f" The iterator was not read past windows[{read - 1}]." if total is None else ""
        raise EmbedManyError(
            f"embed_many stopped at windows[{stopped_by}]: {_sentence(reported)}. That error would repeat for "
            f"every window (it is about the key, the model or the address, not the data), so nothing more was "
            f"sent: {len(vectors) - len(missing)} of {len(vectors)} windows were embedded and are in .partial; the "
            f"{len(missing)} others are NaN rows, listed in .failed ({len(not_sent)} of them never sent, listed in "
            f".not_sent).{unread}",
            partial=vectors,
            failed=missing,
            not_sent=not_sent,
        ) from reported

    def close(self) -> None:
        self.batch.cancel()
        self.reporter.close()


def _count(value: Any) -> int:
    """``concurrency`` as an int: any integer type (``np.int64`` too), not a bool or a float."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"concurrency: takes a number of requests in flight, got {value!r}",
                                   argument="concurrency")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"concurrency: takes a whole number of requests in flight, got {type(value).__name__} {value!r}"
        ) from None


def _warn(warnings: list[tuple[str, int, list[int]]], total: int) -> None:
    """One ``UserWarning`` per distinct message the platform attached to the answers (as
    ``embed(...).warnings`` holds them), saying how many windows had it and the first few. A
    ``UserWarning``, as for a batch job's failed inputs: the data was changed to fit (a window
    truncated or padded), which the caller should see once, and can filter by message."""
    for message, windows, first in warnings:
        listed = ", ".join(str(i) for i in first) + (", ..." if windows > len(first) else "")
        warn_caller(f"embed_many: {windows:,} of {total:,} windows: {message} "
                    f"({'window' if windows == 1 else 'windows'} {listed})")


def _sentence(error: Any) -> str:
    """An error's message to go before a full stop of ours (most already end with one)."""
    return str(error).rstrip(".")


def embed_many_sync(core: Any, model: Any, windows: Any, **options: Any) -> npt.NDArray[np.float32]:
    run = _Run(core, model, windows, **options)
    try:
        while True:
            run.feed()
            if run.done:
                return run.result()
            if run.must_wait:
                run.batch.wait(run.batch.finished, False)
                run.reporter.tick()
    finally:
        run.close()


async def embed_many_async(core: Any, model: Any, windows: Any, **options: Any) -> npt.NDArray[np.float32]:
    run = _Run(core, model, windows, **options)
    try:
        while True:
            run.feed()
            if run.done:
                return run.result()
            if run.must_wait:
                await run.batch.wait(run.batch.finished, True)
                run.reporter.tick()
    finally:
        run.close()
