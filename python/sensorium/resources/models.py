"""``client.models``: the models your organization may use."""

from __future__ import annotations

from typing import Any, Optional

from .._endpoints import ListRequest, Resource, query
from ..errors import InvalidArgumentError
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
        matches id, description, family and variant case-insensitively."""
        if scope is not None and scope not in SCOPES:
            raise InvalidArgumentError(f"scope: is {scope!r}; it takes one of {', '.join(SCOPES)}", argument="scope")
        params = query(model_family=model_family, scope=scope, search=search, variant=variant)
        return self._list(ListRequest("/models", Model.from_dict, params))


class AsyncModels(Models):
    """``Models`` with ``async for``."""
