"""The Dask recipe (examples/embed_with_dask.py) on a LocalCluster of worker processes, against
an emulator in its own process: the same vectors as ``embed_many`` alone, and a bad window costs
only its own row.

The recipe runs as a notebook cell runs it: its functions are defined in ``__main__`` of a
``python -c`` process, so the workers, which never ran that code, get them only by pickling them
(a function that pickles by name, as an ``lru_cache`` one does, leaves the task waiting forever).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sensorium

pytest.importorskip("dask.distributed")

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "embed_with_dask.py"
ENCODER = "Encoder::encoder_embeddings_01"
BAD = 12  # a window with a NaN, in the third partition of five windows

# Run after the recipe's definitions, in the same __main__.
NOTEBOOK_CELL = f"""
import json, sys
from dask.distributed import Client as DaskClient, LocalCluster
out = sys.argv[1]
windows = example_windows()
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, DaskClient(cluster):
    vectors = embed_partitioned(da.from_array(windows, chunks=(5, -1, -1)))
    np.save(out + "/windows.npy", windows)
    windows[{BAD}, 0, 7] = np.nan
    try:
        embed_partitioned(da.from_array(windows, chunks=(5, -1, -1)))
        failure = None
    except EmbedManyError as e:
        failure = {{"message": str(e), "failed": e.failed, "not_sent": e.not_sent, "cause": type(e.__cause__).__name__}}
        np.save(out + "/partial.npy", e.partial)
np.save(out + "/vectors.npy", vectors)
with open(out + "/failure.json", "w") as f:
    json.dump(failure, f)
"""


@pytest.fixture(scope="module")
def notebook_run(tmp_path_factory):
    """Runs the recipe's definitions and ``NOTEBOOK_CELL`` in one ``python -c`` process; gives
    its output directory and the emulator's settings (the emulator still running)."""
    source = RECIPE.read_text()
    guard = '\nif __name__ == "__main__":\n    main()\n'
    assert source.endswith(guard)  # the definitions only, as a notebook cell holds them
    out = tmp_path_factory.mktemp("dask-recipe")
    emulator = subprocess.Popen([sys.executable, "-m", "sensorium.emulator"], stdout=subprocess.PIPE, text=True)
    try:
        assert emulator.stdout is not None
        settings = dict(emulator.stdout.readline().strip().split("=", 1) for _ in range(2))
        # The workers inherit this environment, as on a configured cluster.
        env = {**os.environ, **settings}
        run = subprocess.run([sys.executable, "-c", source[: -len(guard)] + NOTEBOOK_CELL, str(out)],
                             env=env, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        yield out, settings
    finally:
        emulator.send_signal(signal.SIGTERM)
        emulator.wait(timeout=30)


def _embed_many(settings, windows):
    with sensorium.Client(api_key=settings["SENSORIUM_API_KEY"], base_url=settings["SENSORIUM_BASE_URL"]) as client:
        return client.embed_many(ENCODER, windows)


@pytest.mark.timeout(300)
def test_recipe_run_from_a_notebook_matches_embed_many(notebook_run):
    out, settings = notebook_run
    vectors = np.load(out / "vectors.npy")
    windows = np.load(out / "windows.npy")
    expected = _embed_many(settings, windows)
    assert vectors.dtype == np.float32 and vectors.shape == expected.shape == (len(windows), 4, 768)
    np.testing.assert_array_equal(vectors, expected)


@pytest.mark.timeout(300)
def test_a_bad_window_costs_only_its_row_and_is_named_by_its_index_in_the_whole_array(notebook_run):
    out, settings = notebook_run
    failure = json.loads((out / "failure.json").read_text())
    assert failure is not None, "a window with a NaN did not fail"
    assert failure["failed"] == [BAD] and failure["not_sent"] == []
    assert f"windows[{BAD}]" in failure["message"] and failure["cause"] == "InvalidArgumentError"
    # Named once, by its index in the whole array: not also by its index in its partition.
    assert re.findall(r"windows\[\d+\]", failure["message"]) == [f"windows[{BAD}]"], failure["message"]
    partial, vectors = np.load(out / "partial.npy"), np.load(out / "vectors.npy")
    assert np.isnan(partial[BAD]).all()
    keep = np.arange(len(partial)) != BAD
    np.testing.assert_array_equal(partial[keep], vectors[keep])  # every other partition's vectors kept
    # The README's recovery, once the window is mended, completes the work from the indices given.
    windows = np.load(out / "windows.npy")
    partial[failure["failed"]] = _embed_many(settings, windows[failure["failed"]])
    np.testing.assert_array_equal(partial, vectors)
