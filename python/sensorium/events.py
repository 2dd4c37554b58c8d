"""Builders for the inline data events of ``client.query(..., events=[...])``.

Example::

    from sensorium import events

    client.query(
        "Reasoner::c2_4_7b_251215a172f6d7",
        "What happened on the line?",
        events=[events.text("Shift log: belt stopped twice."), events.json({"line": 3})],
    )
"""

from __future__ import annotations

import base64
import json as _json
import os
from typing import Any, Sequence, Union

from . import _core
from ._numeric import as_channels
from .errors import InvalidArgumentError

__all__ = ["text", "json", "image", "images", "numeric", "Event", "NumericEvent"]

NumericEvent = _core.NumericEvent
Event = Union[dict[str, Any], "_core.NumericEvent"]
ImageSource = Union[str, "os.PathLike[str]", bytes]

_IMAGE_TYPES = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg"}


def text(contents: str) -> dict[str, Any]:
    """A ``data.text`` event.

    >>> text("belt stopped at 10:02")["type"]
    'data.text'
    """
    if not isinstance(contents, str):
        raise InvalidArgumentError(f"contents: must be a str, got {type(contents).__name__}", argument="contents")
    return {"type": "data.text", "event_data": {"contents": contents}}


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as their Python values (as ``query_metadata`` takes them)."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        plain = tolist()
        if plain is not value and not hasattr(plain, "tolist"):
            return plain
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def json(obj: Any) -> dict[str, Any]:
    """A ``data.json`` event. ``obj`` is serialised to a string, as the platform requires. A
    ``str`` that already is JSON text (``json.dumps(obj)``, a ``.json`` file's text) is sent as it
    is, not encoded a second time (which would send the model one string instead of the object);
    any other ``str`` is sent as a JSON string.

    >>> json({"line": 3})["event_data"]["contents"]
    '{"line": 3}'
    >>> json('{"line": 3}')["event_data"]["contents"]
    '{"line": 3}'
    """
    if isinstance(obj, str):
        try:
            _json.loads(obj, parse_constant=_not_json)  # NaN and Infinity are Python's, not JSON's
        except ValueError:
            pass
        else:
            return {"type": "data.json", "event_data": {"contents": obj}}
    try:
        contents = _json.dumps(obj, allow_nan=False, default=_plain)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"obj: cannot be serialised to JSON ({e})", argument="obj") from None
    return {"type": "data.json", "event_data": {"contents": contents}}


def _image_bytes(source: ImageSource, argument: str) -> tuple[bytes, str | None]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            data = f.read()
    else:
        raise InvalidArgumentError(
            f"{argument}: expected a path or bytes, got {type(source).__name__}", argument=argument
        )
    if not data:
        raise InvalidArgumentError(f"{argument}: the image is empty", argument=argument)
    mime = next((m for magic, m in _IMAGE_TYPES.items() if data.startswith(magic)), None)
    return data, mime


def image(source: ImageSource) -> dict[str, Any]:
    """A ``data.base64_img`` event from a path or the image's bytes (PNG or JPEG).

    >>> image(open("frame.png", "rb").read())["type"]  # doctest: +SKIP
    'data.base64_img'
    """
    data, mime = _image_bytes(source, "source")
    event_data: dict[str, Any] = {"contents": base64.b64encode(data).decode("ascii")}
    if mime:
        event_data["mime_type"] = mime
    return {"type": "data.base64_img", "event_data": event_data}


def images(sources: Sequence[ImageSource]) -> dict[str, Any]:
    """A ``data.base64_img_array`` event: several images (frames) in one event.

    Unless the query says ``multi_image=True``, several images are read as the frames of one
    video, and the platform then needs their timing in ``query_metadata``
    (``{"raw_fps": ..., "frames_indices": [...], "total_num_frames": ...}``); without it the
    query fails with 400 ``query_failed``.

    >>> images(["f0.png", "f1.png"])["type"]  # doctest: +SKIP
    'data.base64_img_array'
    """
    if isinstance(sources, (str, bytes)) or not sources:
        raise InvalidArgumentError("sources: expected a non-empty list of paths or bytes", argument="sources")
    encoded = [
        base64.b64encode(_image_bytes(s, f"sources[{i}]")[0]).decode("ascii") for i, s in enumerate(sources)
    ]
    return {"type": "data.base64_img_array", "event_data": {"contents": encoded}}


def numeric(array: Any) -> _core.NumericEvent:
    """A ``data.numeric_array`` event from a window shaped (channels, window) or (window,).

    Takes a numpy array of any real dtype, a list of 1-D arrays, or a pandas DataFrame shaped
    (time, channels), which is transposed. The values are written to JSON in Rust.

    >>> import numpy as np
    >>> numeric(np.zeros((3, 100)))
    NumericEvent(channels=3, window=100)
    """
    return _core.NumericEvent(as_channels(array, "array"))
