"""``client.models``: the models your organization may use."""

from __future__ import annotations

from typing import Any, Optional

from .._arguments import one_of, string
from .._endpoints import ListRequest, Resource, query
from ..types import Model

__all__ = ["Models", "AsyncModels"]

SCOPES = ("platform", "org", "all")


class Models(Resource):
    """>>> [m.id for m in client.models.list(model_family="Encoder")]  # doctest: +SKIP
    ['Encoder::encoder_embeddings_01', ...]
    """

    def list(self, model_family: Optional[str] = None, scope: Optional[str] = None, search: Optional[str] = None,
             variant: Optional[str] = None) -> Any:
        """Iterates the models the organization may use. ``scope`` is platform, org or all; ``search``
        matches id, description, family and variant case-insensitively.

        >>> [m.id for m in client.models.list(search="encoder")]  # doctest: +SKIP
        ['Encoder::encoder_embeddings_01', ...]
        """
        params = query(model_family=string(model_family, "model_family"), scope=one_of(scope, SCOPES, "scope"),
                       search=string(search, "search"), variant=string(variant, "variant"))
        return self._list(ListRequest("/models", Model.from_dict, params))


class AsyncModels(Models):
    """``Models`` with ``async for``."""
