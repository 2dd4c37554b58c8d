"""``sensorium.windows``: (time, channels) recordings to (N, channels, window) views."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sensorium
from sensorium.errors import InvalidArgumentError

REC = np.arange(40, dtype=np.float64).reshape(10, 4)  # 10 points, 4 channels; value = 4*t + c


def test_shape_layout_and_values():
    w = sensorium.windows(REC, window=4, step=2)
    assert w.shape == (4, 4, 4)  # starts 0, 2, 4, 6
    for n, start in enumerate(range(0, 7, 2)):
        np.testing.assert_array_equal(w[n], REC[start : start + 4].T)


def test_default_step_is_one_window_and_the_short_tail_is_dropped():
    w = sensorium.windows(REC, window=3)
    assert w.shape == (3, 4, 3)
    np.testing.assert_array_equal(w[2], REC[6:9].T)


def test_no_copy_for_arrays_and_contiguous_channel_picks():
    assert np.shares_memory(sensorium.windows(REC, window=4), REC)
    picked = sensorium.windows(REC, window=4, columns=[1, 2])
    assert np.shares_memory(picked, REC)
    np.testing.assert_array_equal(picked[0], REC[0:4, 1:3].T)


def test_columns_pick_and_order_channels():
    w = sensorium.windows(REC, window=5, columns=[3, 0])
    np.testing.assert_array_equal(w[1], REC[5:10][:, [3, 0]].T)
    df = pd.DataFrame(REC, columns=["a", "b", "c", "d"])
    wd = sensorium.windows(df, window=5, columns=["d", "a"])
    np.testing.assert_array_equal(wd, w)
    # What notebooks pass: a slice of df.columns, or an array of names or indices.
    np.testing.assert_array_equal(sensorium.windows(df, window=5, columns=df.columns[[3, 0]]), w)
    np.testing.assert_array_equal(sensorium.windows(df, window=5, columns=np.array(["d", "a"])), w)
    np.testing.assert_array_equal(sensorium.windows(REC, window=5, columns=np.array([3, 0])), w)


def test_dataframe_of_one_dtype_is_a_view():
    df = pd.DataFrame(REC.copy(), columns=list("abcd"))
    w = sensorium.windows(df, window=2)
    assert w.shape == (5, 4, 2)
    np.testing.assert_array_equal(w[0], REC[0:2].T)


def test_a_dataframe_subclass_is_read_as_a_dataframe():
    class SensorFrame(pd.DataFrame):
        @property
        def _constructor(self):  # type: ignore[override]
            return SensorFrame

    frame = SensorFrame(REC.copy(), columns=list("abcd"))
    np.testing.assert_array_equal(sensorium.windows(frame, window=2, columns=["d", "a"]), sensorium.windows(REC, window=2, columns=[3, 0]))


def test_a_table_of_another_library_is_refused_naming_to_pandas():
    class Table:  # polars, modin, cuDF frames
        columns = ["a", "b"]

        def __array__(self, dtype=None, copy=None):
            return REC[:, :2]

    with pytest.raises(InvalidArgumentError, match=r"data: is a .*Table, a table .*to_pandas\(\).*\(time, channels\)"):
        sensorium.windows(Table(), window=2)


def test_a_masked_recording_is_refused_where_a_value_is_masked():
    recording = np.ma.masked_array(REC.copy(), mask=np.zeros(REC.shape, dtype=bool))
    np.testing.assert_array_equal(sensorium.windows(recording, window=2), sensorium.windows(REC, window=2))
    recording[3, 2] = np.ma.masked
    with pytest.raises(InvalidArgumentError, match=r"masked value.*index \(3, 2\)") as info:
        sensorium.windows(recording, window=2)
    assert info.value.argument == "data"


def test_one_dimensional_recording_is_one_channel():
    w = sensorium.windows(np.arange(8.0), window=4)
    assert w.shape == (2, 1, 4)


def test_a_series_is_one_channel():
    series = pd.Series(REC[:, 2], name="temp")
    w = sensorium.windows(series, window=4, step=3)
    assert w.shape == (3, 1, 4)
    np.testing.assert_array_equal(w, sensorium.windows(REC, window=4, step=3, columns=[2]))
    # Its name is its column, as in a DataFrame.
    np.testing.assert_array_equal(sensorium.windows(series, window=4, step=3, columns=["temp"]), w)
    with pytest.raises(InvalidArgumentError, match="columns"):
        sensorium.windows(series, window=4, columns=["pressure"])
    with pytest.raises(InvalidArgumentError, match="not numeric"):
        sensorium.windows(pd.Series(["x"] * 4), window=2)


def test_goes_straight_into_embed_many(client):
    w = sensorium.windows(np.random.default_rng(0).normal(size=(300, 2)), window=100)
    vectors = client.embed_many("Encoder::encoder_embeddings_01", w)
    assert vectors.shape == (3, 2, 768)
    np.testing.assert_array_equal(vectors[1], client.embed("Encoder::encoder_embeddings_01", w[1]).vectors)


@pytest.mark.parametrize(
    "kwargs, argument, words",
    [
        (dict(window=11), "window", "longer than the recording (10 points)"),
        (dict(window=0), "window", "1 or more"),
        (dict(window=2.5), "window", "whole number"),
        (dict(window=True), "window", "bool"),
        (dict(window=2, step=0), "step", "1 or more"),
        (dict(window=2, columns="ab"), "columns", "list"),
        (dict(window=2, columns=[]), "columns", "empty"),
        (dict(window=2, columns=[4]), "columns", "out of range"),
        (dict(window=2, columns=["a"]), "columns", "index"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, argument, words):
    with pytest.raises(InvalidArgumentError) as info:
        sensorium.windows(REC, **kwargs)
    assert info.value.argument == argument
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_data():
    with pytest.raises(InvalidArgumentError, match="columns"):
        sensorium.windows(pd.DataFrame({"a": [1.0] * 4}), window=2, columns=["zz"])
    with pytest.raises(InvalidArgumentError, match="not numeric"):
        sensorium.windows(pd.DataFrame({"a": ["x"] * 4}), window=2)
    with pytest.raises(InvalidArgumentError, match="3-D"):
        sensorium.windows(np.zeros((4, 2, 2)), window=2)
    with pytest.raises(InvalidArgumentError, match="list"):
        sensorium.windows([[1.0, 2.0]], window=1)


def test_a_sparse_column_or_a_nested_columns_list_is_named():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": pd.arrays.SparseArray(np.arange(200.0)), "b": np.arange(200.0)})
    for columns in (None, ["a"]):
        with pytest.raises(InvalidArgumentError) as info:
            sensorium.windows(df, window=64, columns=columns)
        assert info.value.argument == "data" and "sparse" in str(info.value) and "a" in str(info.value)
    for columns in ([["a", "b"]], [{"a"}]):
        with pytest.raises(InvalidArgumentError) as info:
            sensorium.windows(df, window=64, columns=columns)
        assert info.value.argument == "columns"


def test_a_column_name_two_columns_share_is_refused_naming_it():
    """`columns=["vib"]` on a DataFrame with two columns named "vib" gave two channels for the one
    name asked for."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(np.arange(40.0).reshape(10, 4), columns=["vib", "temp", "vib", "rpm"])
    with pytest.raises(InvalidArgumentError) as info:
        sensorium.windows(df, window=5, columns=["rpm", "vib"])
    assert info.value.argument == "columns" and "'vib'" in str(info.value) and "temp" in str(info.value)
    # Names no other column shares still pick as before; no columns= takes every column in order.
    assert sensorium.windows(df, window=5, columns=["rpm", "temp"]).shape == (2, 2, 5)
    assert sensorium.windows(df, window=5).shape == (2, 4, 5)
