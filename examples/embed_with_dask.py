"""Embed a partitioned dataset of windows on a Dask cluster (``dask.distributed``).

Each partition (a block of windows) is embedded by one worker with ``embed_many``; the worker
builds its own ``sensorium.Client`` from its environment (``SENSORIUM_API_KEY``,
``SENSORIUM_BASE_URL``), once per worker process. A window that fails costs only its own row: every
partition's vectors are kept, and failed windows are named by their index in the whole array.
Nothing secret travels with the tasks: a client that does get pickled (captured in a task, say)
carries only its configuration, and takes the key from the worker's environment.

Run it as is to try it on a local cluster of two worker processes against a local emulator
started for the purpose; with ``SENSORIUM_BASE_URL`` and ``SENSORIUM_API_KEY`` set, it uses that
platform instead:

    python examples/embed_with_dask.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any, Optional

import dask.array as da
import numpy as np
import numpy.typing as npt
from dask.base import compute
from dask.delayed import delayed
from dask.distributed import get_worker

import sensorium
from sensorium.errors import EmbedManyError

ENCODER = "Encoder::encoder_embeddings_01"
EMBEDDING_DIM = 768

#: One partition's outcome: its vectors (NaN rows where a window failed), the failed windows and
#: those never sent (indices in the whole array), and the error that failed the first.
BlockResult = tuple[npt.NDArray[np.float32], list[int], list[int], Optional[BaseException]]


def worker_client() -> sensorium.Client:
    """This worker process's client, built from its environment on first use and kept on the
    worker. Not ``functools.lru_cache``: a cached function defined in a notebook or script
    (``__main__``) pickles by name, and workers, which never ran that code, cannot find it (the
    task waits forever); this function pickles by value, and the worker object is per process."""
    worker = get_worker()
    client: Optional[sensorium.Client] = getattr(worker, "sensorium_client", None)
    if client is None:
        client = sensorium.Client()  # SENSORIUM_API_KEY, SENSORIUM_BASE_URL of the worker
        setattr(worker, "sensorium_client", client)
    return client


def embed_block(block: npt.NDArray[Any], start: int, model: str, per_channel: bool) -> BlockResult:
    """One partition of windows ``start`` to ``start + n``: (n, channels, window) windows to
    (n, channels, 768) vectors, NaN rows for the windows that failed, and those windows (and the
    ones never sent) by their index in the whole array, with the error that failed the first."""
    try:
        return worker_client().embed_many(model, block, per_channel=per_channel), [], [], None
    except EmbedManyError as e:
        # Keep the partition's good vectors: one bad window must not cost the others.
        return e.partial, [start + i for i in e.failed], [start + i for i in e.not_sent], e.__cause__


def embed_partitioned(windows: Any, model: str = ENCODER, *, per_channel: bool = False) -> npt.NDArray[np.float32]:
    """Embeds a dask array of windows (N, channels, window), partitioned along N, on the workers
    of the current ``dask.distributed`` client: (N, channels, 768) float32, in order.

    As ``embed_many`` does on one machine, failed windows cost only their own rows: every
    partition finishes, then ``EmbedManyError`` names the first failed window by its index in
    ``windows``, with ``partial`` (every vector computed, NaN rows for the failed windows),
    ``failed`` and ``not_sent`` (indices in ``windows``) and the first failure as ``__cause__``.
    """
    # A partition must hold whole windows: split along N only.
    windows = windows.rechunk({1: -1, 2: -1})
    starts = np.cumsum((0,) + windows.chunks[0][:-1])
    tasks = [delayed(embed_block)(block, int(start), model, per_channel)
             for block, start in zip(windows.to_delayed().ravel(), starts)]
    parts: tuple[BlockResult, ...] = compute(*tasks)
    vectors = np.concatenate([part[0] for part in parts])
    failed = [i for part in parts for i in part[1]]
    if not failed:
        return vectors
    cause = next(part[3] for part in parts if part[1])
    # The cause names the window by its index in its partition ("windows[2]: holds a NaN"): the
    # message names it once, by its index in `windows`.
    reason = re.sub(r"^windows\[\d+\]: ", "", str(cause))
    raise EmbedManyError(
        f"{len(failed)} of {len(vectors)} windows failed, the first windows[{failed[0]}]: {reason}. The others are in "
        ".partial (NaN rows for the failed ones, listed in .failed).",
        partial=vectors,
        failed=failed,
        not_sent=[i for part in parts for i in part[2]],
    ) from cause


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
                vectors = embed_partitioned(windows)
        print(f"embedded {vectors.shape[0]} windows on {n_workers} workers: {vectors.shape}")
        return vectors
    finally:
        if emulator is not None:
            emulator.terminate()
            emulator.wait()


if __name__ == "__main__":
    main()
