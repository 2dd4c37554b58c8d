"""``client.models``: the models your organization may use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..pagination import AsyncPager, Page, SyncPager
from ..types import Model

if TYPE_CHECKING:
    from .._options import HasCore

__all__ = ["Models", "AsyncModels"]


def _page(raw: dict[str, Any]) -> Page[Model]:
    return Page.from_raw(raw, Model.from_dict)


class Models:
    """>>> [m.id for m in client.models.list(model_family="OmegaEncoder")]  # doctest: +SKIP
    ['OmegaEncoder::omega_embeddings_1_4', ...]
    """

    def __init__(self, client: HasCore) -> None:
        self._client = client

    def list(
        self,
        model_family: str | None = None,
        scope: str | None = None,
        search: str | None = None,
        variant: str | None = None,
    ) -> SyncPager[Model]:
        """Iterates the models the organization may use. ``model_family`` filters by family (the
        emulator takes the spec's ``Reasoner``/``Encoder`` and the live ``Newton``/``OmegaEncoder``
        alike); each record's ``model_family`` is its id's own prefix. ``scope`` is platform, org or all; ``search``
        matches id, description, family and variant case-insensitively."""

        def fetch(cursor: str | None) -> Page[Model]:
            return _page(self._client._core.list_models(model_family, scope, search, variant, cursor, False))

        return SyncPager(fetch)


class AsyncModels:
    """``Models`` with ``async for``."""

    def __init__(self, client: HasCore) -> None:
        self._client = client

    def list(
        self,
        model_family: str | None = None,
        scope: str | None = None,
        search: str | None = None,
        variant: str | None = None,
    ) -> AsyncPager[Model]:
        """See :meth:`Models.list`."""

        async def fetch(cursor: str | None) -> Page[Model]:
            return _page(await self._client._core.list_models(model_family, scope, search, variant, cursor, True))

        return AsyncPager(fetch)
