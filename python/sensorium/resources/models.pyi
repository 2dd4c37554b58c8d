# Written once in models.py for both clients; this stub spells the two return types.
from typing import Optional

from .._endpoints import Resource
from ..pagination import AsyncPager, SyncPager
from ..types import Model

__all__ = ["Models", "AsyncModels"]

SCOPES: tuple[str, ...]

class Models(Resource):
    def list(self, model_family: Optional[str] = None, scope: Optional[str] = None, search: Optional[str] = None,
             variant: Optional[str] = None) -> SyncPager[Model]: ...

class AsyncModels(Resource):
    def list(self, model_family: Optional[str] = None, scope: Optional[str] = None, search: Optional[str] = None,
             variant: Optional[str] = None) -> AsyncPager[Model]: ...
