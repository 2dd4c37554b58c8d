"""Hypothesis over the argument checks of ``query``, ``embed`` and ``files``: whatever a careless
caller passes, the answer is a ``TypeError`` or an ``InvalidArgumentError`` naming an argument,
raised before anything is sent, or the request goes out. Never a panic, a ``SystemError``, a
``UnicodeEncodeError`` or another stray exception.

The client points at a closed port, so a request that passes the checks ends at once in
``APIConnectionError`` without any server. ``SENSORIUM_FUZZ_EXAMPLES=100000 pytest
tests/test_argument_fuzz.py`` runs a long campaign; the default is a quick one.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sensorium
from sensorium.errors import APIConnectionError, InvalidArgumentError

EXAMPLES = int(os.environ.get("SENSORIUM_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                              HealthCheck.function_scoped_fixture])

# Every code point, lone surrogates included (hypothesis leaves them out by default).
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text, st.binary(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(any_text, inner, max_size=4)), max_leaves=8)
QUERY_FIELDS = ["system_prompt", "instruction_prompt", "response_start_prompt", "template_name", "file_ids",
                "events", "max_new_tokens", "max_frames", "temperature", "do_sample", "top_k", "top_p",
                "normalize_input", "multi_image", "query_metadata", "max_query_size_mb", "max_wait_time_sec",
                "sanitize_response", "not_a_field"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def client():
    with sensorium.Client(api_key="sk-test", base_url=f"http://127.0.0.1:{_closed_port()}", max_retries=0,
                          timeout=5) as c:
        yield c


def _outcome(call: Any) -> None:
    """Runs ``call``; passes if it raised what the contract allows."""
    try:
        call()
    except InvalidArgumentError as e:
        assert e.argument, f"InvalidArgumentError without an argument name: {e}"
    except TypeError as e:
        assert str(e), "a TypeError must say what was wrong"
    except APIConnectionError:
        pass  # the checks passed and the request went out
    else:
        raise AssertionError("a call to a closed port cannot succeed")


@FUZZ
@given(model=st.one_of(any_text, scalars), query=st.one_of(any_text, scalars),
       fields=st.dictionaries(st.sampled_from(QUERY_FIELDS), values, max_size=3))
def test_query_arguments(client, model, query, fields):
    _outcome(lambda: client.query(model, query, **fields))


arrays = hnp.arrays(
    dtype=st.one_of(hnp.floating_dtypes(), hnp.integer_dtypes(), hnp.boolean_dtypes(), hnp.complex_number_dtypes(),
                    st.just(np.dtype(object)), st.just(np.dtype("U3"))),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


@FUZZ
@given(data=st.one_of(arrays, values), model=st.one_of(st.just("Encoder::encoder_embeddings_01"), any_text),
       normalize=st.one_of(st.booleans(), scalars))
def test_embed_arguments(client, data, model, normalize):
    _outcome(lambda: client.embed(model, data, normalize_input=normalize))


@FUZZ
@given(file_id=st.one_of(any_text, scalars), data=st.one_of(st.binary(max_size=16), any_text, scalars),
       file_type=st.one_of(st.none(), any_text, st.lists(any_text, max_size=60)),
       sort=st.one_of(st.none(), any_text), order=st.one_of(st.none(), any_text),
       limit=st.one_of(st.none(), st.integers()))
def test_files_arguments(client, tmp_path_factory, file_id, data, file_type, sort, order, limit):
    _outcome(lambda: client.files.metadata(file_id))
    _outcome(lambda: client.files.delete(file_id))
    _outcome(lambda: client.files.upload_base64(file_id, data))
    _outcome(lambda: client.files.download(file_id, tmp_path_factory.mktemp("dl")))
    _outcome(lambda: next(iter(client.files.list(file_type=file_type, sort=sort, order=order, limit=limit))))
