"""Embed a partitioned dataset of windows on a Dask cluster (``dask.distributed``).

Each partition (a block of windows) is embedded by one worker with ``embed_many``; the worker
builds its own ``sensorium.Client`` from its environment (``SENSORIUM_API_KEY``,
``SENSORIUM_BASE_URL``), once per worker process. Nothing secret travels with the tasks: a
client that does get pickled (captured in a task, say) carries only its configuration, and takes
the key from the worker's environment when it is unpickled.

Run it as is to try it on a local cluster of two worker processes against a local emulator
started for the purpose; with ``SENSORIUM_BASE_URL`` and ``SENSORIUM_API_KEY`` set, it uses that
platform instead:

    python examples/embed_with_dask.py
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any, Optional

import dask.array as da
import numpy as np
import numpy.typing as npt

import sensorium

ENCODER = "Encoder::encoder_embeddings_01"
EMBEDDING_DIM = 768


@functools.lru_cache(maxsize=1)
def worker_client() -> sensorium.Client:
    """This worker process's client, built from its environment on first use."""
    return sensorium.Client()


def embed_block(block: npt.NDArray[Any], model: str, per_channel: bool) -> npt.NDArray[np.float32]:
    """One partition: (n, channels, window) windows to (n, channels, 768) vectors."""
    return worker_client().embed_many(model, block, per_channel=per_channel)


def embed_partitioned(windows: Any, model: str = ENCODER, *, per_channel: bool = False) -> Any:
    """Lazily embeds a dask array of windows (N, channels, window), partitioned along N.

    Returns a dask array (N, channels, 768) float32 with the same partitions; ``.compute()`` on a
    ``dask.distributed`` client runs the partitions on its workers.
    """
    # A partition must hold whole windows: split along N only.
    windows = windows.rechunk({1: -1, 2: -1})
    return da.map_blocks(
        embed_block,
        windows,
        model,
        per_channel,
        dtype=np.float32,
        chunks=(windows.chunks[0], windows.chunks[1], (EMBEDDING_DIM,)),
    )


def example_windows(recordings: int = 4, length: int = 8192, channels: int = 4, window: int = 1024) -> npt.NDArray[Any]:
    """Windows of a few synthetic recordings, stacked: (N, channels, window)."""
    rng = np.random.default_rng(0)
    cut = [sensorium.windows(rng.normal(size=(length, channels)), window=window) for _ in range(recordings)]
    return np.concatenate(cut)


def start_local_emulator() -> tuple["subprocess.Popen[str]", dict[str, str]]:
    """A local emulator in its own process, reachable by every worker, and the two settings it
    prints (``SENSORIUM_BASE_URL``, ``SENSORIUM_API_KEY``)."""
    proc = subprocess.Popen([sys.executable, "-m", "sensorium.emulator"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    settings = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(2))
    return proc, settings


def main(n_workers: int = 2, partition: int = 8) -> npt.NDArray[np.float32]:
    from dask.distributed import Client as DaskClient
    from dask.distributed import LocalCluster

    emulator: Optional["subprocess.Popen[str]"] = None
    if not os.environ.get("SENSORIUM_BASE_URL"):
        emulator, settings = start_local_emulator()
        os.environ.update(settings)
    try:
        windows = da.from_array(example_windows(), chunks=(partition, -1, -1))
        # Worker processes inherit this environment, key included; on a real cluster, set the
        # two variables in the workers' environment instead.
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with DaskClient(cluster):
                vectors: npt.NDArray[np.float32] = embed_partitioned(windows).compute()
        print(f"embedded {vectors.shape[0]} windows on {n_workers} workers: {vectors.shape}")
        return vectors
    finally:
        if emulator is not None:
            emulator.terminate()
            emulator.wait()


if __name__ == "__main__":
    main()
