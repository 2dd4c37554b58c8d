"""Shapes of a fine-tuning job's ``method`` and training files, checked before sending.

A reasoning model (``newton``) is tuned with LoRA on ``plain`` JSONL files; an encoder (``omega``)
gets a ``head`` (or ``knn``) over ``n_shot`` CSV files, one label per file. Every hyperparameter is
a number or ``"auto"`` (the default)::

    from sensorium import fine_tuning as ft

    client.fine_tuning.jobs.create(
        "omega", name="pump states",
        method=ft.head(n_epochs=5, window_size=512, data_columns=["vibration", "current"]),
        training_files=[ft.n_shot("idle.csv", "idle"), ft.n_shot("running.csv", "running")],
    )
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable, Optional, Union

from ._arguments import strings, text
from .errors import InvalidArgumentError
from .types import FileRecord

__all__ = ["lora", "head", "knn", "plain", "n_shot", "check_job"]

Auto = Union[int, float, str]
AUTO = "auto"


def _auto(value: Any) -> bool:
    # Compared only as a string: `==` on a numpy array or pandas Index is elementwise.
    return isinstance(value, str) and value == AUTO


def _number(value: Any, argument: str, *, whole: bool = False) -> Any:
    """A hyperparameter: ``"auto"`` or a number above 0 (numpy scalars too, sent as plain
    ``int``/``float``); a whole number where the spec says integer."""
    if _auto(value):
        return value
    kind = Integral if whole else Real
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or value <= 0:
        name = "a whole number" if whole else "a finite number"
        raise InvalidArgumentError(f"{argument}: is {value!r}; it takes {name} above 0 or 'auto'", argument=argument)
    return int(value) if isinstance(value, Integral) else float(value)


def _columns(value: Any) -> Any:
    """``"auto"`` or CSV column names: any sequence of strings (a list, a pandas ``Index`` such
    as ``df.columns[1:]``, a numpy array)."""
    if _auto(value):
        return value
    try:
        columns = strings(value, "data_columns")
    except TypeError:
        columns = []
    if not columns or not all(columns):
        raise InvalidArgumentError(f"data_columns: is {value!r:.80}; it takes a list of CSV column names or 'auto'",
                                   argument="data_columns")
    return columns


def _reader(window_size: Auto, step_size: Auto, data_columns: Any) -> dict[str, Any]:
    return {"data_columns": _columns(data_columns), "step_size": _number(step_size, "step_size", whole=True),
            "window_size": _number(window_size, "window_size", whole=True)}


def lora(*, batch_size: Auto = AUTO, learning_rate_multiplier: Auto = AUTO, n_epochs: Auto = AUTO) -> dict[str, Any]:
    """LoRA for a reasoning model.

    >>> lora(n_epochs=3)
    {'type': 'lora', 'lora': {'hyperparameters': {'batch_size': 'auto', 'learning_rate_multiplier': 'auto', 'n_epochs': 3}}}
    """
    return {"type": "lora", "lora": {"hyperparameters": {
        "batch_size": _number(batch_size, "batch_size", whole=True),
        "learning_rate_multiplier": _number(learning_rate_multiplier, "learning_rate_multiplier"),
        "n_epochs": _number(n_epochs, "n_epochs", whole=True)}}}


def head(*, batch_size: Auto = AUTO, n_epochs: Auto = AUTO, window_size: Auto = AUTO, step_size: Auto = AUTO,
         data_columns: Any = AUTO) -> dict[str, Any]:
    """A classification head on an encoder, reading CSV windows.

    >>> head(window_size=256)["head"]["reader"]["window_size"]
    256
    """
    return {"type": "head", "head": {
        "hyperparameters": {"batch_size": _number(batch_size, "batch_size", whole=True),
                            "n_epochs": _number(n_epochs, "n_epochs", whole=True)},
        "reader": _reader(window_size, step_size, data_columns)}}


def knn(*, batch_size: Auto = AUTO, n_neighbors: Auto = AUTO, metric: str = AUTO, weights: str = AUTO,
        normalize_embeddings: Union[bool, str] = AUTO, window_size: Auto = AUTO, step_size: Auto = AUTO,
        data_columns: Any = AUTO) -> dict[str, Any]:
    """A nearest-neighbour classifier on an encoder's embeddings (wire notes: ``method.type: knn``)."""
    for name, value in (("metric", metric), ("weights", weights)):
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{name}: is {value!r}; it takes a name such as 'cosine' or 'auto'",
                                       argument=name)
    if not isinstance(normalize_embeddings, bool) and not _auto(normalize_embeddings):
        raise InvalidArgumentError(f"normalize_embeddings: is {normalize_embeddings!r}; it takes True, False or "
                                   "'auto'", argument="normalize_embeddings")
    return {"type": "knn", "knn": {
        "hyperparameters": {"batch_size": _number(batch_size, "batch_size", whole=True),
                            "n_neighbors": _number(n_neighbors, "n_neighbors", whole=True), "metric": metric,
                            "weights": weights, "normalize_embeddings": normalize_embeddings},
        "reader": _reader(window_size, step_size, data_columns)}}


