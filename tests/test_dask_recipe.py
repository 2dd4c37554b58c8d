"""The Dask recipe (examples/embed_with_dask.py) on a LocalCluster of worker processes, against
an emulator in its own process: the same vectors as ``embed_many`` alone."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import sensorium

pytest.importorskip("dask.distributed")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.timeout(300)
def test_recipe_on_a_local_cluster_matches_embed_many(monkeypatch):
    # The workers import the recipe by name, as they would a user's installed package.
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]))
    recipe = importlib.import_module("embed_with_dask")
    proc, settings = recipe.start_local_emulator()
    try:
        for name, value in settings.items():
            monkeypatch.setenv(name, value)  # the workers inherit it, as on a configured cluster
        vectors = recipe.main(n_workers=2, partition=5)
        windows = recipe.example_windows()
        with sensorium.Client() as client:
            expected = client.embed_many(recipe.ENCODER, windows)
        assert vectors.dtype == np.float32 and vectors.shape == expected.shape == (len(windows), 4, 768)
        np.testing.assert_array_equal(vectors, expected)
    finally:
        sys.modules.pop("embed_with_dask", None)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
