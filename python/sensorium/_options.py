"""Client options shared by `Client` and `AsyncClient`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol

from . import _core
from ._arguments import count, seconds, utf8_text
from ._secrets import API_KEY_ENV
from .errors import ClientClosedError, ConfigurationError

DEFAULT_TIMEOUT = 600.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 2


class NotGiven:
    """Marks an option left unchanged by ``with_options`` (``None`` is a real value there)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


@dataclass(frozen=True)
class Options:
    timeout: float | None = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    default_headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # Checked here, naming the argument, rather than left to the native layer, whose own
        # messages ("must be real number", an OverflowError) do not say which argument was wrong.
        seconds(self.timeout, "timeout", optional=True)
        seconds(self.connect_timeout, "connect_timeout")
        seconds(self.read_timeout, "read_timeout")
        count(self.max_retries, "max_retries", 0, MAX_RETRIES_LIMIT, optional=False)

    def core(self, api_key: str | None, base_url: str | None, agents_base_url: str | None = None) -> _core.CoreClient:
        for value, name in ((api_key, "api_key"), (base_url, "base_url"), (agents_base_url, "agents_base_url")):
            if value is not None:
                utf8_text(value, name)
        _core.reset_logging()
        return _core.CoreClient(
            api_key, base_url, self.timeout, self.connect_timeout, self.read_timeout, self.max_retries,
            list(self.default_headers), agents_base_url,
        )

    def derive(self, core: _core.CoreClient, changes: dict[str, Any]) -> tuple[Options, _core.CoreClient]:
        given = {k: v for k, v in changes.items() if not isinstance(v, NotGiven)}
        if "default_headers" in given:
            # Added to the client's own, a name given again replacing its value (header names
            # compare case-insensitively), as openai-python's with_options does: a per-call trace
            # header must not drop the team's User-Agent.
            added = headers(given["default_headers"])
            names = {name.lower() for name, _ in added}
            given["default_headers"] = tuple(h for h in self.default_headers if h[0].lower() not in names) + added
        options = replace(self, **given)
        return options, core.with_options(
            options.timeout, options.connect_timeout, options.read_timeout, options.max_retries,
            list(options.default_headers),
        )


#: More retries than anyone means; past it the count no longer fits the native core.
MAX_RETRIES_LIMIT = 1_000_000


def headers(mapping: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if mapping is None:
        return ()
    if not isinstance(mapping, Mapping):
        raise TypeError(f"default_headers: expected a mapping of header names to values, got {type(mapping).__name__}")
    # Not str(k), str(v): None would go out as the header value "None", a number as its text.
    return tuple((utf8_text(k, "default_headers"), utf8_text(v, "default_headers")) for k, v in mapping.items())


class HasCore(Protocol):
    """What resources need of their client: the native core (replaced when the client closes)."""

    _core: Any


class ClosedCore:
    """Stands in for the native core after ``close()``: any call says the client is closed."""

    def __getattr__(self, name: str) -> Any:
        raise ClientClosedError("this sensorium client is closed; create a new one (or use with_options on an open one)")


class KeylessCore:
    """Stands in for the native core of a client unpickled where ``SENSORIUM_API_KEY`` holds no
    usable key (``problem`` says what is wrong with it): it keeps the base URLs (for ``repr`` and
    pickling again), and any call raises the ``ConfigurationError`` naming the variable. Raised at
    the first call, not while unpickling, because multiprocessing pools and Dask cannot deliver an
    error raised while unpickling a task's arguments: the caller would wait forever instead of
    seeing this error as the task's."""

    def __init__(self, client_name: str, base_url: str, agents_base_url: str, problem: str) -> None:
        self._client_name = client_name
        self._problem = problem
        self.base_url = base_url
        self.agents_base_url = agents_base_url

    def __getattr__(self, name: str) -> Any:
        raise ConfigurationError(
            f"this sensorium {self._client_name} was unpickled without an API key: pickles never hold the key, "
            f"and {self._problem}. Set {API_KEY_ENV} where the client is unpickled "
            "(for example in each worker's environment)."
        )