def _file_id(file_id: Union[str, FileRecord]) -> str:
    name = file_id.file_id if isinstance(file_id, FileRecord) else file_id
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"file_id: is {file_id!r}; it takes an uploaded file's name", argument="file_id")
    return name


def plain(file_id: Union[str, FileRecord], *, format: Optional[str] = None) -> dict[str, Any]:
    """A training file of a reasoning model (JSONL).

    >>> plain("train.jsonl")
    {'type': 'plain', 'file_id': 'train.jsonl'}
    """
    entry: dict[str, Any] = {"type": "plain", "file_id": _file_id(file_id)}
    if text(format, "format") is not None:
        entry["format"] = format
    return entry


def n_shot(file_id: Union[str, FileRecord], label: str, *, format: Optional[str] = None) -> dict[str, Any]:
    """A training file of an encoder: examples of one class, ``label``.

    >>> n_shot("idle.csv", "idle")
    {'type': 'n_shot', 'file_id': 'idle.csv', 'label': 'idle'}
    """
    if not isinstance(label, str) or not label:
        raise InvalidArgumentError(f"label: is {label!r}; it takes the class name the file's examples show",
                                   argument="label")
    entry: dict[str, Any] = {"type": "n_shot", "file_id": _file_id(file_id), "label": label}
    if text(format, "format") is not None:
        entry["format"] = format
    return entry


def _family(model: str) -> Optional[str]:
    lowered = model.lower()
    if lowered.startswith(("newton", "reasoner")):
        return "reasoner"
    if lowered.startswith(("omega", "encoder")):
        return "encoder"
    return None  # a model the client does not know: the platform decides (501 when unsupported)


def _files(files: Any, argument: str) -> list[dict[str, Any]]:
    if files is None:
        raise InvalidArgumentError(f"{argument}: is required; build each file with fine_tuning.plain(...) or "
                                   "fine_tuning.n_shot(...)", argument=argument)
    if isinstance(files, (str, dict, FileRecord)):
        files = [files]
    if not isinstance(files, Iterable):
        raise TypeError(f"{argument}: expected a list of files (fine_tuning.plain/n_shot), got {type(files).__name__}")
    out = []
    for entry in files:
        if isinstance(entry, dict):
            if not isinstance(entry.get("type"), str) or not isinstance(entry.get("file_id"), str) \
                    or not entry["file_id"]:
                raise InvalidArgumentError(f"{argument}: {entry!r} needs 'type' and 'file_id'; build it with "
                                           "fine_tuning.plain(...) or fine_tuning.n_shot(...)", argument=argument)
            out.append(dict(entry))
        else:
            raise InvalidArgumentError(
                f"{argument}: {entry!r} is a bare file; wrap it with fine_tuning.plain(file_id) (reasoning model) "
                "or fine_tuning.n_shot(file_id, label) (encoder)", argument=argument)
    if not out and argument == "training_files":
        raise InvalidArgumentError("training_files: needs at least one file", argument=argument)
    return out


def check_job(model: str, method: Any, training_files: Any, validation_files: Any = None) -> dict[str, Any]:
    """The model-dependent part of a create body, refused before sending when the method or a
    file's type does not fit the model (a head for a reasoning model, LoRA for an encoder, ...)."""
    if not isinstance(model, str) or not model:
        raise InvalidArgumentError("model: is required ('newton' for the reasoning model, 'omega' for the encoder)",
                                   argument="model")
    if not isinstance(method, dict) or not isinstance(method.get("type"), str):
        raise InvalidArgumentError("method: build it with fine_tuning.lora(), head() or knn()", argument="method")
    body: dict[str, Any] = {"model": model, "method": method,
                            "training_files": _files(training_files, "training_files")}
    if validation_files is not None:
        body["validation_files"] = _files(validation_files, "validation_files")
    family = _family(model)
    if family is not None:
        methods, file_type = (("lora",), "plain") if family == "reasoner" else (("head", "knn"), "n_shot")
        if method["type"] not in methods:
            raise InvalidArgumentError(
                f"method: {model!r} is {'a reasoning model' if family == 'reasoner' else 'an encoder'}, which is tuned "
                f"with {' or '.join(methods)}, not {method['type']!r}", argument="method")
        for name in ("training_files", "validation_files"):
            for entry in body.get(name, []):
                if entry.get("type") != file_type:
                    raise InvalidArgumentError(
                        f"{name}: {model!r} takes {file_type} files (fine_tuning.{file_type}(...)), got a "
                        f"{entry.get('type')!r} file", argument=name)
    return body
