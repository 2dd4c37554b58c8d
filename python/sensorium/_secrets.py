"""Keeping the API key out of what sensorium builds from answers.

The native core redacts the key from every error answer. Answers that succeed can echo it too (a
failed run whose ``error`` text quotes the request it made, a log line), and the failures built
from them (``AgentRunError``, ``JobFailedError``) reach messages, tracebacks, logs and pickles,
so they pass through :class:`KeyRedactor` first."""

from __future__ import annotations

import os
from typing import Any, Optional

# As the native core writes it in its own messages.
REDACTED = "<redacted>"
API_KEY_ENV = "SENSORIUM_API_KEY"
# The core leaves keys this short alone too: replacing every "abc" in a text would garble it,
# and no real key is that short.
MIN_REDACTED_BYTES = 4


class KeyRedactor:
    """Replaces the client's key in texts, JSON values and records. Its repr never shows the
    key, and it refuses to be pickled (clients pickle without their key)."""

    __slots__ = ("_key",)

    def __init__(self, api_key: Optional[str]) -> None:
        # The same key the core resolves: the argument, else the environment, trimmed.
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        key = key.strip() if key else None
        self._key = key if key and len(key.encode()) >= MIN_REDACTED_BYTES else None

    def text(self, value: str) -> str:
        if self._key is None or self._key not in value:
            return value
        return value.replace(self._key, REDACTED)

    def value(self, value: Any) -> Any:
        """``value`` with the key taken out of every string in it: JSON values, tuples and lists
        of them, and records (rebuilt from their redacted ``to_dict()``)."""
        if self._key is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(v) for v in value)
        to_dict = getattr(value, "to_dict", None)
        from_dict = getattr(type(value), "from_dict", None)
        if callable(to_dict) and callable(from_dict):
            return from_dict(self.value(to_dict()))
        return value

    def __repr__(self) -> str:
        return f"KeyRedactor({REDACTED})"

    def __reduce__(self) -> Any:
        raise TypeError("a KeyRedactor holds the API key and cannot be pickled")
