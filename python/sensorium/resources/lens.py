"""``client.lens``: the legacy lens runtime (lenses, sessions, the SSE stream), written once for
both clients. The runtime is deprecated: direct query and agents replace it.

Example::

    lens = client.lens.register("echo", model_pipeline=[
        {"processor_name": "lens_noop_processor", "processor_config": {}},
        {"processor_name": "server_sent_events_writer", "processor_config": {}}])
    session = client.lens.sessions.create(lens.lens_id)
    client.lens.sessions.wait_until_running(session.session_id, timeout=30)
    with client.lens.sessions.stream(session.session_id) as events:
        for event in events:
            print(event.type, event.event_data)
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any, Awaitable, Callable, Generator, Mapping, Optional, Sequence, Union

import yaml

from .._arguments import flag, mapping, text
from .._core import NumericEvent
from .._endpoints import Native, Operation, Request, Resource, Runner, awaited, query, segment
from .._numeric import as_channels
from .._waiting import wait_for
from ..errors import InvalidArgumentError, LensEventError, SensoriumError
from ..types import REDACTED_KEY, Lens, LensSession, StreamEvent, lens_session_status

__all__ = ["LensRuntime", "AsyncLensRuntime", "EventStream", "AsyncEventStream", "SessionSocket",
           "AsyncSessionSocket", "AsyncSocketOpener", "warn_deprecated"]

# A lens's `model_pipeline`: its processors, each `{processor_name, processor_config}`.
Processors = Sequence[Mapping[str, Any]]

_warned = False


def warn_deprecated() -> None:
    """One ``DeprecationWarning`` per process, on the first use of ``client.lens``."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("the lens runtime is deprecated and not for new projects: direct query (client.query, "
                      "client.embed) and agents (client.agents) replace it", DeprecationWarning, stacklevel=3)


def _text(value: Any, argument: str) -> str:
    """A name or id argument, checked before sending: a string with something in it."""
    return str(text(value, argument, required=True))


