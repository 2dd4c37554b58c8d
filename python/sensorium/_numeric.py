"""Turns the array-likes users hold into a numpy array shaped (channels, window)."""

from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from .errors import InvalidArgumentError


def _pandas_class(name: str) -> Optional[type]:
    # Looked up only when pandas is already imported: a DataFrame cannot exist otherwise, and
    # importing pandas here would cost every numpy-only user half a second.
    pandas = sys.modules.get("pandas")
    cls = getattr(pandas, name, None) if pandas is not None else None
    return cls if isinstance(cls, type) else None


def is_dataframe(data: Any) -> bool:
    """A pandas DataFrame, its subclasses included (pandera's, GeoDataFrame, a user's own): each is
    (time, channels) and must be turned channel-first, which ``np.asarray`` would not do."""
    cls = _pandas_class("DataFrame")
    return cls is not None and isinstance(data, cls)


def is_series(data: Any) -> bool:
    cls = _pandas_class("Series")
    return cls is not None and isinstance(data, cls)


def refuse_other_tables(data: Any, argument: str, shape: str = "(channels, window)") -> None:
    """A table that is not a pandas DataFrame (polars, modin, dask, cuDF...) reads through
    ``np.asarray`` as (rows, columns), which is (time, channels) the wrong way round for a window:
    refused, rather than embedded with its axes swapped."""
    if hasattr(data, "columns") and len(np.shape(getattr(data, "columns"))) == 1 and not is_dataframe(data):
        cls = type(data)
        raise InvalidArgumentError(
            f"{argument}: is a {cls.__module__}.{cls.__name__}, a table that sensorium does not read directly; "
            "convert it to a pandas DataFrame (rows are time, columns channels: .to_pandas()) or to a numpy "
            f"array shaped {shape}",
            argument=argument,
        )


def without_mask(data: np.ndarray, argument: str) -> np.ndarray:
    """A numpy masked array's values, refused when any is masked: the values under a mask are
    placeholders (often -9999 or 0) that would otherwise be sent as readings."""
    if not isinstance(data, np.ma.MaskedArray):
        return data
    mask = np.ma.getmaskarray(data)
    if mask.any():
        first = tuple(int(i) for i in np.argwhere(mask)[0])
        raise InvalidArgumentError(
            f"{argument}: is a masked array with {int(mask.sum())} masked value(s), the first at index {first}; "
            "fill them (data.filled(value)) or drop the windows that hold them",
            argument=argument,
        )
    return np.ma.getdata(data)


def _pandas_numpy(data: Any) -> np.ndarray:
    """A DataFrame's or Series' values as a numeric ndarray. Plain ``to_numpy()`` gives an object
    array for pandas' nullable dtypes (Int64, Float64...) as soon as they are mixed or hold NA;
    here they become the common numpy dtype, and missing values become NaN (then reported as such)."""
    dtypes = list(data.dtypes) if hasattr(data, "columns") else [data.dtype]
    if not dtypes:
        return np.asarray(data.to_numpy(), dtype=np.float64)
    common = np.result_type(*(getattr(dt, "numpy_dtype", dt) for dt in dtypes))
    if common.kind != "f" and bool(np.asarray(data.isna()).any()):
        common = np.result_type(common, np.float64)
    if common.kind == "f":
        return np.asarray(data.to_numpy(dtype=common, na_value=np.nan))
    return np.asarray(data.to_numpy(dtype=common))


def as_channels(data: Any, argument: str = "data") -> Any:
    """Returns an ndarray the native core can serialise, or raises ``InvalidArgumentError``
    naming ``argument``: whatever numpy says about a value it cannot read (mixed bytes and text,
    ragged nesting...) is reported as a bad argument, not as numpy's own exception."""
    try:
        return _as_channels(data, argument)
    except InvalidArgumentError:
        raise
    except (ValueError, TypeError, UnicodeError, OverflowError) as e:
        raise InvalidArgumentError(
            f"{argument}: cannot be read as a numeric window ({type(e).__name__}: {e})", argument=argument
        ) from e


def _as_channels(data: Any, argument: str) -> Any:
    """See :func:`as_channels`.

    * numpy arrays pass through (1-D is one channel, 2-D is (channels, window));
    * a pandas DataFrame is (time, channels) and is transposed to channel-first;
    * a pandas Series is one channel;
    * a list or tuple of 1-D arrays is stacked, one channel each.
    """
    if isinstance(data, np.ndarray):
        return without_mask(data, argument)
    kind = type(data).__name__
    if is_dataframe(data):
        bad = [str(c) for c, dt in data.dtypes.items() if not (dt.kind in "iuf")]
        if bad:
            raise InvalidArgumentError(
                f"{argument}: DataFrame columns {', '.join(bad)} are not numeric; select the numeric "
                "columns (the DataFrame is read as (time, channels))",
                argument=argument,
            )
        return _pandas_numpy(data).T
    if is_series(data):
        if data.dtype.kind not in "iuf":
            raise InvalidArgumentError(
                f"{argument}: the Series has dtype {data.dtype}, which is not numeric", argument=argument
            )
        return _pandas_numpy(data)
    if isinstance(data, (list, tuple)):
        if len(data) == 0:
            raise InvalidArgumentError(f"{argument}: is empty; give at least one channel", argument=argument)
        if all(np.ndim(ch) == 0 for ch in data):
            return np.asarray(data)  # one channel given as a list of numbers
        channels = [without_mask(np.asanyarray(ch), f"{argument}[{i}]") for i, ch in enumerate(data)]
        for i, ch in enumerate(channels):
            if ch.ndim != 1:
                raise InvalidArgumentError(
                    f"{argument}: channel {i} has shape {ch.shape}; a list of channels takes 1-D arrays",
                    argument=argument,
                )
        lengths = {len(ch) for ch in channels}
        if len(lengths) > 1:
            raise InvalidArgumentError(
                f"{argument}: channels have different lengths {sorted(lengths)}; every channel of a window "
                "needs the same number of points",
                argument=argument,
            )
        return np.stack(channels)
    refuse_other_tables(data, argument)
    if hasattr(data, "__array__"):
        return without_mask(np.asanyarray(data), argument)
    raise InvalidArgumentError(
        f"{argument}: expected a numpy array, a list of 1-D arrays or a pandas DataFrame, got {kind}",
        argument=argument,
    )
