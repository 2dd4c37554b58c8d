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
    """The cursors one walk of a list has used. A page that gives one of them again as its next
    would have the walk go round for ever (a server that repeats its own next_cursor, or cycles):
    that page is refused. The core refuses a page with has_more and no cursor; this is the check
    that needs the pages before it, so it lives with the walk, which both pagers share."""

    def __init__(self, start: str | None) -> None:
        self._used = {start} if start is not None else set()

    def next(self, cursor: str) -> str:
        if cursor in self._used:
            from .errors import APIResponseValidationError

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
    """Iterates every item of a list, fetching the next page only when needed."""

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
            if not page.has_more or not page.next_cursor:
                return
            cursor = used.next(page.next_cursor)

    def __iter__(self) -> Iterator[T]:
        for page in self.pages():
            yield from page.data

    def to_pandas(self) -> Any:
        """Every item as a row of a ``pandas.DataFrame`` (each record's ``to_dict()``; ``pip install
        pandas``).

        >>> client.fine_tuning.jobs.events(job.id).to_pandas()  # doctest: +SKIP
        """
        return _frame(list(self))


class AsyncPager(Generic[T]):
    """``async for`` over every item of a list, fetching pages lazily."""

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
            if not page.has_more or not page.next_cursor:
                return
            cursor = used.next(page.next_cursor)

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.pages():
            for item in page.data:
                yield item

    async def to_pandas(self) -> Any:
        """See :meth:`SyncPager.to_pandas`."""
        return _frame([item async for item in self])


class Rows(list[T]):
    """A whole list read at once (``fine_tuning.jobs.metrics``): a plain ``list`` that also
    converts with ``to_pandas()``, as the pagers do.

    >>> client.fine_tuning.jobs.metrics(job.id).to_pandas()  # doctest: +SKIP
    """

    def to_pandas(self) -> Any:
        """Every item as a row of a ``pandas.DataFrame`` (``pip install pandas``)."""
        return _frame(list(self))


def _frame(items: list[Any]) -> Any:
    try:
        import pandas as pd  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError("to_pandas needs pandas (pip install 'sensorium[pandas]')",
                                   argument="to_pandas") from None
    return pd.DataFrame([item.to_dict() if hasattr(item, "to_dict") else item for item in items])
