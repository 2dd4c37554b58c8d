"""Test helpers: a local emulator of the platform, for your own test suites.

The emulator is a faithful local test double of the platform's HTTP API (direct query with
deterministic stand-in models, files, models). It is not the hosted service and never claims
to be: every answer carries ``Server: sensorium-emulator``.

It accepts the model ids your production code sends: the live family names (``Newton::...``,
``OmegaEncoder::...``) as well as the spec's neutral ones (``Reasoner::...``, ``Encoder::...``),
for every version seen in public code (:data:`DEFAULT_MODELS`). ``Emulator(models=[...])`` and
``new_api_key(models=[...])`` change what is accepted.

Example::

    from sensorium.testing import Emulator

    with Emulator() as emu:
        client = emu.client()
        emu.inject("POST", "/query", 503, retry_after=0)   # the next query gets a 503 once
        answer = client.query(model="Reasoner::c2_4_7b_251215a172f6d7", query="hi")
        assert [r.attempt for r in emu.requests] == [1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Sequence, TypedDict, Union

from sensorium._arguments import strings
from sensorium._core import EmulatorServer
from sensorium.emulator import raise_open_file_limit

if TYPE_CHECKING:
    from sensorium import AsyncClient, Client

__all__ = ["Emulator", "RecordedRequest", "FaultActionName", "ModelSpec", "RoleName", "LensStatusStyle",
           "PlannedOutcome", "DEFAULT_MODELS"]

FaultActionName = Literal["reset", "stall", "truncate"]
#: The ``outcome`` a planned fine-tuning job completes with (``fail_next_job(..., outcome=)``).
PlannedOutcome = Literal["PARTIAL", "FAILED"]
RoleName = Literal["member", "admin", "super_admin"]
LensStatusStyle = Literal["enum", "number"]


class _ModelEntry(TypedDict):
    id: str
    family: Literal["reasoner", "encoder"]


#: A catalogue entry: an id whose prefix names its family (``Reasoner``/``Newton`` for
#: reasoning, ``Encoder``/``OmegaEncoder`` for encoders), or ``{"id": ..., "family": ...}`` for
#: any other id (a newer family, a fine-tuned model of yours).
ModelSpec = Union[str, _ModelEntry]

#: The ids the emulator accepts unless told otherwise: every version the spec and public code
#: show, each under both spellings of its family (``Reasoner::v`` and ``Newton::v``,
#: ``Encoder::v`` and ``OmegaEncoder::v``).
DEFAULT_MODELS: tuple[str, ...] = tuple(m["id"] for m in EmulatorServer.default_models())


@dataclass(frozen=True)
class RecordedRequest:
    """One request the emulator received.

    ``headers`` has lowercase names; the ``authorization`` value reads ``Bearer <redacted>``, and
    any key the emulator issued reads ``<redacted>`` wherever else it was sent (another header,
    the query string, the body).
    ``attempt`` is 1 plus the ``x-sensorium-retry-count`` header the client sent. ``body`` holds
    JSON bodies only (first MiB; the log keeps the newest 64 MiB of bodies, older records keep
    ``body=None``); ``body_len`` counts every body byte read. ``status`` is 0
    when the emulator reset the connection instead of answering.
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    attempt: int
    org: Optional[str]
    body: Optional[bytes]
    body_len: int
    status: int


