"""``client.jobs``: every job of the organization, batch and fine-tuning alike."""

from __future__ import annotations

from typing import Any, Optional, Union

from .._arguments import limit as page_size
from .._arguments import string
from .._endpoints import ListRequest, Resource, query
from ..types import BatchJob, FineTuningJob

__all__ = ["Jobs", "AsyncJobs"]


def _job(raw: Any) -> Union[BatchJob, FineTuningJob]:
    """A fine-tuning job says so (``object``, ``ftj_`` ids); anything else is a batch job."""
    is_fine_tuning = isinstance(raw, dict) and (raw.get("object") == "fine_tuning.job" or
                                                str(raw.get("id", "")).startswith("ftj_"))
    return FineTuningJob.from_dict(raw) if is_fine_tuning else BatchJob.from_dict(raw)


class Jobs(Resource):
    """>>> [j.id for j in client.jobs.list(status="PAUSED")]  # doctest: +SKIP"""

    def list(self, *, status: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """Every job of the organization, page by page; ``status`` filters (``PAUSED`` and
        ``INTERRUPTED`` included). Each is a ``BatchJob`` or a ``FineTuningJob``.

        >>> [(j.id, j.status) for j in client.jobs.list(status="PAUSED")]  # doctest: +SKIP
        [('ftj_...', 'PAUSED')]
        """
        return self._list(ListRequest("/jobs", _job, query(status=string(status, "status"), limit=page_size(limit))))


class AsyncJobs(Jobs):
    """``Jobs`` with ``async for``."""
