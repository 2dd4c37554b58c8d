"""``sensorium.windows``: cut a (time, channels) recording into (N, channels, window) windows."""

from __future__ import annotations

import operator
from typing import Any, Hashable, Optional, Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from ._numeric import _pandas_numpy, is_dataframe, is_series, refuse_other_tables, without_mask
from .errors import InvalidArgumentError

__all__ = ["windows"]


def _positive_int(value: Any, argument: str) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{argument}: takes a whole number of points, got a bool", argument=argument)
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{argument}: takes a whole number of points, got {type(value).__name__}", argument=argument
        ) from None
    if number < 1:
        raise InvalidArgumentError(f"{argument}: is {number}; it takes 1 or more points", argument=argument)
    return number


def _recording(data: Any, columns: Optional[Sequence[Any]]) -> np.ndarray:
    """The recording as a numeric (time, channels) array, channels picked by ``columns``."""
    if columns is not None and not isinstance(columns, (str, bytes)) and hasattr(columns, "tolist"):
        columns = columns.tolist()  # a pandas Index (df.columns[1:]) or a numpy array of names or indices
    if columns is not None and (isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence)):
        raise InvalidArgumentError(
            f"columns: takes a list of channels (column names or indices), got {type(columns).__name__}",
            argument="columns",
        )
    if columns is not None and len(columns) == 0:
        raise InvalidArgumentError("columns: is empty; pick at least one channel", argument="columns")
    if is_series(data):
        # One channel, named by the Series' name as a DataFrame column would be.
        data = data.to_frame()
    if is_dataframe(data):
        if columns is not None:
            unhashable = [c for c in columns if not isinstance(c, Hashable)]
            if unhashable:
                raise InvalidArgumentError(
                    f"columns: takes a flat list of column names; {unhashable[0]!r} is not a column name",
                    argument="columns",
                )
            missing = [c for c in columns if c not in data.columns]
            if missing:
                raise InvalidArgumentError(
                    f"columns: {missing!r} not in the DataFrame's columns {list(data.columns)!r}", argument="columns"
                )
            # A name two columns share picks both: one name asked for would give two channels.
            shared = list(dict.fromkeys(c for c in columns if np.count_nonzero(data.columns == c) > 1))
            if shared:
                raise InvalidArgumentError(
                    f"columns: {shared!r} names more than one of the DataFrame's columns {list(data.columns)!r}; "
                    "rename them (df.columns = [...]) or pick from df.iloc[:, [...]]", argument="columns"
                )
            data = data[list(columns)]
        bad = [str(c) for c, dt in data.dtypes.items() if dt.kind not in "iuf"]
        if bad:
            raise InvalidArgumentError(
                f"data: DataFrame columns {', '.join(bad)} are not numeric; pick numeric ones with columns=",
                argument="data",
            )
        sparse = [str(c) for c, dt in data.dtypes.items() if type(dt).__name__ == "SparseDtype"]
        if sparse:
            # A view of a sparse column cannot exist; densifying is the caller's choice of memory.
            raise InvalidArgumentError(
                f"data: DataFrame columns {', '.join(sparse)} are sparse; make them dense first "
                "(df.sparse.to_dense() or df.astype(float))",
                argument="data",
            )
        try:
            values: np.ndarray = _pandas_numpy(data)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"data: the DataFrame cannot be read as numbers ({type(e).__name__}: {e})", argument="data"
            ) from e
        return values
    if not isinstance(data, np.ndarray):
        refuse_other_tables(data, "data", "(time, channels)")
        raise InvalidArgumentError(
            f"data: takes a numpy array or a pandas DataFrame shaped (time, channels), or a pandas Series (one "
            f"channel), got {type(data).__name__}",
            argument="data",
        )
    if data.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"data: has dtype {data.dtype}, which is not a real number type", argument="data")
    # Windows are views, and a view of a masked array drops its mask: refuse masked values here.
    data = without_mask(data, "data")
    if data.ndim == 1:
        data = data[:, np.newaxis]
    if data.ndim != 2:
        raise InvalidArgumentError(
            f"data: is {data.ndim}-D with shape {data.shape}; it takes (time, channels) or (time,)", argument="data"
        )
    array: np.ndarray = data
    if columns is None:
        return array
    indices = []
    for c in columns:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise InvalidArgumentError(
                f"columns: an array's channels are picked by index; {c!r} is not an integer", argument="columns"
            )
        if not -data.shape[1] <= int(c) < data.shape[1]:
            raise InvalidArgumentError(
                f"columns: index {c} is out of range for {data.shape[1]} channels", argument="columns"
            )
        indices.append(int(c) % data.shape[1])
    # A run of increasing indices is a slice, which stays a view; any other pick is copied once.
    if indices == list(range(indices[0], indices[0] + len(indices))):
        return array[:, indices[0] : indices[0] + len(indices)]
    return array[:, indices]


def windows(
    data: Any,
    *,
    window: int,
    step: Optional[int] = None,
    columns: Optional[Sequence[Any]] = None,
) -> npt.NDArray[Any]:
    """Cuts a recording shaped (time, channels) into windows shaped (N, channels, window).

    ``data`` is a numpy array (time, channels) or (time,), a pandas DataFrame whose rows are
    time and columns channels, or a pandas Series (one channel). Windows start every ``step`` points (default ``window``: no
    overlap); a tail shorter than a window is left out. ``columns`` picks and orders the channels:
    column names for a DataFrame, indices for an array.

    The result is a read-only view of ``data`` where the layout allows it (an array, a slice of
    its channels, a DataFrame of one dtype): no window is copied. Picking channels out of order
    copies the picked channels once. Pass it to ``client.embed_many``.

    >>> import numpy as np, sensorium
    >>> rec = np.random.rand(10_000, 4)                      # 10,000 points, 4 channels
    >>> sensorium.windows(rec, window=1024, step=512).shape
    (18, 4, 1024)
    >>> sensorium.windows(rec, window=1024, columns=[2, 0]).shape
    (9, 2, 1024)
    """
    size = _positive_int(window, "window")
    stride = size if step is None else _positive_int(step, "step")
    recording = _recording(data, columns)
    length = recording.shape[0]
    if length < size:
        raise InvalidArgumentError(
            f"window: is {size} points, longer than the recording ({length} points); give a smaller window "
            "or a longer recording",
            argument="window",
        )
    if recording.shape[1] == 0:
        raise InvalidArgumentError("data: has no channels", argument="data")
    # (time - window + 1, channels, window): already channel-first per window.
    view = sliding_window_view(recording, size, axis=0)
    return view[::stride]
