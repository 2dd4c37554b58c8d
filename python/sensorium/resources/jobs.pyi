# Written once in jobs.py for both clients; this stub spells the two return types.
from typing import Optional, Union

from .._endpoints import Resource
from ..pagination import AsyncPager, SyncPager
from ..types import BatchJob, FineTuningJob

__all__ = ["Jobs", "AsyncJobs"]

class Jobs(Resource):
    def list(self, *, status: Optional[str] = None,
             limit: Optional[int] = None) -> SyncPager[Union[BatchJob, FineTuningJob]]: ...

class AsyncJobs(Resource):
    def list(self, *, status: Optional[str] = None,
             limit: Optional[int] = None) -> AsyncPager[Union[BatchJob, FineTuningJob]]: ...
