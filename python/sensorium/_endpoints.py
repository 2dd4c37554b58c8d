"""Endpoints written once for ``Client`` and ``AsyncClient``.

A resource method does not make its call: it checks its arguments and returns a description
(``Request``, ``ListRequest``) or, for work of several steps (``wait``, ``download_results``), a
generator of steps. The client's runner carries it out: blocking on ``Client``, as an awaitable on
``AsyncClient``. Every request goes through the native core's one generic JSON call (auth,
retries, stall timeouts, typed errors, both list styles)::

    class Bundles(Resource):
        def get(self, bundle_id: str) -> Bundle:
            return self._call(Request("GET", f"/agents/bundles/{segment(bundle_id, 'bundle_id')}",
                                      surface="agents", cast=Bundle.from_dict))

The ``.pyi`` stubs beside each resource module are the only place that spells the two return
types (``Bundle`` on ``Client``, ``Awaitable[Bundle]`` on ``AsyncClient``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Generator, Generic, Literal, Mapping, Optional, Protocol, TypeVar, Union
from urllib.parse import quote

from ._progress import ProgressCallback, reporting, run_reported
from ._secrets import redacted
from .errors import APIResponseValidationError, InvalidArgumentError, _answer_text
from .pagination import AsyncPager, Page, SyncPager

T = TypeVar("T")
Surface = Literal["api", "fine_tuning", "agents"]


def _identity(raw: Any) -> Any:
    return raw


@dataclass(frozen=True)
class Request(Generic[T]):
    """One JSON call: ``path`` under ``surface``'s base URL; ``cast`` builds the result from the
    answer's JSON (``None`` for an empty answer). ``deadline`` (a ``time.monotonic()`` time) is
    when the call must be over, its retries and their pauses included: the core cuts attempts
    at it and raises ``WaitTimeoutError``, from the last failure, rather than retry past it
    (``wait(timeout=...)``'s polls). ``repeatable`` marks a POST whose repeat is harmless (a cancel,
    whose repeat meets 409 already-terminal; a query, which changes nothing): the core sends it
    again when its answer is lost. Any other POST is not sent again once it may have reached the
    server (the platform has no idempotency keys; the error's ``may_have_been_processed`` says
    so); GET, PUT and DELETE are always repeatable. ``renamed`` maps places in the body that
    came from a keyword argument of another name to that name (``{'connectors["sink"]': "sink"}``),
    so a bad value there is named as the caller wrote it."""

    method: str
    path: str
    query: Mapping[str, Any] = field(default_factory=dict)
    body: Any = None
    surface: Surface = "api"
    cast: Callable[[Any], T] = _identity
    deadline: Optional[float] = None
    repeatable: bool = False
    renamed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ListRequest(Generic[T]):
    """A list, followed page by page. ``cursor_param`` is where the next page's cursor goes
    (``after`` for most lists, ``before`` for one walked towards the newest, ``cursor`` for
    batch, ``offset`` for offset-style lists). ``item_cursors``: the answer says ``has_more``
    but may give no ``next_cursor`` (the spec's fine-tuning logs), and an item's ``id`` is the
    cursor."""

    path: str
    item: Callable[[Any], T]
    query: Mapping[str, Any] = field(default_factory=dict)
    surface: Surface = "api"
    cursor_param: str = "after"
    start: Optional[str] = None
    item_cursors: bool = False


@dataclass(frozen=True)
class Sleep:
    """A pause inside a multi-step operation (interruptible by Ctrl-C on ``Client``)."""

    seconds: float


@dataclass(frozen=True)
class Native(Generic[T]):
    """A call to one of the core's dedicated paths (transfers, the lens socket), which take the same arguments on
    both clients plus, when ``report`` is given, a progress handle and a tick:
    ``report = (on_progress, bar, label)``."""

    method: str
    args: tuple[Any, ...]
    report: Optional[tuple[Optional[ProgressCallback], bool, str]] = None
    cast: Callable[[Any], T] = _identity


@dataclass(frozen=True)
class CollectList(Generic[T]):
    """Every item of a list, as one step (for operations that need the whole list). ``deadline``
    (a ``time.monotonic()`` time) bounds the whole listing as ``Request.deadline`` bounds a
    call: each page gets what is left of it, and ``WaitTimeoutError`` once it has passed."""

    request: ListRequest[T]
    deadline: Optional[float] = None


@dataclass(frozen=True)
class Scrub(Generic[T]):
    """``value`` (texts, JSON, records) with the client's API key taken out, for what an
    operation builds from successful answers that may echo it (failures' messages and records)."""

    value: T


Step = Union[Request[Any], Sleep, Native[Any], CollectList[Any], Scrub[Any]]
Operation = Generator[Step, Any, T]


def segment(value: Any, argument: str) -> str:
    """``value`` as one percent-encoded path segment, refused before sending when it cannot be one.

    >>> segment("agt_01", "agent_id")
    'agt_01'
    """
    if not isinstance(value, str):
        raise TypeError(f"{argument}: expected a str, got {type(value).__name__}")
    if value in ("", ".", ".."):
        raise InvalidArgumentError(f"{argument}: {value!r} is not an id", argument=argument)
    try:
        return quote(value, safe="")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{argument}: contains a character that cannot be encoded as UTF-8 (a lone surrogate)",
            argument=argument,
        ) from None


def cursor_walk(after: Optional[str], before: Optional[str]) -> tuple[str, Optional[str]]:
    """The ``(cursor_param, start)`` of a list that pages with ``after``/``before`` (exclusive,
    newest first in both directions). A list started with ``before`` keeps walking that way:
    each next page asks ``before=<next_cursor>``, which the platform gives as the newest item of
    the page, so the walk reaches the newest item without skipping or repeating one; its items
    come oldest first, from the cursor outwards (see ``_CursorParam.page``). Sending the
    pager's usual ``after`` beside the fixed ``before`` was refused as exclusive (400)."""
    if after is not None and before is not None:
        raise InvalidArgumentError("before: after and before exclude each other", argument="before")
    for name, cursor in (("after", after), ("before", before)):
        if cursor is None:
            continue
        if not isinstance(cursor, str):
            raise TypeError(f"{name}: expected an id (a str), got {type(cursor).__name__}")
        if not cursor:
            raise InvalidArgumentError(f"{name}: is empty; it takes the id of an item of the list", argument=name)
    return ("before", before) if before is not None else ("after", after)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` pointing at the first line outside sensorium: the user's call. An
    operation runs inside the runner's loop, a different depth on ``Client`` and on
    ``AsyncClient``, so no fixed ``stacklevel`` can name that line."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def query(**params: Any) -> dict[str, Any]:
    """Query parameters with the ones not given (``None``) left out."""
    return {k: v for k, v in params.items() if v is not None}


# How many pages back a walk looks for items given twice (see `_CursorParam._unseen`).
SEEN_PAGES = 2


class _CursorParam:
    """Where a list's next cursor goes: the request's parameter, or ``offset`` once a page came in
    the older offset style (releases before 1.1.11), so one pager reads both styles; and the ids
    the walk has given. One per walk of a list (see ``SyncPager``'s ``walk``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._seen: deque[set[str | int]] = deque(maxlen=SEEN_PAGES)

    def params(self, request: ListRequest[Any], cursor: Optional[str]) -> dict[str, Any]:
        params = dict(request.query)
        if cursor is not None:
            params[self.name] = cursor
        return params

    def _unseen(self, items: list[Any]) -> list[Any]:
        """A page's items less those the walk already gave. Offset style: when the list grows
        while it is walked, the items at the boundary move down into the next page and would
        come twice. (An item removed meanwhile can still shift one past a boundary unseen: only
        cursor-style lists, from release 1.1.11, are free of that.) Cursor style: a server that
        repeats items of earlier pages (a cursor that lags) would hand them out twice. Only items
        with an id (a string, or a whole number as batch events have) can be told apart; the rest
        are all kept. The walk keeps the ids of its last ``SEEN_PAGES`` pages, not of every item it
        gave: a walk of 300,000 log lines held 33 MB of ids. Repeats come at a page's edge, from
        the page before; one from further back (a cursor lagging by more pages) is not caught."""
        fresh = []
        ids: set[str | int] = set()
        for item in items:
            key = item.get("id") if isinstance(item, dict) else None
            if isinstance(key, (str, int)) and not isinstance(key, bool):
                if key in ids or any(key in page for page in self._seen):
                    continue
                ids.add(key)
            fresh.append(item)
        self._seen.append(ids)
        return fresh

    def item_cursor(self, request: ListRequest[Any]) -> Optional[str]:
        """For a list whose items' ids are its cursors, which item of a page gives the next
        one (the core reads it): the oldest walking ``after``, the newest walking ``before``."""
        if not request.item_cursors:
            return None
        return "first" if self.name == "before" else "last"

    def page(self, raw: Any, request: ListRequest[T]) -> Page[T]:
        if self.name == "before" and isinstance(raw, dict) and isinstance(raw.get("data"), list):
            # Walking `before`, each page is the run of items just newer than the cursor, newest
            # first, and the next page is newer still: read as sent, the walk zig-zags (k2 k1 k4
            # k3 ...). Each page is turned round, so the walk goes from the cursor outwards,
            # oldest first, in one order throughout (as Stripe's `ending_before` walks do).
            raw = {**raw, "data": raw["data"][::-1]}
        if isinstance(raw, dict) and raw.get("next_param"):
            self.name = str(raw["next_param"])
        if isinstance(raw, dict) and isinstance(raw.get("data"), list):
            raw = {**raw, "data": self._unseen(raw["data"])}
        return Page.from_raw(raw, request.item)


def _read(build: Callable[[Any], T], raw: Any, redact: Callable[[str], str],
          request: Optional[Request[Any]] = None) -> T:
    """``build(raw)``. An answer of the wrong shape raises ``APIResponseValidationError`` with the
    whole answer as its ``body`` (a record or page knows only its own part). The core took the
    client's key out of the answer on arrival; both are redacted again all the same, since an
    exception is the one place the house rules most need it kept out of. For a ``request`` that
    is not sent again (a POST that creates or starts something), the message says that the
    platform answered it with success: it may well have done it, whatever the answer lacks."""
    try:
        return build(raw)
    except APIResponseValidationError as wrong:
        message = wrong.message
        if request is not None and request.method == "POST" and not request.repeatable:
            message += (f"; the platform answered the POST {request.path} with success, so it may have carried it "
                        "out: check (list or get what it makes) before calling again")
        raise APIResponseValidationError(redact(message), body=redact(_answer_text(raw))) from None


class _HasCore(Protocol):
    _core: Any


def _within(deadline: Optional[float]) -> Optional[float]:
    """Seconds left until ``deadline`` (0 once it has passed), as the core takes them."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


class SyncRunner:
    """Carries out descriptions on the blocking client. It reads the client's core on every call
    (``close()`` replaces it), and holding the client keeps pickling refused for its resources."""

    asynchronous = False

    def __init__(self, client: _HasCore) -> None:
        self._client = client

    def _core(self) -> Any:
        return self._client._core

    def call(self, request: Request[T]) -> T:
        # The core the request went through reads its answer: a `close()` meanwhile (another
        # thread, the end of a `with` block) must not turn a request the platform carried out
        # (a bundle created) into ClientClosedError, which invites a duplicate.
        core = self._core()
        raw = core.request(request.method, request.surface, request.path, dict(request.query), request.body,
                           False, False, _within(request.deadline), request.repeatable, dict(request.renamed))
        return _read(request.cast, raw, core.redact, request)

    def pager(self, request: ListRequest[T], deadline: Optional[float] = None) -> SyncPager[T]:
        def walk() -> Callable[[Optional[str]], Page[T]]:
            where = _CursorParam(request.cursor_param)

            def fetch(cursor: Optional[str]) -> Page[T]:
                core = self._core()
                raw = core.request("GET", request.surface, request.path, where.params(request, cursor), None,
                                   True, False, _within(deadline), item_cursor=where.item_cursor(request))
                return _read(lambda answer: where.page(answer, request), raw, core.redact)

            return fetch

        return SyncPager(walk(), request.start, walk=walk, source=request.path)

    def drive(self, operation: Operation[T]) -> T:
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                step = operation.throw(error) if error is not None else operation.send(value)
            except StopIteration as done:
                result: T = done.value
                return result
            value, error = None, None
            try:
                value = self._step(step)
            except Exception as e:  # handed to the operation, which may turn it into success
                error = e
            except BaseException:
                # A Ctrl-C or a cancellation ends the operation: its `finally` blocks (a progress
                # bar's close) run now, not whenever the traceback that holds it is dropped.
                operation.close()
                raise

    def _step(self, step: Step) -> Any:
        if isinstance(step, Request):
            return self.call(step)
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        if isinstance(step, CollectList):
            return list(self.pager(step.request, step.deadline))
        if isinstance(step, Native):
            return self.native(step)
        if isinstance(step, Scrub):
            return redacted(step.value, self._core().redact)
        raise TypeError(f"unknown step {step!r}")

    def native(self, step: Native[T]) -> T:
        function = getattr(self._core(), step.method)
        if step.report is None:
            return step.cast(function(*step.args, False))
        with reporting(*step.report) as r:
            raw = function(*step.args, r.handle, r.tick if r.active else None, False)
        return step.cast(raw)


class AsyncRunner:
    """Carries out descriptions on the asyncio client: every call returns an awaitable."""

    asynchronous = True

    def __init__(self, client: _HasCore) -> None:
        self._client = client

    def _core(self) -> Any:
        return self._client._core

    async def call(self, request: Request[T]) -> T:
        # The core the request went through reads its answer too (see SyncRunner.call); held
        # only for the call, since a core kept alive would keep its connections open.
        core = self._core()
        raw = await core.request(request.method, request.surface, request.path, dict(request.query),
                                 request.body, False, True, _within(request.deadline), request.repeatable,
                                 dict(request.renamed))
        return _read(request.cast, raw, core.redact, request)

    def pager(self, request: ListRequest[T], deadline: Optional[float] = None) -> AsyncPager[T]:
        def walk() -> Callable[[Optional[str]], Awaitable[Page[T]]]:
            where = _CursorParam(request.cursor_param)

            async def fetch(cursor: Optional[str]) -> Page[T]:
                core = self._core()
                raw = await core.request("GET", request.surface, request.path, where.params(request, cursor), None,
                                         True, True, _within(deadline), item_cursor=where.item_cursor(request))
                return _read(lambda answer: where.page(answer, request), raw, core.redact)

            return fetch

        return AsyncPager(walk(), request.start, walk=walk, source=request.path)

    async def drive(self, operation: Operation[T]) -> T:
        value: Any = None
        error: Optional[BaseException] = None
        while True:
            try:
                step = operation.throw(error) if error is not None else operation.send(value)
            except StopIteration as done:
                result: T = done.value
                return result
            value, error = None, None
            try:
                value = await self._step(step)
            except Exception as e:  # handed to the operation, which may turn it into success
                error = e
            except BaseException:
                # A Ctrl-C or a cancellation ends the operation: its `finally` blocks (a progress
                # bar's close) run now, not whenever the traceback that holds it is dropped.
                operation.close()
                raise

    async def _step(self, step: Step) -> Any:
        if isinstance(step, Request):
            return await self.call(step)
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        if isinstance(step, CollectList):
            return [item async for item in self.pager(step.request, step.deadline)]
        if isinstance(step, Native):
            return await self.native(step)
        if isinstance(step, Scrub):
            return redacted(step.value, self._core().redact)
        raise TypeError(f"unknown step {step!r}")

    async def native(self, step: Native[T]) -> T:
        function = getattr(self._core(), step.method)
        if step.report is None:
            return step.cast(await function(*step.args, True))
        # The asyncio loop polls progress itself, so no tick.
        raw = await run_reported(*step.report, lambda handle: function(*step.args, handle, None, True))
        return step.cast(raw)


Runner = Union[SyncRunner, AsyncRunner]


C = TypeVar("C", bound=type)


def awaited(*names: str) -> Callable[[C], C]:
    """Class decorator of an ``Async*`` resource: its methods ``names``, written once for both
    clients and returning an awaitable on ``AsyncClient``, become coroutine functions. A bad
    argument is then raised where the call is awaited, as ``AsyncClient.query``'s is (and
    openai-python's), not where it is made; and ``inspect.iscoroutinefunction`` says what the
    stubs say, which frameworks that dispatch on it rely on. (A test holds the lists to the
    stubs.)"""

    def decorate(cls: C) -> C:
        for name in names:
            setattr(cls, name, _coroutine_function(getattr(cls, name)))
        return cls

    return decorate


def _coroutine_function(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def awaiting(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await method(self, *args, **kwargs)

    return awaiting


class Resource:
    """Base of the resources written once for both clients: ``_call``, ``_list`` and ``_drive``
    return the result on ``Client`` and an awaitable (or an async pager) on ``AsyncClient``."""

    def __init__(self, runner: Runner) -> None:
        self._runner = runner

    def _call(self, request: Request[T]) -> Any:
        return self._runner.call(request)

    def _list(self, request: ListRequest[T]) -> Any:
        return self._runner.pager(request)

    def _native(self, step: Native[T]) -> Any:
        return self._runner.native(step)

    def _drive(self, operation: Operation[T]) -> Any:
        return self._runner.drive(operation)

    def __repr__(self) -> str:
        kind = "async " if self._runner.asynchronous else ""
        return f"<{kind}{type(self).__name__} resource>"


class Namespace:
    """A group of resources (``client.agents``, ``client.batch``); its repr lists them."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {', '.join(name for name in vars(self) if not name.startswith('_'))}>"
