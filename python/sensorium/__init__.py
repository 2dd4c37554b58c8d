"""sensorium: the Python SDK for the sensorium platform (reasoning models and numeric encoders).

Example::

    import numpy as np
    import sensorium

    client = sensorium.Client()                      # SENSORIUM_API_KEY, SENSORIUM_BASE_URL
    rec = client.files.upload("notes.txt")
    answer = client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise.", file_ids=[rec.file_id])
    print(answer.text)
    emb = client.embed("Encoder::encoder_embeddings_01", np.random.rand(3, 1024))
    print(emb.vectors.shape)                         # (3, 768)

For local work and tests, ``sensorium.testing.Emulator`` runs a local stand-in of the platform.
"""

from . import errors, events, fine_tuning, types
from ._client import AsyncClient, Client
from ._core import __version__
from ._windows import windows
from .pagination import AsyncPager, Page, SyncPager
from .types import Embeddings, FileRecord, Model, QueryResult

__all__ = [
    "Client",
    "AsyncClient",
    "QueryResult",
    "Embeddings",
    "FileRecord",
    "Model",
    "Page",
    "SyncPager",
    "AsyncPager",
    "errors",
    "events",
    "fine_tuning",
    "types",
    "windows",
    "__version__",
]
