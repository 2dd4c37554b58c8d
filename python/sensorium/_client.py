"""`Client` and `AsyncClient`: the same surface, blocking and asyncio."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Mapping, Optional

from . import _core
from ._arguments import flag
from ._embed_many import WindowProgress, embed_many_async, embed_many_sync
from ._numeric import as_channels
from ._options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRIES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_TIMEOUT,
    NOT_GIVEN,
    ClosedCore,
    KeylessCore,
    NotGiven,
    Options,
    headers,
)
from ._endpoints import AsyncRunner, SyncRunner
from ._secrets import API_KEY_ENV
from .errors import InvalidArgumentError
from .pagination import AsyncPager
from .resources import AsyncFiles, AsyncModels, Files, Models
from .resources.agents import Agents, AsyncAgents
from .resources.batch import AsyncBatch, Batch
from .resources.fine_tuning import AsyncFineTuning, FineTuning
from .resources.jobs import AsyncJobs, Jobs
from .resources.lens import AsyncLensRuntime, LensRuntime, warn_deprecated
from .types import Embeddings, FileRecord, QueryResult

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Self, Unpack

    from .types import QueryParams

__all__ = ["Client", "AsyncClient"]

class _BaseClient:
    _core: Any
    _options: Options

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        default_headers: Mapping[str, str] | None = None,
        agents_base_url: str | None = None,
    ) -> None:
        self._options = Options(timeout, connect_timeout, read_timeout, max_retries, headers(default_headers))
        self._core = self._options.core(api_key, base_url, agents_base_url)
        self._bind_resources()

    def _bind_resources(self) -> None:
        raise NotImplementedError

    def _copy(self, changes: dict[str, Any]) -> Self:
        clone = object.__new__(type(self))
        clone._options, clone._core = self._options.derive(self._core, changes)
        clone._bind_resources()
        return clone

    @property
    def base_url(self) -> str:
        """The versioned base URL every call goes to (``.../v0.5``)."""
        url: str = self._core.base_url
        return url

    @property
    def agents_base_url(self) -> str:
        """Where ``/agents/...`` paths go: the versioned base by default, or ``agents_base_url=``
        (``SENSORIUM_AGENTS_BASE_URL``) for a deployment that mounts agents elsewhere."""
        url: str = self._core.agents_base_url
        return url

    @property
    def timeout(self) -> float | None:
        return self._options.timeout

    @property
    def max_retries(self) -> int:
        """Retries after a failed attempt: 429, 500, 502, 503, 504 and connection failures. A POST
        that is not safe to repeat is retried only when nothing can have been done (those statuses,
        a refused connection), never after its request may have reached the platform."""
        return self._options.max_retries

    def __repr__(self) -> str:
        # A constructor that raised (no key, a bad option) leaves a client without a core, which
        # tracebacks shown with their locals (pytest --showlocals, rich) still repr.
        core = getattr(self, "_core", None)
        if core is None:
            return f"{type(self).__name__}(not configured)"
        if isinstance(core, ClosedCore):
            return f"{type(self).__name__}(closed)"
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    def __copy__(self) -> Any:
        # Pickling drops the key on purpose; a copy that silently took another key from the
        # environment would surprise. with_options() is the way to a second client.
        raise TypeError(f"{type(self).__name__} cannot be copied; use client.with_options() for a variant")

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__copy__()

    def __reduce__(self) -> Any:
        """Pickles the configuration (base URLs, timeouts, retries, headers), never the key: the
        process that unpickles takes the key from ``SENSORIUM_API_KEY``. So a client can be
        shipped to workers (multiprocessing, Dask) that each hold the key in their environment."""
        if isinstance(self._core, ClosedCore):
            raise TypeError(f"a closed {type(self).__name__} cannot be pickled")
        config = {
            "base_url": self.base_url,
            "agents_base_url": self.agents_base_url,
            "timeout": self._options.timeout,
            "connect_timeout": self._options.connect_timeout,
            "read_timeout": self._options.read_timeout,
            "max_retries": self._options.max_retries,
            "default_headers": dict(self._options.default_headers),
        }
        return (_unpickle_client, (type(self), config))


def _unpickle_client(cls: type[_BaseClient], config: dict[str, Any]) -> _BaseClient:
    """Rebuilds a pickled client with the key of this process's environment. Without a usable
    one (unset, blank, or holding characters no key can hold), the client still
    unpickles, and its first call raises (see ``KeylessCore``)."""
    key = os.environ.get(API_KEY_ENV, "")
    problem = f"{API_KEY_ENV} is not set in this process" if not key else f"{API_KEY_ENV} is blank in this process"
    if key.strip():
        try:
            return cls(api_key=key, **config)
        except InvalidArgumentError as refused:
            if refused.argument != "api_key":
                raise
            # Its own words, less the argument `api_key`, which no one passed here.
            problem = f"{API_KEY_ENV} in this process " + str(refused).removeprefix("api_key: ")
    client = object.__new__(cls)
    client._options = Options(config["timeout"], config["connect_timeout"], config["read_timeout"],
                              config["max_retries"], headers(config["default_headers"]))
    client._core = KeylessCore(cls.__name__, config["base_url"], config["agents_base_url"], problem)
    client._bind_resources()
    return client


# The most video frames the service samples; a larger `max_frames` is ignored (wire notes).
MOST_FRAMES = 64


def _query_fields(params: Any) -> Any:
    """``query``'s fields as sent: a ``FileRecord`` in ``file_ids`` stands for its ``file_id``, as
    it does in batch and agent inputs (everything else is checked by the core)."""
    file_ids = params.get("file_ids")
    if isinstance(file_ids, FileRecord):
        file_ids = [file_ids]  # one file, as its record
    elif isinstance(file_ids, Iterable) and not isinstance(file_ids, (str, bytes, dict, AsyncPager)):
        file_ids = list(file_ids)  # a generator, a set, a numpy array of names, a pager of records
    if isinstance(file_ids, list):
        params = {**params, "file_ids": [f.file_id if isinstance(f, FileRecord) else f for f in file_ids]}
    frames = params.get("max_frames")
    if isinstance(frames, int) and not isinstance(frames, bool) and frames > MOST_FRAMES:
        # Sent as given (a later release may take more), but the caller should know that today
        # it does not do what it says: the wire notes record the service ignoring it.
        warnings.warn(f"max_frames={frames}: the platform ignores max_frames above {MOST_FRAMES}, so this query "
                      f"does not sample {frames} frames; pass {MOST_FRAMES} or fewer", UserWarning, stacklevel=3)
    return params


def _embed_args(data: Any, normalize_input: bool) -> tuple[Any, bool]:
    # Not bool(): the string "false" is truthy and would ask the platform to normalise.
    return as_channels(data, "data"), flag(normalize_input, "normalize_input", optional=False) is True


class Client(_BaseClient):
    """The blocking client.

    ``api_key`` and ``base_url`` default to ``SENSORIUM_API_KEY`` and ``SENSORIUM_BASE_URL``; the base
    URL may be given with or without its version path. ``agents_base_url`` (``SENSORIUM_AGENTS_BASE_URL``)
    is where ``/agents/...`` hangs when a deployment does not mount agents under the versioned base. ``timeout`` bounds one attempt (None: no
    limit; for a transfer, such as ``files.upload`` or ``files.download``, only the wait for the
    answer once the request is sent, since the transfer itself may take longer while bytes move),
    ``read_timeout`` a stall while streaming, and failed attempts (429, 5xx, connection
    errors) are retried up to ``max_retries`` times with backoff. A POST that creates something
    (``bundles.run``, ``blueprints.create``, ``lens.register``...) is not sent again once it may have
    reached the platform (a dropped connection after sending, a timeout, a cut answer): it raises
    ``APIConnectionError`` with ``may_have_been_processed=True``, so check before calling again.
    A key of anything but visible ASCII (an accented letter, a space, a line break pasted with it)
    is refused with ``InvalidArgumentError``, never sent. Proxies (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``, ``NO_PROXY``) and ``SSL_CERT_FILE`` are read when the client is made; loopback
    (the emulator) never goes through a proxy (README, "Proxies and certificates").

    >>> import sensorium
    >>> with sensorium.Client() as client:                              # doctest: +SKIP
    ...     print(client.query("Reasoner::c2_4_7b_251215a172f6d7", "Hello?").text)
    """

    files: Files
    models: Models
    agents: Agents
    fine_tuning: FineTuning
    jobs: Jobs
    batch: Batch
    _lens: LensRuntime

    def _bind_resources(self) -> None:
        runner = SyncRunner(self)
        self.files = Files(runner)
        self.models = Models(runner)
        self.agents = Agents(runner)
        self.fine_tuning = FineTuning(runner)
        self.jobs = Jobs(runner)
        self.batch = Batch(runner)
        self._lens = LensRuntime(runner)

    @property
    def lens(self) -> LensRuntime:
        """The legacy lens runtime (deprecated: direct query and agents replace it); its first use
        in a process warns once."""
        warn_deprecated()
        return self._lens

    def with_options(
        self,
        *,
        timeout: float | None | NotGiven = NOT_GIVEN,
        connect_timeout: float | NotGiven = NOT_GIVEN,
        read_timeout: float | NotGiven = NOT_GIVEN,
        max_retries: int | NotGiven = NOT_GIVEN,
        default_headers: Mapping[str, str] | NotGiven = NOT_GIVEN,
    ) -> Client:
        """A copy with other options, sharing this client's connections (with another
        ``connect_timeout``, those of this client's other copies with that timeout, so a copy made
        per call still reuses them). ``default_headers`` are added to this client's (a name it
        already has takes the new value).

        >>> client.with_options(timeout=5, max_retries=0).query(...)  # doctest: +SKIP
        >>> traced = client.with_options(default_headers={"X-Trace-Id": "run-42"})  # doctest: +SKIP
        """
        return self._copy(dict(timeout=timeout, connect_timeout=connect_timeout, read_timeout=read_timeout,
                               max_retries=max_retries, default_headers=default_headers))

    def query(self, model: str, query: str = "", **params: Unpack[QueryParams]) -> QueryResult:
        """Runs one query (``POST /query``) and returns its result. Only the fields you pass are sent.

        >>> r = client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise the notes.",  # doctest: +SKIP
        ...                  file_ids=["notes.txt"], max_new_tokens=64)
        >>> r.text                                                                          # doctest: +SKIP
        """
        result: QueryResult = self._core.query(model, query, _query_fields(params), False)
        return result

    def embed(self, model: str, data: Any, *, normalize_input: bool = False) -> Embeddings:
        """Encodes a numeric window with an encoder model. ``data`` is a numpy array shaped
        (channels, window) or (window,), a list of 1-D arrays, or a pandas DataFrame shaped (time,
        channels). Returns ``Embeddings`` whose ``.vectors`` is float32 (channels, 768).

        >>> import numpy as np
        >>> client.embed("Encoder::encoder_embeddings_01", np.random.rand(3, 1024)).vectors.shape  # doctest: +SKIP
        (3, 768)
        """
        array, normalize = _embed_args(data, normalize_input)
        result: Embeddings = self._core.embed(model, array, normalize, {}, False)
        return result

    def embed_many(
        self,
        model: str,
        windows: Any,
        *,
        per_channel: bool = False,
        normalize_input: Optional[bool] = None,
        concurrency: Optional[int] = None,
        progress: WindowProgress = False,
    ) -> npt.NDArray[np.float32]:
        """Embeds many windows and returns float32 (N, channels, 768), in input order.

        ``windows`` is a 3-D array (N, channels, window) such as :func:`sensorium.windows` gives, a
        list of (channels, window) arrays, or an iterator of them, read lazily in chunks as
        requests finish, so a recording larger than memory streams through. Requests run
        concurrently from the native core (``concurrency`` in flight, 64 by default), each
        retried by the client's retry rule; after a 429 the whole batch waits the
        ``Retry-After``, then sends at the rate the server admits (learnt from its answers and
        shared by the client's concurrent ``embed_many`` calls). A 429 while the batch's other
        requests are admitted (another client of the organization took the turn) is retried
        without spending ``max_retries``, up to 3 x (``max_retries`` + 1) attempts in all; while
        the server admits nothing, ``max_retries`` bounds 429s as it bounds other failures.
        ``per_channel=True`` sends one
        request per channel (for servers that refuse large multichannel bodies) and reassembles
        them. ``normalize_input`` is sent when given; with ``per_channel=True`` each channel is its
        own event, so ``normalize_input=True`` z-scores each channel alone rather than the window
        as a whole, and the vectors differ from those of whole windows. ``progress=True`` shows a
        tqdm bar; a plain function is called as ``progress(windows_done, windows_total)``.

        If some windows still fail, the others finish first; then
        :class:`~sensorium.errors.EmbedManyError` names the first failed index, its ``partial``
        holds every vector computed (NaN rows for the failed windows) and ``__cause__`` the first
        failure. A window that cannot be sent (a NaN or infinity, a wrong shape or channel count)
        fails alone in the same way, without a request. An error that would repeat for every
        window (the key refused, an unknown model, an address with no encoder or where nothing
        answers) stops the batch at once instead of sending the rest; the ``EmbedManyError`` then
        lists the windows never sent in ``not_sent``. An iterator that raises ends the batch the
        same way: the windows read before finish, and the ``EmbedManyError`` has its exception as
        ``__cause__``. Ctrl-C stops the whole batch.

        The platform's warnings about the data (``response.warning_messages``, what
        ``embed(...).warnings`` holds, e.g. a window longer than the model takes was truncated)
        are reported at the end of the batch, before it returns or raises, as one ``UserWarning``
        per distinct message with how many windows had it and the first few:
        ``embed_many: 1,000 of 1,000 windows: window of 2048 points was truncated to its last 1024
        (windows 0, 1, 2, 3, 4, ...)``.

        >>> import numpy as np, sensorium
        >>> recording = np.random.rand(100_000, 4)                                   # (time, channels)
        >>> w = sensorium.windows(recording, window=1024)
        >>> vectors = client.embed_many("Encoder::encoder_embeddings_01", w, per_channel=True)  # doctest: +SKIP
        >>> vectors.shape                                                            # doctest: +SKIP
        (97, 4, 768)
        """
        return embed_many_sync(self._core, model, windows, per_channel=per_channel,
                               normalize_input=normalize_input, concurrency=concurrency, progress=progress)

    def close(self) -> None:
        """Releases this client's hold on its connections; later calls raise.

        The clients of one process share their connections (a new client to the same server
        finds them warm); a connection nobody uses is closed after 90 s. Blocking calls drive
        their connections from the calling thread, so theirs are closed when the process's next
        blocking call starts, once idle that long. ``with sensorium.Client() as client:`` closes it
        at the end of the block.

        >>> client = sensorium.Client()  # doctest: +SKIP
        >>> client.close()               # doctest: +SKIP
        """
        self._core = ClosedCore()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_BaseClient):
    """The asyncio client: the surface of :class:`Client`, with awaitables on the running loop.

    >>> async with sensorium.AsyncClient() as client:                     # doctest: +SKIP
    ...     r = await client.query("Reasoner::c2_4_7b_251215a172f6d7", "Hello?")
    """

    files: AsyncFiles
    models: AsyncModels
    agents: AsyncAgents
    fine_tuning: AsyncFineTuning
    jobs: AsyncJobs
    batch: AsyncBatch
    _lens: AsyncLensRuntime

    def _bind_resources(self) -> None:
        runner = AsyncRunner(self)
        self.files = AsyncFiles(runner)
        self.models = AsyncModels(runner)
        self.agents = AsyncAgents(runner)
        self.fine_tuning = AsyncFineTuning(runner)
        self.jobs = AsyncJobs(runner)
        self.batch = AsyncBatch(runner)
        self._lens = AsyncLensRuntime(runner)

    @property
    def lens(self) -> AsyncLensRuntime:
        """See :attr:`Client.lens`."""
        warn_deprecated()
        return self._lens

    def with_options(
        self,
        *,
        timeout: float | None | NotGiven = NOT_GIVEN,
        connect_timeout: float | NotGiven = NOT_GIVEN,
        read_timeout: float | NotGiven = NOT_GIVEN,
        max_retries: int | NotGiven = NOT_GIVEN,
        default_headers: Mapping[str, str] | NotGiven = NOT_GIVEN,
    ) -> AsyncClient:
        """See :meth:`Client.with_options`.

        >>> fast = async_client.with_options(timeout=5, max_retries=0)  # doctest: +SKIP
        """
        return self._copy(dict(timeout=timeout, connect_timeout=connect_timeout, read_timeout=read_timeout,
                               max_retries=max_retries, default_headers=default_headers))

    async def query(self, model: str, query: str = "", **params: Unpack[QueryParams]) -> QueryResult:
        """See :meth:`Client.query`.

        >>> r = await async_client.query("Reasoner::c2_4_7b_251215a172f6d7", "Hello?")  # doctest: +SKIP
        >>> r.text                                                                     # doctest: +SKIP
        """
        result: QueryResult = await self._core.query(model, query, _query_fields(params), True)
        return result

    async def embed(self, model: str, data: Any, *, normalize_input: bool = False) -> Embeddings:
        """See :meth:`Client.embed`.

        >>> e = await async_client.embed("Encoder::encoder_embeddings_01", np.random.rand(3, 1024))  # doctest: +SKIP
        >>> e.vectors.shape                                                                       # doctest: +SKIP
        (3, 768)
        """
        array, normalize = _embed_args(data, normalize_input)
        result: Embeddings = await self._core.embed(model, array, normalize, {}, True)
        return result

    async def embed_many(
        self,
        model: str,
        windows: Any,
        *,
        per_channel: bool = False,
        normalize_input: Optional[bool] = None,
        concurrency: Optional[int] = None,
        progress: WindowProgress = False,
    ) -> npt.NDArray[np.float32]:
        """See :meth:`Client.embed_many`; the loop that feeds windows runs on the event loop,
        the requests in the native core.

        >>> vectors = await client.embed_many("Encoder::encoder_embeddings_01", w)  # doctest: +SKIP
        """
        return await embed_many_async(self._core, model, windows, per_channel=per_channel,
                                      normalize_input=normalize_input, concurrency=concurrency, progress=progress)

    def close(self) -> None:
        """Releases this client's hold on its connections; later calls raise.

        The clients of one process share their connections (a new client to the same server
        finds them warm); a connection nobody uses is closed after 90 s.

        >>> async with sensorium.AsyncClient() as client:  # doctest: +SKIP
        ...     await client.query("Reasoner::c2_4_7b_251215a172f6d7", "Hello?")
        """
        self._core = ClosedCore()

    async def aclose(self) -> None:
        """Same as :meth:`close`, for ``async with`` (and code that closes every resource with
        ``await x.aclose()``).

        >>> await async_client.aclose()  # doctest: +SKIP
        """
        self.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