class Emulator:
    """A running emulator on 127.0.0.1, stopped by :meth:`stop` or on leaving a ``with`` block.

    Example::

        with Emulator(query_delay=0.0) as emu:
            print(emu.base_url)               # http://127.0.0.1:PORT/v0.5
            other_org_key = emu.new_api_key()
            emu.fail_queries("worker crashed", times=1)

    ``models`` sets the catalogue every organization may query (unless it is given its own with
    :meth:`new_api_key`); by default it is :data:`DEFAULT_MODELS`. An entry is an id, or
    ``{"id": ..., "family": "reasoner" | "encoder"}`` for an id whose prefix the emulator does
    not know. A bare id with an unknown prefix is a ``ValueError``. To add your own models to
    the default ones::

        emu = Emulator(models=[*DEFAULT_MODELS, {"id": "Acme::newton-ft-7", "family": "reasoner"}])
        emu.client().query("Acme::newton-ft-7", "hi")               # the reasoning stand-in
        emu.client().query("Newton::does_not_exist", "hi")          # 400 invalid_model_version
    """

    def __init__(
        self,
        *,
        port: int = 0,
        query_delay: float = 0.0,
        max_upload_bytes: Optional[int] = None,
        api_key: Optional[str] = None,
        upload_part_size: Optional[int] = None,
        upload_url_ttl: Optional[float] = None,
        models: Optional[Sequence[ModelSpec]] = None,
        work_duration: float = 0.2,
        page_size: Optional[int] = None,
        session_ttl_sec: Optional[float] = None,
        lens_heartbeat_interval: Optional[float] = None,
        lens_status_style: LensStatusStyle = "enum",
        list_style: Literal["cursor", "offset"] = "cursor",
        rate_limit: Optional[float] = None,
        max_query_size_mb: Optional[float] = None,
    ) -> None:
        """``upload_part_size`` (bytes, default 400 MiB as live) and ``upload_url_ttl``
        (seconds, default 3600) shape the direct-to-cloud upload; tests use a few MiB so that
        small files span several parts. ``models``: see the class docstring. ``work_duration`` is
        the seconds every job (agent run, evaluation, optimization trial, batch job, fine-tuning
        job) spends running;
        ``page_size`` the default page size of every list (small values give several pages);
        ``list_style`` how the batch lists page: ``"cursor"`` (``{data, has_more, next_cursor}``,
        releases from 1.1.11) or ``"offset"`` (``{total, offset, limit, <entity>: [...]}``, before).
        Lens sessions expire after ``session_ttl_sec`` seconds without events (default 86400, as
        live; above 0, and a fraction is rounded up to the whole seconds the spec's integer field
        reports); an idle SSE stream sends a heartbeat every ``lens_heartbeat_interval`` seconds
        (default 1); ``lens_status_style`` spells ``session_status`` as the enum string
        (``"enum"``, ``LensSessionStatus.SESSION_STATUS_RUNNING``) or as a bare number
        (``"number"``, ``"3"``), both of which the platform sends.
        ``rate_limit`` turns on a per-organization limit of that many requests per second (bursts
        of at most that many, at least 1), answered beyond it with 429, ``Retry-After`` (whole
        seconds, rounded up) and ``retry-after-ms`` (the exact wait).
        ``max_query_size_mb`` is the server setting of the spec's ``/query`` size limit: the
        combined prompt and the whole body of an encoder request above it get 413 (a request's
        own ``max_query_size_mb`` field overrides it); unset, encoder bodies are not limited.

        Example::

            with Emulator(work_duration=2, page_size=5) as emu:
                emu.fail_next_job("agent", error="GPU fell over")   # the next run ends failed
                emu.lag_agent_status(10)   # records say "running" 10 s after a run ended

            with Emulator(rate_limit=20, max_query_size_mb=0.04) as emu:
                ...   # 429 past 20 requests/s; a (4, 1024) window in one request gets 413
        """
        raise_open_file_limit()
        self._server = EmulatorServer(
            port=port,
            query_delay=query_delay,
            max_upload_bytes=max_upload_bytes,
            api_key=api_key,
            upload_part_size=upload_part_size,
            upload_url_ttl=upload_url_ttl,
            models=_model_list(models),
            work_duration=work_duration,
            page_size=page_size,
            session_ttl_sec=session_ttl_sec,
            lens_heartbeat_interval=lens_heartbeat_interval,
            lens_status_style=lens_status_style,
            list_style=list_style,
            rate_limit=rate_limit,
            max_query_size_mb=max_query_size_mb,
        )
        self._stopped = False

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v0.5``."""
        return self._server.base_url

    @property
    def api_key(self) -> str:
        """Key of the default organization."""
        return self._server.api_key

    @property
    def port(self) -> int:
        return self._server.port

    def client(self, **kwargs: Any) -> "Client":
        """A :class:`sensorium.Client` bound to this emulator.

        Example::

            client = emu.client(max_retries=0)
            other_org = emu.client(api_key=emu.new_api_key())
        """
        from sensorium import Client

        return Client(**self._bound(kwargs))

    def async_client(self, **kwargs: Any) -> "AsyncClient":
        """A :class:`sensorium.AsyncClient` bound to this emulator."""
        from sensorium import AsyncClient

        return AsyncClient(**self._bound(kwargs))

    def _bound(self, options: dict[str, Any]) -> dict[str, Any]:
        """Client options that reach this emulator only: every address is given, so that none
        comes from the environment (a ``SENSORIUM_AGENTS_BASE_URL`` left in a shell would send
        the agents calls, with this emulator's key, to another host)."""
        options.setdefault("api_key", self.api_key)
        options.setdefault("base_url", self.base_url)
        options.setdefault("agents_base_url", options["base_url"])
        return options

    def new_api_key(
        self,
        org: Optional[str] = None,
        role: RoleName = "admin",
        models: Optional[Sequence[ModelSpec]] = None,
    ) -> str:
        """A key for a new organization, or for ``org`` (created when new).

        ``role`` (``"member"``, ``"admin"`` or ``"super_admin"``) is the key holder's role in
        the organization, and the blueprint rules enforce it as the spec says: a member gets
        403 registering or deleting a blueprint, an admin 403 for ``canonical: true``, and
        deleting a canonical blueprint needs ``"super_admin"``. The default key is an admin of
        the default organization.

        ``models`` gives the organization its own catalogue (same entries as ``Emulator(models=)``),
        replacing the emulator's for every key of that organization, earlier ones included;
        ``None`` leaves the organization's catalogue as it is. ``GET /models`` lists exactly the
        caller's organization's catalogue, and other ids get 400 ``invalid_model_version``.

        Example::

            key_b = emu.new_api_key()          # files of org B are invisible to the default org
            key_a2 = emu.new_api_key("team-a") # two keys for the same org "team-a"
            small = emu.new_api_key("small-co", models=["Newton::c2_4_3b_251215dfe6a746"])
            viewer = emu.new_api_key("team-a", role="member")
        """
        return self._server.new_api_key(org, role, _model_list(models))

    def inject(
        self,
        method: Optional[str],
        path: str,
        status: Optional[int] = None,
        *,
        retry_after: Optional[float] = None,
        delay: Optional[float] = None,
        action: Optional[FaultActionName] = None,
        times: Optional[int] = 1,
        probability: float = 1.0,
    ) -> None:
        """Add a fault rule. Rules are checked in order; a matching rule uses up one of ``times``
        (``None``: every time).

        ``path`` starts with ``/`` and matches with or without its API version (``/v0.5``, or
        ``/v0.6`` for the fine-tuning paths, so ``"/fine_tuning/jobs"`` as the spec writes it
        works); a trailing ``*`` matches a prefix; a query string is not part of it.
        ``method=None`` matches any method. ``status`` answers with the platform's error body
        (and, when ``retry_after`` is given, ``Retry-After`` in whole seconds rounded up with
        the exact wait in ``retry-after-ms``); ``delay`` (seconds) waits first;
        ``action`` is ``"reset"`` (drop the connection), ``"stall"`` (send half the body, then
        nothing) or ``"truncate"`` (send half the body, then close). An open-ended body, such as
        a lens session's event stream, is cut inside its first chunk. A rule that could never
        apply (an unknown method, a path without its leading ``/``, no status, action or delay,
        ``times=0``, ``probability=0``) is a ``ValueError`` naming the argument.

        Example::

            emu.inject("POST", "/query", 429, retry_after=1, times=2)
            emu.inject("GET", "/files/download/*", action="truncate")
        """
        self._server.inject(
            method,
            path,
            status=status,
            retry_after=retry_after,
            delay=delay,
            action=action,
            times=times,
            probability=probability,
        )

    def inject_upload_part(
        self,
        part_number: int,
        *,
        status: Optional[int] = None,
        action: Optional[FaultActionName] = None,
        delay: Optional[float] = None,
        times: Optional[int] = 1,
    ) -> None:
        """A fault for the storage PUTs of part ``part_number`` (from 1) of any direct upload.

        The same faults as :meth:`inject` (a status with the platform's error body, ``"reset"``,
        ``"stall"``, ``"truncate"``, a delay), for ``times`` PUTs (``None``: every time). At
        least one of ``status``, ``action`` and ``delay`` is required.

        Example::

            emu = Emulator(upload_part_size=4 * 1024 * 1024)
            emu.inject_upload_part(2, action="reset")     # part 2's first PUT loses its connection
            emu.inject_upload_part(3, status=503, times=2)
        """
        self._server.inject_upload_part(
            part_number, status=status, action=action, delay=delay, times=times
        )

    def expire_upload_urls(self) -> None:
        """Expire every part URL issued so far: their PUTs get 403 ``AccessDenied`` ("Request
        has expired") until the client asks ``parts/urls`` for fresh ones.

        Example::

            emu.expire_upload_urls()
            # a PUT to an old URL now answers 403; POST .../parts/urls gives working ones
        """
        self._server.expire_upload_urls()

    def expire_output_urls(self) -> None:
        """Expire every batch output URL issued so far: fetching one answers 403
        ``AccessDenied``; listing the job's outputs again gives working URLs.

        Example::

            emu.expire_output_urls()
            # urllib.request.urlopen(old_output.ref) now raises HTTPError 403
        """
        self._server.expire_output_urls()

    def clear_faults(self) -> None:
        self._server.clear_faults()

    def fail_next_job(self, kind: str, *, error: Optional[str] = None,
                      failed_inputs: Optional[Sequence[str]] = None,
                      outcome: Optional[PlannedOutcome] = None) -> None:
        """Plan the failure of the next job of ``kind`` (``"agent"``, ``"batch"``,
        ``"fine_tuning"``, ``"eval"``, ``"optimization"``) to run from now on, a batch retry
        included (a retry is a new execution of the job); a job already running is not affected.

        ``error`` makes it end failed with that text; ``failed_inputs`` (a list of file ids, batch
        only) fail those inputs while the job still completes; ``outcome`` (fine-tuning only,
        ``"PARTIAL"`` or ``"FAILED"``, not with ``error``) makes it end ``COMPLETED`` with that
        ``outcome``: ``"PARTIAL"`` with one checkpoint, ``"FAILED"`` having produced nothing (no
        checkpoint, no metrics, a ``training_failed`` error object; ``fine_tuned_model`` null).

        Plans queue: calling it twice for one kind fails the next two jobs of that kind, each
        with its own plan, in the order planned. A plan that would fail nothing (none of the
        three given, an empty ``error``, ``failed_inputs`` for a kind without inputs) or cannot
        apply (``outcome`` for another kind, another value, or with ``error``) is a
        ``ValueError`` naming the argument, and a single string for ``failed_inputs`` a
        ``TypeError``: read as its characters, it would fail no input.

        Example::

            emu.fail_next_job("agent", error="worker lost")
            # client.agents.instances.wait(run.id) now raises AgentRunError("... worker lost")
            emu.fail_next_job("batch", failed_inputs=["pump_loud.csv"])
            emu.fail_next_job("fine_tuning", outcome="PARTIAL")   # COMPLETED, outcome PARTIAL
        """
        inputs = None if failed_inputs is None else strings(failed_inputs, "failed_inputs")
        self._server.fail_next_job(kind, error=error, failed_inputs=inputs, outcome=outcome)

    def lag_agent_status(self, seconds: float) -> None:
        """Agent records keep saying ``running`` for ``seconds`` after their run ended by itself
        (completed or failed), as on the live service; logs and events are not delayed
        (``wait()`` reads the end from them). The caller's own moves are not delayed: the answer
        of ``pause``, ``resume`` and ``cancel``, and the reads after a cancel, show them at once.

        Example::

            emu.lag_agent_status(30)
        """
        self._server.lag_agent_status(seconds)

    def drop_streams(self, every: Optional[int]) -> None:
        """Cut each lens SSE stream connection after ``every`` events (outputs; start and
        heartbeat frames do not count), without ``sse.stream.end``, so a client must reconnect
        with ``Last-Event-ID``; ``None`` turns it off. Applies to connections opened afterwards.

        Example::

            emu.drop_streams(every=1000)
            emu.drop_streams(None)
        """
        self._server.drop_streams(every)

    def set_lens_status_style(self, style: LensStatusStyle) -> None:
        """Spell lens ``session_status`` as ``"enum"`` (``LensSessionStatus.SESSION_STATUS_RUNNING``)
        or ``"number"`` (``"1"`` registered, ``"3"`` running, ``"5"`` destroyed) from now on."""
        self._server.set_lens_status_style(style)

    def fail_queries(self, error_msg: str = "emulated worker failure", times: int = 1) -> None:
        """The next ``times`` queries answer 200 with ``status: "failed"`` and ``error_msg``."""
        self._server.fail_queries(error_msg, times)

    def close_idle_connections(self) -> None:
        """Close every keep-alive connection that is between requests (a busy one closes after
        its answer), as a server restart or a load balancer's idle timeout does. The clients'
        next requests must go out on new connections without an error.

        Example::

            emu.close_idle_connections()
            client.query(model, "still works")
        """
        self._server.close_idle_connections()

    def set_query_delay(self, seconds: float) -> None:
        """Simulated worker time of each query (a query waits ``max_wait_time_sec`` at most,
        then gets a 504)."""
        self._server.set_query_delay(seconds)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Requests received so far (control routes excluded), oldest first."""
        return [RecordedRequest(**r) for r in self._server.requests()]

    def clear_requests(self) -> None:
        self._server.clear_requests()

    def stop(self) -> None:
        """Stop the server and remove its data. Safe to call more than once. Afterwards
        :attr:`requests` still reads the log, and the controls raise ``RuntimeError``."""
        self._server.stop()
        self._stopped = True

    close = stop

    def __enter__(self) -> "Emulator":
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        # Options the server refused leave it unset, and a traceback with locals still shows this.
        if getattr(self, "_server", None) is None:
            return "Emulator(not started)"
        return f"Emulator(base_url={self.base_url!r}{', stopped' if self._stopped else ''})"


def _model_list(models: Optional[Sequence[ModelSpec]]) -> Optional[list[Any]]:
    """A list for the core; a lone string is refused rather than read as its characters."""
    if models is None:
        return None
    if isinstance(models, (str, bytes)):
        raise ValueError(f"models takes a list of model ids, not the single string {models!r}")
    return list(models)
