"""Argument checks shared by the public methods: each names the argument and says what it takes,
before anything is sent (the native layer's own messages, such as "must be real number" or an
OverflowError, do not say which argument was wrong)."""

from __future__ import annotations

import os
from typing import Any, Optional

from .errors import InvalidArgumentError


def seconds(value: Any, name: str, *, optional: bool = False) -> None:
    """A number of seconds (or None where ``optional``); its range is checked by the native core."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        expected = "a number of seconds or None" if optional else "a number of seconds"
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")


def text(value: Any, name: str) -> str:
    """A str that can be sent: a lone surrogate (from a non-UTF-8 file name or a bad decode)
    cannot be written as UTF-8, and is refused naming the argument."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{name}: holds a character that is not valid text (a lone surrogate at position {e.start})",
            argument=name) from None
    return value


def flag(value: Any, name: str) -> bool:
    """True or False, nothing truthy: the string "false" is truthy."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name}: takes True or False, got {value!r}", argument=name)
    return value


def count(value: Any, name: str, low: int, high: int, *, optional: bool = True) -> Optional[int]:
    """An int from ``low`` to ``high`` (or None where ``optional``); a bool is not a count."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name}: is {value}; it takes {low} to {high}", argument=name)
    return value


def local_path(value: Any, name: str) -> str:
    """A path on this machine (str, bytes or os.PathLike) as text that can cross to the core."""
    try:
        path = os.fsdecode(os.fspath(value))
    except TypeError:
        raise TypeError(f"{name}: expected a path (str or os.PathLike), got {type(value).__name__}") from None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{name}: {path!r} is not valid UTF-8 (a name from a non-UTF-8 file system); rename it",
            argument=name) from None
    return path
