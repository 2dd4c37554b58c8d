"""Typed records returned by the client.

Records keep every field the platform sent: known ones are attributes, unknown ones stay in
``extra`` and in ``to_dict()``, so a newer platform never breaks an older client.
"""

from __future__ import annotations

import copy
import reprlib
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterable, Optional, Sequence, TypedDict, TypeVar

from ._core import Embeddings, NumericEvent, QueryResult, StreamEvent
from .errors import APIResponseValidationError, _answer_text, _json_kind

__all__ = [
    "QueryResult", "Embeddings", "NumericEvent", "FileRecord", "Model", "QueryParams",
    "BlueprintSummary", "Blueprint", "Bundle", "RunSummary", "Agent", "AgentResult", "AgentLog", "AgentEvent",
    "Eval", "Optimization", "Trial", "Node", "FineTuningJob", "FineTuningEvent", "Checkpoint", "BatchJob",
    "BatchEvent", "BatchOutput", "Pipeline", "Lens", "LensSession", "StreamEvent",
]


R = TypeVar("R", bound="_Record")


_FIELD_NAMES: dict[type, tuple[frozenset[str], frozenset[str], tuple[str, ...]]] = {}


def _field_names(cls: type) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    """A record class's field names, the required ones among them (no default), and the required
    ones typed ``str`` (the ids and keys), computed once per class (lists build thousands of
    records)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        known = [f for f in fields(cls) if f.name not in ("extra", "_raw")]
        required = [f for f in known if f.default is MISSING and f.default_factory is MISSING]
        # `from __future__ import annotations` leaves each type as its source text.
        texts = tuple(f.name for f in required if f.type in ("str", str))
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in known), frozenset(f.name for f in required), texts
    return names


def _a(name: str) -> str:
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"


def _wrong_field(record: str, name: str, wanted: str, value: Any, answer: Any) -> APIResponseValidationError:
    """The error for a record whose field ``name`` is not ``wanted`` (worded as a missing field's
    is), keeping the whole ``answer``."""
    got = "an empty string" if value == "" else _json_kind(value) + ("" if value is None else f" ({value!r:.80})")
    return APIResponseValidationError(f"expected {_a(record)} record with {name!r} {wanted}, got {got} there",
                                      body=_answer_text(answer))


def _frozen(value: Any) -> Any:
    """``value`` in a hashable form that is equal wherever ``value`` is: a dict as the frozenset of
    its items, a list or tuple as a tuple, a set as a frozenset (recursively). A value that
    cannot be hashed otherwise counts only by its type, which equal values of one type share."""
    if isinstance(value, dict):
        return frozenset((_frozen(k), _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_frozen(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return type(value).__qualname__
    return value


@dataclass(frozen=True)
class _Record:
    """A record whose known fields are attributes; everything else stays in ``extra``.

    A missing optional field is ``None``; an unknown status or enum string is kept as the string
    received; ``to_dict()`` gives the JSON exactly as received."""

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)
    # Not an init field: `dataclasses.replace(record, status=...)` makes a record of its own
    # values, whose `to_dict()` must say them, not what the platform sent for the original.
    _raw: Optional[dict[str, Any]] = field(default=None, init=False, repr=False, compare=False)
    # Fields holding records of their own: name -> builder.
    _nested: ClassVar[dict[str, Callable[[Any], Any]]] = {}

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        if not isinstance(data, dict):
            raise APIResponseValidationError(
                f"expected {_a(cls.__name__)} record (a JSON object), got {type(data).__name__}", body=_answer_text(data)
            )
        names, required, texts = _field_names(cls)
        missing = sorted(required.difference(data))
        if missing:
            # Not the constructor's bare TypeError: the answer is what is wrong, and it is kept.
            fields_given = ", ".join(sorted(map(str, data))[:20]) or "none"
            raise APIResponseValidationError(
                f"expected {_a(cls.__name__)} record with {', '.join(map(repr, missing))}, got an object without "
                f"{'it' if len(missing) == 1 else 'them'} (fields: {fields_given})", body=_answer_text(data))
        for name in texts:
            # An id (or key) that is null, a number or empty names nothing: taken, the record's
            # next call would refuse it as if the caller had passed it.
            value = data[name]
            if not isinstance(value, str) or not value:
                raise _wrong_field(cls.__name__, name, "a non-empty string", value, data)
        known = {k: v for k, v in data.items() if k in names}
        for name, build in cls._nested.items():
            if isinstance(known.get(name), list):
                known[name] = [build(item) if isinstance(item, dict) else item for item in known[name]]
        # The fields share the answer's nested dicts and lists; `_raw` keeps a copy of its own, so
        # changing `record.metadata` in place does not change what `to_dict()` says was received.
        # Flat records (most of a list) skip the copy.
        raw = copy.deepcopy(data) if any(isinstance(v, (dict, list)) for v in data.values()) else data
        record = cls(**known, extra={k: v for k, v in data.items() if k not in names})
        object.__setattr__(record, "_raw", raw)  # frozen
        return record

    def __hash__(self) -> int:
        # The dataclass hash of the field tuple fails on the dict and list fields (and on
        # `extra`): this one hashes a frozen copy of the same fields `__eq__` compares, so equal
        # records hash equal. Computed on each call rather than cached: the dicts can be changed
        # in place, and a cached hash would then disagree with `__eq__` (and str hashes differ
        # between processes, so a cache would also be wrong in a pickled copy).
        return hash((type(self).__qualname__, *(_frozen(getattr(self, f.name)) for f in fields(self) if f.compare)))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        # The dataclass repr would lead with `extra={}`, the one field most records leave empty:
        # the record's own fields come first, and `extra` only when the platform sent more.
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr and f.name != "extra"]
        if self.extra:
            shown.append(f"extra={self.extra!r}")
        return f"{type(self).__qualname__}({', '.join(shown)})"

    def to_dict(self) -> dict[str, Any]:
        """The record as the platform sent it (unknown fields included); for a record built by
        hand or by ``dataclasses.replace``, its fields as the platform would send them."""
        if self._raw is not None:
            return copy.deepcopy(self._raw)
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "_raw")}
        out = {k: _plain(v) for k, v in out.items() if v is not None}
        out.update(self.extra)
        return out


def _plain(value: Any) -> Any:
    """A field's value as JSON holds it: records (alone or in a list) as their dicts."""
    if isinstance(value, _Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


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


@dataclass(frozen=True)
class BlueprintSummary(_Record):
    """A blueprint as lists show it (no document). ``bundles_count`` only when asked for."""

    id: str
    blueprint_key: Optional[str] = None
    name: Optional[str] = None
    description: Optional[str] = None
    is_canonical: Optional[bool] = None
    is_active: Optional[bool] = None
    created_at: Optional[str] = None
    bundles_count: Optional[int] = None


@dataclass(frozen=True)
class Blueprint(BlueprintSummary):
    """A blueprint: a graph definition registered under ``blueprint_key``, with versions.

    >>> bp = client.agents.blueprints.get("osm")          # doctest: +SKIP
    >>> bp.document["connectors"]["source"]["key"]        # doctest: +SKIP
    'MultiModalSource'
    """

    document: Optional[dict[str, Any]] = None
    yaml_document: Optional[str] = None


@dataclass(frozen=True)
class RunSummary(_Record):
    """One of a bundle's ``latest_runs`` (newest first)."""

    id: str
    status: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    job_id: Optional[str] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Bundle(_Record):
    """A pinned blueprint plus value and model overrides; ``run`` it to start an agent.

    >>> b = client.agents.bundles.create("osm", name="Line 3 monitor")  # doctest: +SKIP
    >>> b.status                                                       # doctest: +SKIP
    'ready'
    """

    id: str
    name: Optional[str] = None
    description: Optional[str] = None
    blueprint_id: Optional[str] = None
    values: Optional[dict[str, Any]] = None
    models: Optional[dict[str, Any]] = None
    artifacts: Optional[dict[str, Any]] = None
    status: Optional[str] = None
    is_canonical: Optional[bool] = None
    created_at: Optional[str] = None
    org_id: Optional[str] = None
    model: Optional[str] = None
    latest_runs: Optional[list[RunSummary]] = None

    _nested: ClassVar[dict[str, Callable[[Any], Any]]] = {"latest_runs": RunSummary.from_dict}


@dataclass(frozen=True)
class Agent(_Record):
    """One run of a bundle. ``status`` is ``running``, ``paused``, ``completed``, ``failed`` or
    ``canceled`` (some deployments spell it ``cancelled``; :attr:`is_terminal` takes both).

    >>> agent = client.agents.instances.wait(run.id)  # doctest: +SKIP
    >>> agent.status                                  # doctest: +SKIP
    'completed'
    """

    id: str
    name: Optional[str] = None
    org_id: Optional[str] = None
    bundle_id: Optional[str] = None
    blueprint: Optional[str] = None
    blueprint_id: Optional[str] = None
    status: Optional[str] = None
    created_at: Optional[str] = None
    connectors: Optional[dict[str, Any]] = None
    job_id: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    error: Optional[str] = None
    mode: Optional[str] = None

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended (completed, failed, canceled or cancelled). A ``status`` that
        is no string raises ``APIResponseValidationError``."""
        return record_status(self).lower() in TERMINAL_STATUSES


# The terminal words of agents, evaluations and optimizations, both spellings of canceled.
TERMINAL_STATUSES = frozenset({"completed", "failed", "canceled", "cancelled"})


def record_status(record: Any) -> str:
    """A run's or job's ``status`` as it came, ``""`` when it has none (not known yet: no end).
    Any word is taken (a newer platform's states are only not terminal), but a status of another
    type raises ``APIResponseValidationError`` naming the field and the record, with the record's
    JSON. A number is refused too, not read as its text: these statuses are words (the spec's
    enums), and ``3`` read as "3" would be a state no wait ends on, so the wait would poll until
    its timeout (or for ever) without a word of why. (A lens session's numbered states are
    another field, read by ``lens_session_status``.)"""
    status = getattr(record, "status", None)
    if status is None or isinstance(status, str):
        return status or ""
    answer = record.to_dict() if isinstance(record, _Record) else {"status": status}
    raise _wrong_field(type(record).__name__, "status", "a string", status, answer)


class _OutputFile:
    """``filename``, ``ref`` and ``num_bytes`` of a record whose ``data`` describes an output file.
    A ``data`` that is no JSON object, or a ``filename`` or ``ref`` that is no string, raises
    ``APIResponseValidationError`` naming the field, with the record's JSON: a name or a URL of
    another type would otherwise fail far from here, as a bare TypeError."""

    data: Optional[dict[str, Any]]

    def _data_field(self, name: str) -> Any:
        data = self.data
        if data is None or isinstance(data, dict):
            return (data or {}).get(name)
        raise self._wrong("data", "an object", data)

    def _data_text(self, name: str) -> Optional[str]:
        value = self._data_field(name)
        if value is None or isinstance(value, str):
            return value
        raise self._wrong(f"data.{name}", "a string", value)

    def _wrong(self, name: str, wanted: str, value: Any) -> APIResponseValidationError:
        answer = self.to_dict() if isinstance(self, _Record) else {"data": self.data}
        return _wrong_field(type(self).__name__, name, wanted, value, answer)

    @property
    def filename(self) -> Optional[str]:
        return self._data_text("filename")

    @property
    def ref(self) -> Optional[str]:
        return self._data_text("ref")

    @property
    def num_bytes(self) -> Optional[int]:
        size = self._data_field("num_bytes")
        # Only a usable size counts. It sizes the progress bar, and it tells a body sent without a
        # length that stopped short from a whole one (the only use of it for the bytes).
        return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


@dataclass(frozen=True)
class AgentResult(_OutputFile, _Record):
    """One output of a run: ``data`` holds ``filename``, ``num_bytes``, ``ref`` (a
    ``/files/download/...`` path or a presigned URL), ``file_extension`` and ``expires_at``."""

    id: str
    port_name: Optional[str] = None
    data: Optional[dict[str, Any]] = None
    created_at: Optional[str] = None



@dataclass(frozen=True)
class AgentLog(_Record):
    """A log line of a run (newest first); ``event_type`` such as ``job.started``,
    ``job.completed``, ``job.failed``, ``job.canceled``."""

    id: Optional[str] = None
    created_at: Optional[str] = None
    level: Optional[str] = None
    event_type: Optional[str] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class AgentEvent(_Record):
    """An event of a run."""

    level: Optional[str] = None
    created_at: Optional[str] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class Eval(_Record):
    """An evaluation of a blueprint over labelled examples. Once ``completed``,
    ``metrics_report["targets"]["state"]`` holds ``class_names`` and ``confusion_matrix``."""

    id: str
    name: Optional[str] = None
    blueprint_id: Optional[str] = None
    status: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    error: Optional[str] = None
    primary: Optional[str] = None
    targets: Any = None
    metrics_report: Optional[dict[str, Any]] = None


@dataclass(frozen=True)
class Optimization(_Record):
    """A search over a blueprint's values; its trials can be promoted to a blueprint version."""

    id: str
    name: Optional[str] = None
    blueprint_id: Optional[str] = None
    status: Optional[str] = None
    objective: Any = None
    budget: Optional[dict[str, Any]] = None
    progress: Any = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Trial(_Record):
    """One trial of an optimization."""

    id: str
    trial_number: Optional[int] = None
    status: Optional[str] = None
    objective_value: Optional[float] = None
    metrics_report: Optional[dict[str, Any]] = None
    trial_values: Optional[dict[str, Any]] = None
    created_at: Optional[str] = None


@dataclass(frozen=True)
class Node(_Record):
    """A node type of the registry (``MultiModalSource``, ``RecordsSink``, ...)."""

    key: str
    kind: Optional[str] = None
    name: Optional[str] = None
    description: Optional[str] = None


@dataclass(frozen=True)
class FineTuningJob(_Record):
    """A fine-tuning job (``/v0.6``). ``status`` is ``PENDING``, ``ADMITTED``, ``RUNNING``,
    ``COMPLETED`` (with ``outcome`` ``SUCCESS``, ``PARTIAL`` or ``FAILED``), ``FAILED``,
    ``PREEMPTED``, ``CANCELLED``, ``PAUSED`` or ``INTERRUPTED``; some deployments say ``SUCCEEDED``
    for ``COMPLETED``, and :attr:`is_finished` takes both."""

    id: str
    object: Optional[str] = None
    name: Optional[str] = None
    model: Optional[str] = None
    created_at: Optional[int] = None
    org_id: Optional[str] = None
    status: Optional[str] = None
    outcome: Optional[str] = None
    training_files: Optional[list[Any]] = None
    validation_files: Optional[list[Any]] = None
    errors: Optional[list[Any]] = None
    checkpoint_id: Optional[str] = None
    fine_tuned_model: Optional[str] = None
    finished_at: Optional[int] = None
    seed: Optional[int] = None
    user_provided_suffix: Optional[str] = None

    @property
    def is_finished(self) -> bool:
        """Whether the job no longer changes (``COMPLETED``, ``SUCCEEDED``, ``FAILED``,
        ``CANCELLED``, any case). A ``status`` that is no string raises
        ``APIResponseValidationError``."""
        return record_status(self).upper() in FINISHED_JOB_STATUSES


# Statuses after which a fine-tuning or batch job no longer changes.
FINISHED_JOB_STATUSES = frozenset({"COMPLETED", "SUCCEEDED", "FAILED", "CANCELLED", "CANCELED"})


@dataclass(frozen=True)
class FineTuningEvent(_Record):
    """A fine-tuning event or log line; ``id`` is its paging cursor."""

    id: Optional[str] = None
    created_at: Optional[int] = None
    level: Optional[str] = None
    type: Optional[str] = None
    index: Optional[int] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class Checkpoint(_Record):
    """A checkpoint of a fine-tuning job (``ckp_...``), with the step it was taken at and its metrics."""

    id: str
    step: Optional[int] = None
    metrics: Optional[dict[str, Any]] = None
    created_at: Any = None


@dataclass(frozen=True)
class BatchJob(_Record):
    """A batch job (``job_...``): ``status`` ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED`` or
    ``CANCELLED``; a ``COMPLETED`` job can hold per-input failures."""

    id: str
    name: Optional[str] = None
    pipeline_type: Optional[str] = None
    pipeline_key: Optional[str] = None
    pipeline_version: Optional[str] = None
    status: Optional[str] = None
    created_at: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    failed_at: Optional[str] = None


@dataclass(frozen=True)
class BatchEvent(_Record):
    """An event of a batch job: ``event_type`` such as ``inference.success`` or
    ``inference.failed``, ``level`` ``INFO``/``WARN``/``ERROR``/``SUCCESS``/``FAILED``."""

    id: Optional[int] = None
    event_type: Optional[str] = None
    level: Optional[str] = None
    message: Optional[str] = None
    payload: Optional[dict[str, Any]] = None
    input_id: Optional[str] = None
    index: Optional[int] = None
    created_at: Optional[str] = None


@dataclass(frozen=True)
class BatchOutput(_OutputFile, _Record):
    """An output file of a batch job; ``data`` holds ``ref`` (a presigned URL or a relative API
    path), ``filename`` and ``num_bytes``."""

    id: str
    data: Optional[dict[str, Any]] = None
    expires_at: Optional[str] = None



@dataclass(frozen=True)
class Pipeline(_Record):
    """A batch pipeline of the registry (``machine-state-classification``, ``activity-detection``)."""

    id: str
    key: Optional[str] = None
    name: Optional[str] = None
    version: Optional[str] = None
    description: Optional[str] = None


@dataclass(frozen=True)
class Lens(_Record):
    """A lens (legacy runtime): ``lens_id`` (``lns-...``), ``lens_status`` (``LENS_STATUS_MOUNTED``
    or ``LENS_STATUS_REGISTERED``) and its ``lens_config`` (``model_pipeline``, ``model_parameters``)."""

    lens_id: str
    lens_name: Optional[str] = None
    lens_status: Optional[str] = None
    lens_modifiable: Optional[bool] = None
    lens_config: Optional[dict[str, Any]] = None


# What a lens session's echoed key becomes: the record never holds it, so no repr, log line,
# pickle or to_dict() can show it (the caller has the key already).
REDACTED_KEY = "<redacted>"


@dataclass(frozen=True)
class LensSession(_Record):
    """A lens session (``lsn-...``, legacy runtime). ``session_status`` as the platform spells it
    (``LensSessionStatus.SESSION_STATUS_RUNNING`` or a bare number); ``status`` reads both.
    The key the platform echoes in ``api_key`` is replaced by ``"<redacted>"`` on arrival."""

    session_id: str
    lens_id: Optional[str] = None
    lens_name: Optional[str] = None
    org_id: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)
    session_status: Any = None
    session_endpoint: Optional[str] = None
    session_runner: Optional[str] = None
    node_tag: Optional[str] = None
    session_ttl_sec: Optional[int] = None
    lens_config: Optional[dict[str, Any]] = None
    input_data_stream_id: Optional[str] = None
    output_data_stream_id: Optional[str] = None
    registration_timestamp: Optional[float] = None
    last_event_timestamp: Optional[float] = None
    last_update_timestamp: Optional[float] = None
    session_start_timestamp: Optional[float] = None
    session_destroyed_timestamp: Optional[float] = None
    num_active_connections: Optional[int] = None
    num_updates: Optional[int] = None
    num_inputs: Optional[int] = None
    num_outputs: Optional[int] = None
    num_events: Optional[int] = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LensSession:
        if isinstance(data, dict) and data.get("api_key") is not None:
            data = {**data, "api_key": REDACTED_KEY}
        return super().from_dict(data)

    @property
    def status(self) -> str:
        """``registered``, ``running``, ``destroyed``, ``expired``, or the spelling received when
        it is none of those (the enum string and the bare numbers both read)."""
        return lens_session_status(self.session_status)


# Bare numbers the platform sends for session states (wire notes: "3" is running; the others are
# the emulator's numbering of the remaining states).
_STATUS_NUMBERS = {"1": "registered", "3": "running", "5": "destroyed", "6": "expired"}


def lens_session_status(value: Any) -> str:
    """A session status in one spelling: ``LensSessionStatus.SESSION_STATUS_RUNNING``,
    ``SESSION_STATUS_RUNNING``, ``3`` and ``"3"`` all read ``running``."""
    text = str(value).strip()
    if text in _STATUS_NUMBERS:
        return _STATUS_NUMBERS[text]
    word = text.rsplit(".", 1)[-1].removeprefix("SESSION_STATUS_").lower()
    return word if word in ("registered", "running", "destroyed", "expired", "failed") else text


# `@dataclass(frozen=True)` gives every record class a `__hash__` of its own (the field tuple's,
# which fails on dicts) and a `__repr__` that leads with `extra`; each gets `_Record`'s back.
def _record_classes(cls: type) -> list[type]:
    found = [cls]
    sub: type
    for sub in cls.__subclasses__():
        found += _record_classes(sub)
    return found


for _cls in _record_classes(_Record):
    setattr(_cls, "__hash__", _Record.__hash__)
    setattr(_cls, "__repr__", _Record.__repr__)


class QueryParams(TypedDict, total=False):
    """The optional request fields of ``client.query`` (the spec's table). Only the fields you
    pass are sent; the platform applies its defaults to the rest."""

    system_prompt: str
    instruction_prompt: str
    response_start_prompt: str
    template_name: str
    # One record, or names and records in any iterable (a list, a generator, a pager).
    file_ids: FileRecord | Iterable[str | FileRecord]
    events: Sequence[Any]
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
