"""Keeping the API key out of what sensorium builds from answers.

The native core redacts the key from every error answer. Answers that succeed can echo it too (a
failed run whose ``error`` text quotes the request it made, a log line), and the failures built
from them (``AgentRunError``, ``JobFailedError``) reach messages, tracebacks, logs and pickles,
so they pass through :func:`redacted` first. The key itself stays in the core, which does the
replacing (``CoreClient.redact``)."""

from __future__ import annotations

from typing import Any, Callable

#: Where a client finds its key when none is passed (and an unpickled one, always).
API_KEY_ENV = "SENSORIUM_API_KEY"


def redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` with ``redact`` applied to every string in it: JSON values, tuples and lists of
    them, and records (rebuilt from their redacted ``to_dict()``)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redacted(k, redact): redacted(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v, redact) for v in value)
    to_dict = getattr(value, "to_dict", None)
    from_dict = getattr(type(value), "from_dict", None)
    if callable(to_dict) and callable(from_dict):
        return from_dict(redacted(to_dict(), redact))
    return value
