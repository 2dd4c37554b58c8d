"""``client.embed``: numpy/pandas in, float32 (channels, 768) out, checked before sending."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from _helpers import ENCODER, body_json, calls, run_on
from sensorium import Embeddings
from sensorium.errors import InvalidArgumentError

RNG = np.random.default_rng(7)
WINDOW = RNG.normal(size=(3, 1024))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_embeddings_shape_and_dtype(emu, client):
    result = client.embed(ENCODER, WINDOW)
    assert isinstance(result, Embeddings)
    assert result.vectors.dtype == np.float32
    assert result.vectors.shape == (3, 768) == result.shape
    assert len(result) == 3
    assert np.isfinite(result.vectors).all() and np.abs(result.vectors).sum() > 0
    as_array = np.asarray(result)
    assert as_array.dtype == np.float32
    np.testing.assert_array_equal(as_array, result.vectors)
    np.testing.assert_array_equal(np.asarray(result, dtype=np.float64), result.vectors.astype(np.float64))
    assert result.warnings == []
    raw = result.to_dict()
    assert raw["status"] == "completed"
    assert np.allclose(np.array(raw["response"]["response"], dtype=np.float32), result.vectors)
    assert "(3, 768)" in repr(result)
    sent = body_json(calls(emu, "/query")[-1])
    assert sent["model"] == ENCODER and sent["query"] == ""
    assert "normalize_input" not in sent
    assert sent["events"] == [{"type": "data.numeric_array", "event_data": {"contents": WINDOW.tolist()}}]


def test_one_dimensional_window_is_one_channel(client):
    result = client.embed(ENCODER, WINDOW[0])
    assert result.vectors.shape == (1, 768)
    np.testing.assert_array_equal(result.vectors, client.embed(ENCODER, WINDOW[:1]).vectors)


def test_deterministic(client):
    a = client.embed(ENCODER, WINDOW).vectors
    b = client.embed(ENCODER, WINDOW.copy()).vectors
    np.testing.assert_array_equal(a, b)


def test_similar_windows_get_similar_vectors(client):
    t = np.linspace(0, 8 * np.pi, 1024)
    base = np.sin(t)
    near = base + RNG.normal(scale=0.01, size=1024)
    far = RNG.normal(size=1024)
    v = client.embed(ENCODER, np.stack([base, near, far])).vectors
    assert cosine(v[0], v[1]) > 0.9
    assert cosine(v[0], v[1]) > cosine(v[0], v[2]) + 0.1


def test_list_of_channels_matches_stacked_array(client):
    channels = [WINDOW[0], WINDOW[1], WINDOW[2]]
    np.testing.assert_array_equal(client.embed(ENCODER, channels).vectors, client.embed(ENCODER, WINDOW).vectors)


def test_list_of_numbers_is_one_channel(client):
    values = [float(x) for x in WINDOW[0][:100]]
    np.testing.assert_array_equal(
        client.embed(ENCODER, values).vectors, client.embed(ENCODER, np.array([values])).vectors
    )


def test_dataframe_is_time_by_channels(emu, client):
    df = pd.DataFrame(WINDOW.T, columns=["ax", "ay", "az"])
    result = client.embed(ENCODER, df)
    assert result.vectors.shape == (3, 768)
    assert body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"] == WINDOW.tolist()
    np.testing.assert_array_equal(result.vectors, client.embed(ENCODER, WINDOW).vectors)


class _SensorFrame(pd.DataFrame):
    """A user's own DataFrame class (as pandera's typed frames and GeoDataFrame are)."""

    @property
    def _constructor(self):  # type: ignore[override]
        return _SensorFrame


def test_a_dataframe_subclass_is_time_by_channels_too(emu, client):
    frame = _SensorFrame(WINDOW.T, columns=["ax", "ay", "az"])
    result = client.embed(ENCODER, frame)
    assert result.vectors.shape == (3, 768)
    assert body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"] == WINDOW.tolist()


def test_a_table_of_another_library_is_refused_not_read_the_wrong_way_round(emu, client):
    class Table:  # polars, modin, dask, cuDF frames: columns, and an __array__ of (rows, columns)
        columns = ["ax", "ay", "az"]

        def __array__(self, dtype=None, copy=None):
            return WINDOW.T

    before = len(calls(emu, "/query"))
    with pytest.raises(InvalidArgumentError, match=r"data: is a .*Table, a table .*to_pandas\(\)") as info:
        client.embed(ENCODER, Table())
    assert info.value.argument == "data"
    assert len(calls(emu, "/query")) == before


def test_masked_values_are_refused_not_sent_as_readings(emu, client):
    window = np.ma.masked_array(WINDOW, mask=np.zeros(WINDOW.shape, dtype=bool))
    np.testing.assert_array_equal(client.embed(ENCODER, window).vectors, client.embed(ENCODER, WINDOW).vectors)
    window[1, 5] = np.ma.masked
    before = len(calls(emu, "/query"))
    with pytest.raises(InvalidArgumentError, match=r"1 masked value.*index \(1, 5\).*filled") as info:
        client.embed(ENCODER, window)
    assert info.value.argument == "data"
    with pytest.raises(InvalidArgumentError, match=r"index \(5,\)") as info:
        client.embed(ENCODER, [WINDOW[0], window[1]])
    assert info.value.argument == "data[1]"
    assert len(calls(emu, "/query")) == before


def test_pandas_series_is_one_channel(client):
    series = pd.Series(WINDOW[1])
    np.testing.assert_array_equal(client.embed(ENCODER, series).vectors, client.embed(ENCODER, WINDOW[1:2]).vectors)


def test_dataframe_with_nullable_dtypes(emu, client):
    """``convert_dtypes()`` and ``read_csv(dtype_backend="numpy_nullable")`` give Int64/Float64
    columns; they are numbers like any other."""
    df = pd.DataFrame(WINDOW.T, columns=["ax", "ay", "az"]).round(3)
    reference = client.embed(ENCODER, df.to_numpy(dtype=np.float64).T).vectors
    nullable = df.astype({"ax": "Float64", "ay": "Float64", "az": "Float64"})
    np.testing.assert_array_equal(client.embed(ENCODER, nullable).vectors, reference)
    mixed = pd.DataFrame({"i": pd.array(INTS[0], dtype="Int64"), "f": pd.array(INTS[1] / 2, dtype="Float64")})
    result = client.embed(ENCODER, mixed)
    assert result.vectors.shape == (2, 768)
    sent = body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"]
    assert sent == [INTS[0].tolist(), (INTS[1] / 2).tolist()]
    series = pd.Series(pd.array(INTS[0], dtype="Int64"))
    np.testing.assert_array_equal(client.embed(ENCODER, series).vectors, client.embed(ENCODER, INTS[0]).vectors)


INTS = RNG.integers(0, 100, size=(2, 300))


@pytest.mark.parametrize(
    "dtype",
    ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", ">i4", "<i8", ">u2"],
)
def test_integer_dtypes_give_the_same_vectors(emu, client, dtype):
    reference = client.embed(ENCODER, INTS.astype(np.float64)).vectors
    result = client.embed(ENCODER, INTS.astype(dtype))
    np.testing.assert_array_equal(result.vectors, reference)
    assert body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"] == INTS.tolist()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "longdouble", ">f8", ">f4"])
def test_float_dtypes_give_the_same_vectors(emu, client, dtype):
    data = (RNG.normal(size=(2, 300))).astype(dtype)
    reference = client.embed(ENCODER, np.ascontiguousarray(data, dtype=np.float64)).vectors
    result = client.embed(ENCODER, data)
    np.testing.assert_allclose(result.vectors, reference, rtol=1e-5, atol=1e-6)
    sent = np.array(body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"])
    np.testing.assert_allclose(sent, data.astype(np.float64), rtol=float(np.finfo(data.dtype).eps) if data.dtype.itemsize < 8 else 0)


def layouts():
    big = RNG.normal(size=(6, 2100))
    return {
        "transposed": RNG.normal(size=(1024, 3)).T,
        "fortran": np.asfortranarray(RNG.normal(size=(3, 1024))),
        "strided-columns": big[:3, ::2],
        "strided-rows": big[::2, :1024],
        "reversed-columns": big[:2, ::-1],
        "reversed-rows": big[::-1, :500],
        "column-of-2d": big[:, 7],
        "float32-transposed": RNG.normal(size=(700, 2)).astype(np.float32).T,
        "int-strided": RNG.integers(-50, 50, size=(4, 900))[::3, 1::2],
    }


@pytest.mark.parametrize("name", list(layouts()))
def test_non_contiguous_layouts_give_the_same_vectors(emu, client, name):
    data = layouts()[name]
    assert not data.flags["C_CONTIGUOUS"] or data.ndim == 1
    copy = np.ascontiguousarray(data, dtype=np.float64)
    result = client.embed(ENCODER, data)
    sent = body_json(calls(emu, "/query")[-1])["events"][0]["event_data"]["contents"]
    expected_rows = copy.reshape(1, -1) if copy.ndim == 1 else copy
    np.testing.assert_allclose(np.array(sent), expected_rows, rtol=1e-7 if data.dtype == np.float32 else 0)
    np.testing.assert_allclose(result.vectors, client.embed(ENCODER, copy).vectors, rtol=1e-5, atol=1e-6)


def test_normalize_input_z_scores_each_window(emu, client):
    a = RNG.normal(size=(2, 1024))
    scaled = 5.0 * a + 3.0
    plain_a = client.embed(ENCODER, a).vectors
    plain_scaled = client.embed(ENCODER, scaled).vectors
    assert not np.allclose(plain_a, plain_scaled, atol=1e-3)
    norm_a = client.embed(ENCODER, a, normalize_input=True)
    assert body_json(calls(emu, "/query")[-1])["normalize_input"] is True
    norm_scaled = client.embed(ENCODER, scaled, normalize_input=True)
    np.testing.assert_allclose(norm_a.vectors, norm_scaled.vectors, rtol=1e-4, atol=1e-5)


def test_short_window_is_padded_with_a_warning(client):
    result = client.embed(ENCODER, RNG.normal(size=(2, 500)))
    assert result.vectors.shape == (2, 768)
    assert result.warnings and any("pad" in w.lower() for w in result.warnings)


def test_long_window_is_truncated_with_a_warning(client):
    result = client.embed(ENCODER, RNG.normal(size=(1, 3000)))
    assert result.vectors.shape == (1, 768)
    assert result.warnings and any("truncat" in w.lower() for w in result.warnings)


def test_window_of_exactly_1024_points_has_no_warning(client):
    assert client.embed(ENCODER, RNG.normal(size=(2, 1024))).warnings == []


BAD_DATA = {
    "nan": np.array([[1.0, np.nan, 2.0]]),
    "inf": np.array([1.0, np.inf]),
    "-inf-float32": np.array([-np.inf], dtype=np.float32),
    "nan-in-list": [np.ones(4), np.array([1.0, 2.0, np.nan, 3.0])],
    "empty-1d": np.array([]),
    "empty-channels": np.zeros((0, 10)),
    "empty-window": np.zeros((3, 0)),
    "empty-list": [],
    "3d": np.zeros((2, 3, 4)),
    "0d": np.array(1.5),
    "strings": np.array([["1", "2"], ["3", "4"]]),
    "objects": np.array([1.0, None, 2.0], dtype=object),
    "bool": np.array([True, False, True]),
    "complex": np.array([1 + 1j, 2 + 0j]),
    "datetime": np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]"),
    "ragged": [np.ones(10), np.ones(11)],
    "list-of-2d": [np.ones((2, 2)), np.ones((2, 2))],
    "dataframe-with-text": pd.DataFrame({"a": [1.0, 2.0], "label": ["x", "y"]}),
    "dataframe-with-bool": pd.DataFrame({"a": [1.0, 2.0], "flag": [True, False]}),
    "dataframe-nullable-with-NA": pd.DataFrame({"a": pd.array([1.0, None, 2.0], dtype="Float64")}),
    "dataframe-int64-with-NA": pd.DataFrame({"a": pd.array([1, None, 2], dtype="Int64"), "b": [1.0, 2.0, 3.0]}),
    "series-of-text": pd.Series(["1", "2"]),
    "none": None,
    "string": "1,2,3",
}


@pytest.mark.parametrize("name", list(BAD_DATA))
def test_bad_data_is_rejected_before_sending(emu, client, name):
    with pytest.raises(InvalidArgumentError) as info:
        client.embed(ENCODER, BAD_DATA[name])
    assert isinstance(info.value, ValueError)
    assert info.value.argument == "data"
    assert str(info.value).startswith("data")
    assert calls(emu, "/query") == []


def test_nan_message_says_where(client):
    data = np.zeros((3, 10))
    data[2, 7] = np.nan
    with pytest.raises(InvalidArgumentError, match=r"NaN.*channel 2, index 7"):
        client.embed(ENCODER, data)


def test_embed_rejects_empty_model(emu, client):
    with pytest.raises(InvalidArgumentError, match="model"):
        client.embed("", WINDOW)
    assert calls(emu, "/query") == []


def test_input_array_is_not_modified(client):
    data = RNG.normal(size=(2, 100))
    before = data.copy()
    client.embed(ENCODER, data, normalize_input=True)
    np.testing.assert_array_equal(data, before)


@pytest.mark.parametrize("model", ["Reasoner::c2_4_7b_251215a172f6d7", "Newton::c2_4_7b_251215a172f6d7"])
def test_embed_with_a_reasoning_model_is_refused_before_sending(emu, client_kind, model):
    # The prefix names a reasoning family: nothing is sent (nor billed), as InvalidArgumentError says.
    from sensorium.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as info:
        run_on(client_kind, lambda c: c.embed(model, WINDOW), api_key=emu.api_key, base_url=emu.base_url)
    assert info.value.argument == "model" and model in str(info.value)
    assert "encoder" in str(info.value) and "query()" in str(info.value)
    assert calls(emu, "/query") == []


def test_embed_with_a_reasoning_model_the_client_cannot_tell_is_an_error_not_garbage(client_kind):
    # A family the client does not know (a user's fine-tuned model) is sent; its text answer is
    # still reported as the wrong model, not a parse error.
    from sensorium.errors import InvalidArgumentError
    from sensorium.testing import DEFAULT_MODELS, Emulator

    with Emulator(models=[*DEFAULT_MODELS, {"id": "Acme::ft-reason-1", "family": "reasoner"}]) as emu:
        with pytest.raises(InvalidArgumentError) as info:
            run_on(client_kind, lambda c: c.embed("Acme::ft-reason-1", WINDOW),
                   api_key=emu.api_key, base_url=emu.base_url)
        assert info.value.argument == "model"
        assert "encoder" in str(info.value)
        assert len(calls(emu, "/query")) == 1  # a wrong answer is not retried
