"""Typed records returned by the client.

Records keep every field the platform sent: known ones are attributes, unknown ones stay in
``extra`` and in ``to_dict()``, so a newer platform never breaks an older client.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypedDict, TypeVar

from ._core import Embeddings, NumericEvent, QueryResult

__all__ = ["QueryResult", "Embeddings", "NumericEvent", "FileRecord", "Model", "QueryParams"]


R = TypeVar("R", bound="_Record")


@dataclass(frozen=True)
class _Record:
    """A record whose known fields are attributes; everything else stays in ``extra``."""

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The record as the platform sent it (unknown fields included, absent ones left out)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out = {k: v for k, v in out.items() if v is not None}
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class FileRecord(_Record):
    """A file of your organization.

    ``file_id`` is the file's name and the handle every other call takes (including
    ``file_ids`` in a query); ``file_uid`` is the platform's internal id.

    >>> rec = client.files.upload("notes.txt")  # doctest: +SKIP
    >>> rec.file_id  # doctest: +SKIP
    'notes.txt'
    """

    file_id: str
    file_uid: str | None = None
    file_type: str | None = None
    num_bytes: int | None = None
    created_at: Any = None
    is_valid: bool | None = None


@dataclass(frozen=True)
class Model(_Record):
    """A model the organization may use; pass its ``id`` as ``model=``."""

    id: str
    model_family: str | None = None
    variant: str | None = None
    description: str | None = None
    scope: str | None = None


class QueryParams(TypedDict, total=False):
    """The optional request fields of ``client.query`` (the spec's table). Only the fields you
    pass are sent; the platform applies its defaults to the rest."""

    system_prompt: str
    instruction_prompt: str
    response_start_prompt: str
    template_name: str
    file_ids: list[str]
    events: list[Any]
    max_new_tokens: int
    max_frames: int
    temperature: float
    do_sample: bool
    repetition_penalty: float
    top_p: float
    top_k: int
    presence_penalty: float
    normalize_input: bool
    multi_image: bool
    render: bool
    query_metadata: dict[str, Any]
    max_query_size_mb: float
    max_wait_time_sec: float
    sanitize_response: bool