def _pipeline(value: Any, argument: str) -> list[dict[str, Any]]:
    """``model_pipeline`` checked: a list of ``{processor_name, processor_config}`` entries."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{argument}: expected a list of processors, got {type(value).__name__}")
    entries = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("processor_name"), str):
            raise InvalidArgumentError(f"{argument}[{i}]: each processor is {{processor_name: str, "
                                       f"processor_config: dict}}, got {entry!r}", argument=argument)
        if not isinstance(entry.get("processor_config", {}), Mapping):
            raise InvalidArgumentError(f"{argument}[{i}].processor_config: must be a dict", argument=argument)
        entries.append(dict(entry))
    return entries


def _parameters(value: Any, argument: str) -> dict[str, Any]:
    return mapping(value, argument) or {}


def _checked_config(config: Mapping[str, Any], argument: str, source: str) -> dict[str, Any]:
    out = dict(config)
    if out.get("lens_name") is None:
        raise InvalidArgumentError(f"name: {source} has no lens_name (the lens's name)", argument="name")
    _text(out["lens_name"], f"{argument}.lens_name")
    if "model_pipeline" in out:
        out["model_pipeline"] = _pipeline(out["model_pipeline"], f"{argument}.model_pipeline")
    if "model_parameters" in out:
        out["model_parameters"] = _parameters(out["model_parameters"], f"{argument}.model_parameters")
    return out


def lens_config(name: Any, model_pipeline: Any, model_parameters: Any) -> dict[str, Any]:
    """The ``lens_config`` of ``register``: from a name and its parts, a whole config dict, or
    YAML text of one; checked before sending."""
    if isinstance(name, Mapping):
        if model_pipeline is not None or model_parameters is not None:
            raise InvalidArgumentError("name: a whole lens_config dict already holds model_pipeline and "
                                       "model_parameters; pass them inside it", argument="name")
        return _checked_config(name, "lens_config", "the lens_config dict")
    if isinstance(name, str) and model_pipeline is None and ("\n" in name or ":" in name):
        try:
            loaded = yaml.safe_load(name)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise InvalidArgumentError(f"name: the lens YAML does not parse{where}: {e}", argument="name") from None
        if not isinstance(loaded, Mapping):
            raise InvalidArgumentError("name: the lens YAML must be a mapping with lens_name", argument="name")
        return _checked_config(loaded, "lens_config", "the lens YAML")
    _text(name, "name")
    if model_pipeline is None:
        raise InvalidArgumentError("model_pipeline: a lens needs its processors (a list of {processor_name, "
                                   "processor_config})", argument="model_pipeline")
    return {"lens_name": name, "model_pipeline": _pipeline(model_pipeline, "model_pipeline"),
            "model_parameters": {} if model_parameters is None else _parameters(model_parameters, "model_parameters")}


def _lenses(raw: Any) -> list[Lens]:
    return [Lens.from_dict(item) for item in (raw if isinstance(raw, list) else [])]


def _sessions(raw: Any) -> list[LensSession]:
    return [LensSession.from_dict(item) for item in (raw if isinstance(raw, list) else [])]


def _event_answer(raw: Any) -> Any:
    """``process_event``'s answer: the ``event_data`` of a success; the 200-style error body, or
    the empty object some deployments send for a bad session or event, raised."""
    if not isinstance(raw, dict) or not raw:
        raise LensEventError(["the platform answered an empty object: the session id or the event is not valid"],
                             body=raw)
    if raw.get("type") == "error":
        data = raw.get("event_data") or {}
        messages = data.get("error_messages") if isinstance(data, dict) else None
        raise LensEventError([str(m) for m in messages] if isinstance(messages, list) and messages
                             else ["the event was refused"], body=raw)
    return raw.get("event_data")


class Sessions(Resource):
    """Sessions of lenses: create, watch, feed, stream, destroy."""

    def create(self, lens_id: str) -> Any:
        """Starts a session of ``lens_id``; it is ``registered`` until its runner starts it.

        >>> session = client.lens.sessions.create("lns-...")  # doctest: +SKIP
        """
        return self._call(Request("POST", "/lens/sessions/create", body={"lens_id": _text(lens_id, "lens_id")},
                                  cast=LensSession.from_dict))

    def destroy(self, session_id: str) -> Any:
        """Ends a session; an open stream gets what remains and then ends.

        >>> client.lens.sessions.destroy(sid).status  # doctest: +SKIP
        'destroyed'
        """
        return self._call(Request("POST", "/lens/sessions/destroy",
                                  body={"session_id": _text(session_id, "session_id")}, cast=LensSession.from_dict))

    def info(self, session_id: str) -> Any:
        """One session's record (its counters and timestamps).

        >>> info = client.lens.sessions.info(sid)  # doctest: +SKIP
        >>> info.status, info.num_outputs  # doctest: +SKIP
        ('running', 0)
        """
        return self._call(Request("GET", "/lens/sessions/info", query(session_id=_text(session_id, "session_id")),
                                  cast=LensSession.from_dict))

    def metadata(self) -> Any:
        """Every active session of the organization.

        >>> [(s.session_id, s.status) for s in client.lens.sessions.metadata()]  # doctest: +SKIP
        [('lsn-...', 'running')]
        """
        return self._call(Request("GET", "/lens/sessions/metadata", cast=_sessions))

    def process_event(self, session_id: str, event: Mapping[str, Any]) -> Any:
        """Runs one event (``{type, event_data}`` or ``{type, data}``) through the session's
        pipeline and returns the answer's ``event_data``; a refused event raises
        ``LensEventError`` with the platform's messages.

        >>> client.lens.sessions.process_event(sid, {"type": "text", "event_data": {"text": "hi"}})  # doctest: +SKIP
        """
        if not isinstance(event, Mapping):
            raise TypeError(f"event: expected a dict, got {type(event).__name__}")
        if not isinstance(event.get("type"), str) or not event["type"]:
            raise InvalidArgumentError("event: needs a 'type' (such as 'image', 'text' or 'data.json')",
                                       argument="event")
        return self._call(Request("POST", "/lens/sessions/events/process",
                                  body={"session_id": _text(session_id, "session_id"), "event": dict(event)},
                                  cast=_event_answer))

    def wait_until_running(self, session_id: str, *, timeout: Optional[float] = None) -> Any:
        """Waits until the session's runner has started it (either status spelling) and returns
        the record; ``WaitTimeoutError`` after ``timeout`` seconds, and a destroyed or expired
        session raises.

        >>> client.lens.sessions.wait_until_running(session.session_id, timeout=30).status  # doctest: +SKIP
        'running'
        """
        _text(session_id, "session_id")
        return self._drive(self._wait_until_running(session_id, timeout))

    def _wait_until_running(self, session_id: str, timeout: Optional[float]) -> Operation[LensSession]:
        def progress_word(record: LensSession) -> str:
            status = lens_session_status(record.session_status)
            return {"running": "completed", "destroyed": "failed", "expired": "failed"}.get(status, status)

        def ended(record: LensSession, _logs: Any, what: str) -> SensoriumError:
            return SensoriumError(f"{what} is {record.status} and will not run")

        session: LensSession = yield from wait_for(
            lambda: Request("GET", "/lens/sessions/info", query(session_id=session_id), cast=LensSession.from_dict),
            None, timeout, False, f"lens session {session_id}", status_of=progress_word, failure=ended)
        return session

    def stream(self, session_id: str, *, last_event_id: Optional[str] = None, heartbeats: bool = False) -> Any:
        """The session's output events as they come (SSE), each with ``id``, ``type`` and
        ``event_data``. A dropped or stalled connection is resumed after the last event read
        (``Last-Event-ID``), so nothing is lost or repeated; the iteration ends when the session
        ends (``sse.stream.end``). Heartbeats are hidden unless ``heartbeats=True``.
        ``stream.last_event_id`` is the id of the last event handed out: pass it as
        ``last_event_id`` to continue in another process. A stream that fails (8 reconnects in a
        row bring no event, each connect retried by the client's retry rule: about 30 s without a
        server by default; on a client with ``max_retries=0``, after one immediate resume; or the
        session is gone) raises ``APIConnectionError`` naming the id to resume
        from, on that read and on every later one, never ending as if the session had. A context manager (closing it stops reading); an async
        iterator on ``AsyncClient``.

        What cannot be resumed without losing or repeating events raises rather than resumes:
        a connection lost after handing out events when none had an id (reconnecting would start
        the stream over and hand them out again: ``APIConnectionError``; open the stream again to
        read it from the start), or whose last event id holds a control character (a ``Last-Event-ID`` header
        cannot carry it; a non-ASCII id is sent back as UTF-8). A server's ``retry:`` is waited
        at most 60 s (as a ``Retry-After`` is). A 200 answer that is not ``text/event-stream``
        (parameters aside; one without a Content-Type is read as a stream), such as a proxy's
        sign-in page, and an event larger than 16 MiB raise ``APIResponseValidationError`` at
        once, naming the Content-Type and quoting the answer's start, or the size.

        >>> with client.lens.sessions.stream(sid) as events:  # doctest: +SKIP
        ...     for event in events:
        ...         print(event.type, event.event_data)
        """
        path = f"/lens/sessions/consumer/{segment(_text(session_id, 'session_id'), 'session_id')}"
        if last_event_id is not None:
            if not isinstance(last_event_id, str):
                raise TypeError(f"last_event_id: expected a str, got {type(last_event_id).__name__}")
            # It goes out as the Last-Event-ID header, which cannot carry these; and no event id
            # has a line break (the SSE framing ends the id there).
            if any((c < " " and c != "\t") or c == "\x7f" for c in last_event_id):
                raise InvalidArgumentError(f"last_event_id: {last_event_id!r} holds a line break or control "
                                           "character, which no event id has", argument="last_event_id")
        feed = self._runner._core().open_stream(path, last_event_id, bool(flag(heartbeats, "heartbeats")))
        kind = AsyncEventStream if self._runner.asynchronous else EventStream
        return kind(feed, last_event_id)


    def connect(self, session_id: str, *, subprotocol: bool = False) -> Any:
        """Opens the session's WebSocket (its ``session_endpoint``): a context manager whose calls
        each get their own reply. On ``AsyncClient``, ``async with connect(sid) as socket`` opens
        and closes it (``await connect(sid)`` gives the open socket). The key goes in the
        ``Authorization`` header, or with ``subprotocol=True`` in ``Sec-WebSocket-Protocol``
        (for proxies that drop the header on upgrades). The socket goes through the proxy the
        calls to its host take (``HTTP_PROXY``...; never for loopback). A ``ws://`` endpoint is
        refused (``APIResponseValidationError``) while ``base_url`` is ``https://``: the key would
        travel unencrypted.

        >>> with client.lens.sessions.connect(sid) as socket:  # doctest: +SKIP
        ...     socket.update(np.random.rand(3, 256))
        ...     print(socket.read())
        """
        _text(session_id, "session_id")
        subprotocol = bool(flag(subprotocol, "subprotocol"))
        if self._runner.asynchronous:
            return AsyncSocketOpener(lambda: self._drive(self._connect(session_id, subprotocol)))
        return self._drive(self._connect(session_id, subprotocol))

    def _connect(self, session_id: str, subprotocol: bool) -> Operation[SessionSocket]:
        session: LensSession = yield Request("GET", "/lens/sessions/info", query(session_id=session_id),
                                             cast=LensSession.from_dict)
        if not session.session_endpoint:
            raise InvalidArgumentError(f"session_id: session {session_id} has no session_endpoint to connect to",
                                       argument="session_id")
        kind = AsyncSessionSocket if self._runner.asynchronous else SessionSocket
        socket: SessionSocket = yield Native("connect_socket", (session.session_endpoint, subprotocol),
                                             cast=lambda raw: kind(raw, session_id))
        return socket


@awaited("create", "destroy", "info", "metadata", "process_event", "wait_until_running")
class AsyncSessions(Sessions):
    """``async_client.lens.sessions``."""


class LensRuntime(Resource):
    """``client.lens``: lenses of the legacy runtime, and their ``sessions``."""

    def __init__(self, runner: Runner) -> None:
        super().__init__(runner)
        self.sessions = (AsyncSessions if runner.asynchronous else Sessions)(runner)

    def register(self, name: Union[str, Mapping[str, Any]], *, model_pipeline: Optional[Processors] = None,
                 model_parameters: Optional[Mapping[str, Any]] = None) -> Any:
        """Registers a lens from its name and processors, a whole ``lens_config`` dict, or YAML
        text of one; checked before sending.

        >>> client.lens.register("echo", model_pipeline=[{"processor_name": "lens_noop_processor",  # doctest: +SKIP
        ...                                               "processor_config": {}}])
        """
        config = lens_config(name, model_pipeline, model_parameters)
        # A bad value is named by the keyword it came from: the pipeline and the parameters when
        # given apart, else the whole configuration given as `name`.
        renamed = {"lens_config": "name"} if not isinstance(name, str) or model_pipeline is None else {
            'lens_config["model_pipeline"]': "model_pipeline", 'lens_config["model_parameters"]': "model_parameters"}
        return self._call(Request("POST", "/lens/register", body={"lens_config": config}, cast=Lens.from_dict,
                                  renamed=renamed))

    def clone(self, lens_id: str, *, name: Optional[str] = None) -> Any:
        """A modifiable copy of a lens (named ``name`` when given).

        >>> mine = client.lens.clone(lens.lens_id, name="echo-2")  # doctest: +SKIP
        """
        body: dict[str, Any] = {"lens_id": _text(lens_id, "lens_id")}
        if name is not None:
            body["lens_name"] = _text(name, "name")
        return self._call(Request("POST", "/lens/clone", body=body, cast=Lens.from_dict))

    def modify(self, lens_id: str, *, lens_name: Optional[str] = None,
               model_pipeline: Optional[Processors] = None,
               model_parameters: Optional[Mapping[str, Any]] = None) -> Any:
        """Replaces the given parts of a lens's configuration; returns the lens.

        >>> mine = client.lens.modify(mine.lens_id, model_parameters={"threshold": 0.5})  # doctest: +SKIP
        """
        body: dict[str, Any] = {"lens_id": _text(lens_id, "lens_id")}
        if lens_name is not None:
            body["lens_name"] = _text(lens_name, "lens_name")
        if model_pipeline is not None:
            body["model_pipeline"] = _pipeline(model_pipeline, "model_pipeline")
        if model_parameters is not None:
            body["model_parameters"] = _parameters(model_parameters, "model_parameters")
        if len(body) == 1:
            raise InvalidArgumentError("modify: give lens_name, model_pipeline or model_parameters to change",
                                       argument="lens_name")
        return self._call(Request("POST", "/lens/modify", body=body, cast=Lens.from_dict))

    def delete(self, lens_id: str) -> Any:
        """Deletes a modifiable lens; returns the platform's answer.

        >>> client.lens.delete(mine.lens_id)  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        return self._call(Request("POST", "/lens/delete", body={"lens_id": _text(lens_id, "lens_id")}))

    def info(self, lens_id: str) -> Any:
        """One lens.

        >>> client.lens.info(lens.lens_id).lens_config["model_pipeline"][0]["processor_name"]  # doctest: +SKIP
        'lens_noop_processor'
        """
        return self._call(Request("GET", "/lens/info", query(lens_id=_text(lens_id, "lens_id")), cast=Lens.from_dict))

    def metadata(self) -> Any:
        """Every lens the organization can use.

        >>> [(lens.lens_id, lens.lens_name) for lens in client.lens.metadata()]  # doctest: +SKIP
        [('lns-...', ...), ...]
        """
        return self._call(Request("GET", "/lens/metadata", cast=_lenses))


