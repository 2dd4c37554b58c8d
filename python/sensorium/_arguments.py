"""Argument checks shared by the clients and their resources, run before anything is sent. A wrong type is a
``TypeError`` naming the argument, a value of the right type that cannot be right an
``InvalidArgumentError`` naming it (the house rule of ``sensorium.errors``); a boolean option
given anything but True or False is an ``InvalidArgumentError`` too, as ``knn``'s
``normalize_embeddings`` has always been."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from .errors import InvalidArgumentError

#: A path argument as the signatures spell it (bytes are taken too, see ``local_path``).
StrPath = Union[str, "os.PathLike[str]"]


def flag(value: Any, argument: str, *, optional: bool = True) -> Optional[bool]:
    """A boolean option (or ``None`` when not given, where ``optional``). Only ``True`` and
    ``False`` pass: a string such as ``"false"`` (from a config file or a command line) is
    truthy, so taking it would turn the option on, as ``canonical="false"`` once published a
    blueprint to every organization."""
    if isinstance(value, bool) or (value is None and optional):
        return value
    raise InvalidArgumentError(f"{argument}: takes True or False, got {value!r:.40}", argument=argument)


def string(value: Any, argument: str) -> Optional[str]:
    """A string option (empty allowed: a description, a search filter), or ``None``."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{argument}: expected a str, got {type(value).__name__}")
    return value


def text(value: Any, argument: str, *, required: bool = False) -> Optional[str]:
    """A string option, or ``None`` when not given (refused when ``required``); an empty or
    blank one is refused (the platform reads it as missing or as a name that cannot exist)."""
    if value is None:
        if required:
            raise InvalidArgumentError(f"{argument}: is required (a non-empty string)", argument=argument)
        return None
    if not isinstance(value, str):
        raise TypeError(f"{argument}: expected a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidArgumentError(f"{argument}: is {value!r}; it takes a non-empty string", argument=argument)
    return value


def one_of(value: Any, allowed: Sequence[str], argument: str) -> Optional[str]:
    """``value`` when it is one of ``allowed`` (or ``None``)."""
    checked = text(value, argument)
    if checked is not None and checked not in allowed:
        raise InvalidArgumentError(f"{argument}: is {value!r}; it takes one of {', '.join(allowed)}", argument=argument)
    return checked


def mapping(value: Any, argument: str) -> Optional[dict[str, Any]]:
    """A JSON object option (a dict copy), or ``None`` when not given."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{argument}: expected a dict, got {type(value).__name__}")
    return dict(value)


def strings(value: Any, argument: str) -> list[str]:
    """Any iterable of strings (a list, a tuple, a pandas ``Index``, a numpy array) as a list of
    plain ``str``. A single string is refused: it would be read as its characters."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{argument}: expected a list of strings, got {type(value).__name__}")
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        odd = next(item for item in items if not isinstance(item, str))
        raise TypeError(f"{argument}: expected a list of strings, got an item {odd!r:.40} ({type(odd).__name__})")
    return [str(item) for item in items]


def limit(value: Any, argument: str = "limit", *, most: Optional[int] = None) -> Optional[int]:
    """A page size: a whole number from 1 (to ``most``, where the spec gives a bound)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}: expected an int, got {type(value).__name__}")
    if value < 1 or (most is not None and value > most):
        bound = f"1 to {most}" if most is not None else "1 or more"
        raise InvalidArgumentError(f"{argument}: is {value}; it takes {bound}", argument=argument)
    return value


def folder(value: Any, argument: str = "directory") -> Path:
    """A folder on this machine (str, bytes or ``os.PathLike``). An empty one is refused: it
    would be read as the current folder, which the caller did not name (``"."`` does)."""
    path = local_path(value, argument)
    if not path:
        raise InvalidArgumentError(f"{argument}: is empty; give a folder ('.' for the current one)", argument=argument)
    return Path(path)


def seconds(value: Any, name: str, *, optional: bool = False) -> None:
    """A number of seconds (or None where ``optional``); its range is checked by the native core."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        expected = "a number of seconds or None" if optional else "a number of seconds"
        raise TypeError(f"{name}: expected {expected}, got {type(value).__name__}")


def utf8_text(value: Any, name: str) -> str:
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
