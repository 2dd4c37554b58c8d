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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Where each public name lives, loaded when first used: pytest loads the plugin
# (`sensorium.pytest_plugin`, and with it this package) in every project of the environment, and
# the native extension, numpy and the rest would double the start-up of suites that never use it.
_SOURCES = {
    "Client": "._client", "AsyncClient": "._client", "QueryResult": ".types", "Embeddings": ".types",
    "FileRecord": ".types", "Model": ".types", "Page": ".pagination", "SyncPager": ".pagination",
    "AsyncPager": ".pagination", "windows": "._windows", "__version__": "._core",
}
_SUBMODULES = frozenset({"errors", "events", "fine_tuning", "types"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f".{name}", __name__)
    elif name in _SOURCES:
        value = getattr(importlib.import_module(_SOURCES[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
