"""Lazy iterators over cursor-paginated lists.

Example::

    for record in client.files.list():          # fetches pages as you go
        print(record.file_id)

    pager = client.files.list(limit=50)
    page = pager.first_page()                    # page by hand
    print(page.has_more, page.next_cursor)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")

__all__ = ["Page", "SyncPager", "AsyncPager", "Rows"]

# A walk that meets this many empty pages in a row, each saying has_more, is refused. A server
# may give an empty page with more to come now and then (a page whose items were all filtered
# out after it was cut, or all given already); a hundred in a row, a hundred requests that
# brought nothing, is a list that never ends, which would otherwise be polled as fast as the
# server answers, for ever. The bound is high enough that no list still being read meets it.
EMPTY_PAGES_IN_A_ROW = 100


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its items, and the cursor of the next page when there is one."""

    data: list[T]
    has_more: bool
    next_cursor: str | None
    prev_cursor: str | None = None

    @classmethod
    def from_raw(cls, raw: dict[str, Any], convert: Callable[[dict[str, Any]], T]) -> Page[T]:
        return cls(
            data=[convert(item) for item in raw["data"]],
            has_more=bool(raw.get("has_more")),
            next_cursor=raw.get("next_cursor"),
            prev_cursor=raw.get("prev_cursor"),
        )


class _Cursors:
    """The cursors one walk of a list has used, and how many empty pages it has met in a row. A
    page that gives a used cursor again as its next would have the walk go round for ever (a
    server that repeats its own next_cursor, or cycles), and so would one that gives new cursors
    to empty pages without end: either is refused. The core refuses a page with has_more and no
    cursor; these are the checks that need the pages before it, so they live with the walk,
    which both pagers share."""

    def __init__(self, start: str | None) -> None:
        self._used = {start} if start is not None else set()
        self._empty = 0

    def next(self, page: Page[Any]) -> str | None:
        """The cursor to follow after ``page``, or ``None`` at the end of the list."""
        if not page.has_more or not page.next_cursor:
            return None
        from .errors import APIResponseValidationError

        cursor = page.next_cursor
        self._empty = 0 if page.data else self._empty + 1
        if self._empty >= EMPTY_PAGES_IN_A_ROW:
            raise APIResponseValidationError(
                f"the list gave {self._empty} empty pages in a row, each saying it has more, so it would give empty "
                f"pages without end (the last pointed on to {cursor!r:.80}); the rest of the list cannot be read")
        if cursor in self._used:
            raise APIResponseValidationError(
                f"the list gave the cursor {cursor!r:.80} again after it had been followed, so the walk would "
                "never end; the rest of the list cannot be read")
        self._used.add(cursor)
        return cursor


def _pager_repr(pager: Any, source: str | None) -> str:
    # A pager reads nothing until iterated; a notebook user who expected a list sees how to get one.
    where = f" over {source}" if source else ""
    how = "async for over it" if isinstance(pager, AsyncPager) else "iterate it, or list(...) it,"
    return f"<{type(pager).__name__}{where}: {how} to fetch the items>"


class SyncPager(Generic[T]):
    """Iterates every item of a list, fetching the next page only when needed. Each item with an
    ``id`` comes once per walk, even when a page repeats items an earlier page gave. A list that
    cannot end is ``APIResponseValidationError``, not a walk for ever: a cursor given again, or
    ``EMPTY_PAGES_IN_A_ROW`` empty pages in a row that each say ``has_more``."""

    def __init__(self, fetch: Callable[[str | None], Page[T]], cursor: str | None = None, *,
                 walk: Callable[[], Callable[[str | None], Page[T]]] | None = None,
                 source: str | None = None) -> None:
        # `walk` makes the fetch of one walk (its own state: the cursor parameter a page
        # switched to, the ids an offset-style walk has given), so walks of one pager, one
        # after another or interleaved, never share it. `source` (the list's path) is for repr.
        self._fetch = fetch
        self._cursor = cursor
        self._walk = walk
        self._source = source

    def __repr__(self) -> str:
        return _pager_repr(self, self._source)

    def _walk_fetch(self) -> Callable[[str | None], Page[T]]:
        return self._walk() if self._walk is not None else self._fetch

    def first_page(self) -> Page[T]:
        return self._walk_fetch()(self._cursor)

    def pages(self) -> Iterator[Page[T]]:
        cursor = self._cursor
        used = _Cursors(cursor)
        fetch = self._walk_fetch()
        while True:
            page = fetch(cursor)
            yield page
            cursor = used.next(page)
            if cursor is None:
                return

    def __iter__(self) -> Iterator[T]:
        for page in self.pages():
            yield from page.data

    def to_pandas(self) -> Any:
        """Every item as a row of a ``pandas.DataFrame`` (each record's ``to_dict()``; ``pip install
        pandas``).

        >>> client.fine_tuning.jobs.events(job.id).to_pandas()  # doctest: +SKIP
        """
        pandas = _pandas()  # without it, nothing is fetched
        return _frame(pandas, list(self))


class AsyncPager(Generic[T]):
    """``async for`` over every item of a list, fetching pages lazily; it reads pages as
    :class:`SyncPager` does."""

    def __init__(self, fetch: Callable[[str | None], Awaitable[Page[T]]], cursor: str | None = None, *,
                 walk: Callable[[], Callable[[str | None], Awaitable[Page[T]]]] | None = None,
                 source: str | None = None) -> None:
        # `walk` makes the fetch of one walk (its own state: the cursor parameter a page
        # switched to, the ids an offset-style walk has given), so walks of one pager, one
        # after another or interleaved, never share it. `source` (the list's path) is for repr.
        self._fetch = fetch
        self._cursor = cursor
        self._walk = walk
        self._source = source

    def __repr__(self) -> str:
        return _pager_repr(self, self._source)

    def _walk_fetch(self) -> Callable[[str | None], Awaitable[Page[T]]]:
        return self._walk() if self._walk is not None else self._fetch

    async def first_page(self) -> Page[T]:
        return await self._walk_fetch()(self._cursor)

    async def pages(self) -> AsyncIterator[Page[T]]:
        cursor = self._cursor
        used = _Cursors(cursor)
        fetch = self._walk_fetch()
        while True:
            page = await fetch(cursor)
            yield page
            cursor = used.next(page)
            if cursor is None:
                return

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.pages():
            for item in page.data:
                yield item

    async def to_pandas(self) -> Any:
        """See :meth:`SyncPager.to_pandas`."""
        pandas = _pandas()  # without it, nothing is fetched
        return _frame(pandas, [item async for item in self])


class Rows(list[T]):
    """A whole list read at once (``fine_tuning.jobs.metrics``): a plain ``list`` that also
    converts with ``to_pandas()``, as the pagers do.

    >>> client.fine_tuning.jobs.metrics(job.id).to_pandas()  # doctest: +SKIP
    """

    def to_pandas(self) -> Any:
        """Every item as a row of a ``pandas.DataFrame`` (``pip install pandas``)."""
        return _frame(_pandas(), list(self))


def _pandas() -> Any:
    """The pandas module, or the error saying it is needed: asked for before a pager fetches a
    page, so that a missing pandas costs no walk through the whole list."""
    try:
        import pandas  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError("to_pandas needs pandas (pip install 'sensorium[pandas]')",
                                   argument="to_pandas") from None
    return pandas


def _frame(pandas: Any, items: list[Any]) -> Any:
    return pandas.DataFrame([item.to_dict() if hasattr(item, "to_dict") else item for item in items])