@awaited("register", "clone", "modify", "delete", "info", "metadata")
class AsyncLensRuntime(LensRuntime):
    """``async_client.lens``."""


class EventStream:
    """The events of one session's SSE stream, read in batches by the core (see
    ``Sessions.stream``)."""

    def __init__(self, feed: Any, last_event_id: Optional[str]) -> None:
        self._feed = feed
        # Last event first; the core adds each batch itself, so that a Ctrl-C or a cancellation
        # never falls between a batch leaving the core and its landing here.
        self._pending: list[StreamEvent] = []
        self._ended = False
        self.last_event_id = last_event_id

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> StreamEvent:
        while not self._pending:
            if self._ended:
                raise StopIteration
            if not self._take():
                self._feed.wait(False)
        return self._hand_out()

    def _take(self) -> bool:
        """Moves what has arrived into ``_pending``; ``False`` when nothing has yet."""
        state = self._feed.take_into(self._pending)
        if state is None:
            return False
        if state:
            self._ended = True
        return True

    def _hand_out(self) -> StreamEvent:
        # The event leaves `_pending` last, and by `del` rather than `pop()`: CPython runs signal
        # handlers (Ctrl-C) after a call such as `pop()`, never between these statements and the
        # return, so a KeyboardInterrupt comes before the event is handed out (it stays pending
        # for the next call) or after the caller has it; `last_event_id` never names an event
        # the caller did not get.
        event = self._pending[-1]
        self.last_event_id = event.id
        del self._pending[-1]
        return event

    def close(self) -> None:
        """Stops reading and closes the connection."""
        self._ended = True
        self._pending = []
        self._feed.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Closed:
    """What ``AsyncEventStream.close()`` returns: the stream is closed when the call returns, so
    awaiting this does nothing more, and leaving it unawaited (as code written before it was
    awaitable does) loses nothing and warns of nothing, unlike an unawaited coroutine."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that ends at once: `await` gets None without suspending


class AsyncEventStream(EventStream):
    """``EventStream`` for ``async for`` and ``async with``. Cancelling ``__anext__`` (a timeout
    around it) loses no event: what arrived meanwhile is handed out by the next call.

    ``close()`` closes at once and may be awaited (``await events.close()``, as on the
    session's socket) or not; ``aclose()`` is the coroutine, as on ``AsyncClient``.

    >>> events = async_client.lens.sessions.stream(sid)  # doctest: +SKIP
    >>> event = await anext(events)                       # doctest: +SKIP
    >>> await events.aclose()                             # doctest: +SKIP
    """

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._pending:
            if self._ended:
                raise StopAsyncIteration
            if not self._take():
                await self._feed.wait(True)
        return self._hand_out()

    def close(self) -> _Closed:  # type: ignore[override]
        """Stops reading and closes the connection, at once; returns an awaitable, so that
        ``await events.close()`` works too (the socket's ``close()`` is awaited)."""
        super().close()
        return _Closed()

    async def aclose(self) -> None:
        """Stops reading and closes the connection (the coroutine twin of ``close()``)."""
        super().close()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _scrub(value: Any) -> Any:
    """A reply with any ``api_key`` entry replaced (``session.status`` returns the record with
    the key, which the core has already taken out of every message; an entry holding another
    key is hidden too)."""
    if isinstance(value, dict):
        return {k: REDACTED_KEY if k == "api_key" and v is not None else _scrub(v) for k, v in value.items()}
    return value


def _event_data(reply: Any) -> Any:
    """A helper's result: the reply's ``event_data``; a refusal (``type: error`` or
    ``is_valid: false``) raised as ``LensEventError``."""
    data = reply.get("event_data") if isinstance(reply, dict) else None
    refused = isinstance(reply, dict) and reply.get("type") == "error"
    if isinstance(data, dict) and data.get("is_valid") is False:
        refused = True
    if refused:
        messages = data.get("error_messages") if isinstance(data, dict) else None
        raise LensEventError([str(m) for m in messages] if isinstance(messages, list) and messages
                             else ["the session refused the request"], body=reply)
    return data


def _status_record(reply: Any) -> LensSession:
    """``session.status``'s reply: the bare session record; anything else (the
    ``session.status.response`` refusal a destroyed session gets) raised as ``LensEventError``."""
    if isinstance(reply, dict) and "session_id" in reply and "type" not in reply:
        return LensSession.from_dict(reply)
    _event_data(reply)
    raise LensEventError(["the session answered session.status without its record"], body=reply)


def _input_event(event: Any) -> Any:
    """``update``'s event: a ``{type, event_data}`` dict as given, or a numeric window (numpy,
    pandas, lists) as a ``data.numeric_array`` event, converted as ``embed`` converts it."""
    if isinstance(event, Mapping):
        if not isinstance(event.get("type"), str) or not event["type"]:
            raise InvalidArgumentError("event: needs a 'type' (such as 'data.numeric_array')", argument="event")
        return dict(event)
    if isinstance(event, NumericEvent):
        return event
    return NumericEvent._from_array(as_channels(event, "event"), "event")


class SessionSocket:
    """A lens session's WebSocket (``client.lens.sessions.connect``). Each helper sends one
    request and returns its reply's ``event_data`` (a refusal raises ``LensEventError``);
    ``send`` returns any request's whole reply. One request is in flight at a time.

    A key the server echoes is replaced by ``<redacted>`` wherever it sits in a reply. A message
    that is no call's reply (not JSON, or answering another request) is dropped, since the
    platform also sends unsolicited ones; a call whose reply never comes raises
    ``APITimeoutError`` naming the last such message. Closing (leaving ``with``) waits at most
    1 s, or the client's timeout if shorter, for the server to answer the close frame."""

    _asynchronous = False

    def __init__(self, socket: Any, session_id: str) -> None:
        self._socket = socket
        self.session_id = session_id
        # One reader id per socket: reads continue where the last stopped; a new id replays.
        self.client_id = f"sensorium-{uuid.uuid4().hex[:12]}"

    def _request(self, request_type: str, event_data: Any, finish: Callable[[Any], Any]) -> Any:
        if self._asynchronous:
            async def run() -> Any:
                return finish(_scrub(await self._socket.call(request_type, event_data, True)))

            return run()
        return finish(_scrub(self._socket.call(request_type, event_data, False)))

    def send(self, type: str, event_data: Any = None) -> Any:
        """Sends ``{type, event_data}`` and returns the whole reply (nothing raised for a refusal).

        >>> socket.send("session.validate")["event_data"]  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        if not isinstance(type, str) or not type:
            raise InvalidArgumentError("type: a request needs a type such as 'session.status'", argument="type")
        return self._request(type, event_data, lambda reply: reply)

    def status(self) -> Any:
        """The session's record (``LensSession``); a refusal (a destroyed or unknown session)
        raises ``LensEventError`` with the platform's messages, as ``read`` does.

        >>> socket.status().status  # doctest: +SKIP
        'running'
        """
        return self._request("session.status", None, _status_record)

    def validate(self) -> Any:
        """The session's health and model checks: ``{is_valid, error_messages}`` (not raised).

        >>> socket.validate()  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        return self._request("session.validate", None, lambda reply: reply.get("event_data"))

    def read(self, client_id: Optional[str] = None) -> Any:
        """Outputs waiting in the session's mailbox since this reader's last read
        (``{messages, client_id}``), or ``None``; a new ``client_id`` replays from the start.

        >>> for message in (socket.read() or {}).get("messages", []):  # doctest: +SKIP
        ...     print(message)
        """
        reader = self.client_id if client_id is None else _text(client_id, "client_id")
        return self._request("session.read", {"client_id": reader}, _event_data)

    def update(self, event: Any) -> Any:
        """Pushes one input event: a ``{type, event_data}`` dict, or a numeric window (numpy
        (channels, window), pandas (time, channels), lists) sent as ``data.numeric_array``.

        >>> socket.update(np.random.rand(3, 256))  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        >>> socket.update({"type": "data.json", "event_data": {"line": 3}})  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        return self._request("session.update", _input_event(event), _event_data)

    def modify(self, lens_config: Optional[Mapping[str, Any]] = None, **fields: Any) -> Any:
        """Changes the running session's lens configuration (a whole ``lens_config`` or some of its
        fields).

        >>> socket.modify(model_parameters={"threshold": 0.5})  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        if lens_config is not None and not isinstance(lens_config, Mapping):
            raise TypeError(f"lens_config: expected a dict, got {type(lens_config).__name__}")
        body = {"lens_config": dict(lens_config)} if lens_config is not None else dict(fields)
        if not body:
            raise InvalidArgumentError("lens_config: give the configuration (or fields of it) to change",
                                       argument="lens_config")
        return self._request("session.modify", body, _event_data)

    def set_input_stream(self, stream_type: str, stream_config: Mapping[str, Any]) -> Any:
        """Feeds the session from a stream: ``csv_file_reader`` ``{file_id}``,
        ``video_file_reader`` ``{file_id}``, ``rtsp_video_streamer`` ``{rtsp_url, ...}``.

        >>> socket.set_input_stream("csv_file_reader", {"file_id": "line3.csv"})  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        return self._request("input_stream.set", _stream(stream_type, stream_config), _event_data)

    def set_output_stream(self, stream_type: str, stream_config: Mapping[str, Any]) -> Any:
        """Where the session writes its outputs besides its channel."""
        return self._request("output_stream.set", _stream(stream_type, stream_config), _event_data)

    def model_query(self, **fields: Any) -> Any:
        """A model query through the session (lenses with a model-query processor):
        ``model_version``, ``template_name``, ``instruction``, ``focus``, ``max_new_tokens``,
        ``data`` (``[{type: "base64_img", base64_img}]``), ``sensor_metadata``."""
        return self._request("model.query", fields, _event_data)

    def destroy(self) -> Any:
        """Destroys the session (its streams end); close the socket afterwards.

        >>> socket.destroy()  # doctest: +SKIP
        {'is_valid': True, 'error_messages': [], ...}
        """
        return self._request("session.destroy", None, _event_data)

    def close(self) -> Any:
        """Closes the socket with the close handshake."""
        return self._socket.close(self._asynchronous)

    def __enter__(self) -> SessionSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.session_id}>"


def _stream(stream_type: Any, stream_config: Any) -> dict[str, Any]:
    _text(stream_type, "stream_type")
    return {"stream_type": stream_type, "stream_config": _parameters(stream_config, "stream_config")}


class AsyncSocketOpener:
    """What ``async_client.lens.sessions.connect`` returns: awaited, the open
    ``AsyncSessionSocket``; in ``async with``, the socket, closed on leaving. Nothing is sent
    until one of the two happens."""

    def __init__(self, open_socket: Callable[[], Awaitable[AsyncSessionSocket]]) -> None:
        self._open = open_socket
        self._socket: Optional[AsyncSessionSocket] = None

    def __await__(self) -> Generator[Any, None, AsyncSessionSocket]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionSocket:
        self._socket = await self._open()
        return self._socket

    async def __aexit__(self, *exc: object) -> None:
        if self._socket is not None:
            await self._socket.close()


@awaited("send", "status", "validate", "read", "update", "modify", "set_input_stream", "set_output_stream",
         "model_query", "destroy", "close")
class AsyncSessionSocket(SessionSocket):
    """``SessionSocket`` whose calls are awaited; ``async with`` closes it."""

    _asynchronous = True

    async def aclose(self) -> None:
        """Closes the socket with the close handshake; the same as ``await socket.close()``, named
        as on ``AsyncClient`` and the event stream."""
        await self.close()

    async def __aenter__(self) -> AsyncSessionSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
