"""``client.agents``: blueprints, bundles, runs (instances), evaluations, optimizations and the
node registry. Every method is written once and serves ``Client`` (results) and ``AsyncClient``
(awaitables, async pagers); ``agents.pyi`` spells the two signatures.

Example::

    bundle = client.agents.bundles.create("osm", name="Line 3")
    run = client.agents.bundles.run(bundle.id, client.files.upload("line3.csv"))
    agent = client.agents.instances.wait(run.id, timeout=600)
    paths = client.agents.instances.download_results(agent.id, "results/")
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

import yaml

from .._downloads import download_listed
from .._arguments import StrPath, flag, folder, mapping, one_of, string, text
from .._arguments import limit as page_size
from .._endpoints import (
    CollectList, ListRequest, Namespace, Operation, Request, Resource, Runner, awaited, cursor_walk, query, segment,
)
from .._progress import ProgressCallback
from .._waiting import canceling, ended_in, wait_for, with_status
from ..errors import APIResponseValidationError, InvalidArgumentError, _answer_text, _json_kind
from ..types import (
    Agent,
    AgentEvent,
    AgentLog,
    AgentResult,
    Blueprint,
    BlueprintSummary,
    Bundle,
    Eval,
    FileRecord,
    Node,
    Optimization,
    Trial,
)

__all__ = ["Agents", "AsyncAgents"]

R = TypeVar("R")
SourceItem = Union[str, FileRecord, Mapping[str, Any]]
Source = Union[SourceItem, Sequence[SourceItem]]

BUNDLE_SORTS = ("created_at", "last_run_at", "name")
ORDERS = ("asc", "desc")
# The Agent state table's states, and the spelling some deployments use for canceled.
AGENT_STATUSES = ("running", "paused", "completed", "failed", "canceled", "cancelled")
# `bundles.run(mode=...)`: the one mode the platform names besides the default run.
RUN_MODES = ("serving",)
# Page sizes of the agents lists (the spec's blueprint list: 1 to 1000).
MAX_LIMIT = 1000


def _limit(value: Any) -> Optional[int]:
    return page_size(value, most=MAX_LIMIT)


def _models(models: Any) -> Optional[dict[str, str]]:
    """The 1.1.10 slot map: slot name -> registry tag, both strings (the platform refuses a
    malformed slot reference when the bundle is created)."""
    slots = mapping(models, "models")
    if slots is None:
        return None
    for slot, tag in slots.items():
        if not isinstance(slot, str) or not slot:
            raise InvalidArgumentError(f"models: slot names are non-empty strings, got {slot!r:.40}", argument="models")
        if not isinstance(tag, str) or not tag.strip():
            raise InvalidArgumentError(f"models: slot {slot!r} maps to {tag!r:.40}; it takes a registry tag (a "
                                       "string)", argument="models")
    return slots


def data_ref(item: SourceItem, argument: str = "source") -> dict[str, Any]:
    """A data ref ``{type, id, format}`` from a file id, a ``FileRecord`` or a ref dict. A file's
    format is its extension (``line3.csv`` -> ``csv``).

    >>> data_ref("line3.csv")
    {'type': 'file', 'id': 'line3.csv', 'format': 'csv'}
    """
    if isinstance(item, FileRecord):
        item = item.file_id
    if isinstance(item, str):
        if not item:
            raise InvalidArgumentError(f"{argument}: a file id is empty", argument=argument)
        suffix = PurePosixPath(item).suffix.lower().lstrip(".")
        ref: dict[str, Any] = {"type": "file", "id": item}
        if suffix:
            ref["format"] = suffix
        return ref
    if isinstance(item, Mapping):
        if not isinstance(item.get("type"), str) or not isinstance(item.get("id"), str):
            raise InvalidArgumentError(f"{argument}: a data ref needs 'type' and 'id' strings, got {dict(item)!r:.120}",
                                       argument=argument)
        return dict(item)
    raise TypeError(f"{argument}: expected a file id, a FileRecord or a data ref dict, got {type(item).__name__}")


def _refs(items: Any, argument: str) -> list[dict[str, Any]]:
    if isinstance(items, (str, FileRecord, Mapping)):
        items = [items]
    if isinstance(items, (bytes, bytearray)) or not isinstance(items, Iterable):
        raise TypeError(f"{argument}: expected file ids, FileRecords or data refs, got {type(items).__name__}")
    return [data_ref(item, argument) for item in items]


def _examples(examples: Any, argument: str) -> list[dict[str, Any]]:
    """Examples as the platform takes them: a whole example dict (with ``inputs``) as is, anything
    else (file id, ``FileRecord``, data ref) as an example with that one input."""
    if examples is None:
        raise InvalidArgumentError(f"{argument}: is required", argument=argument)
    if isinstance(examples, (str, FileRecord)) or (isinstance(examples, Mapping)):
        examples = [examples]
    out = []
    for example in examples:
        if isinstance(example, Mapping) and "inputs" in example:
            whole = dict(example)
            whole["inputs"] = _refs(whole["inputs"], argument)
            if not whole["inputs"]:
                raise InvalidArgumentError(f"{argument}: an example needs at least one input", argument=argument)
            out.append(whole)
        else:
            out.append({"inputs": [data_ref(example, argument)]})
    if not out:
        raise InvalidArgumentError(f"{argument}: needs at least one example", argument=argument)
    return out


def _yaml_tree(text: str, argument: str) -> dict[str, Any]:
    """The YAML text's tree with every scalar left as its text. Only what every YAML reading
    agrees on is checked here (the syntax, a mapping at the top): what a plain scalar means is
    the platform's to say. PyYAML reads YAML 1.1, where ``yes`` is true, ``0755`` octal and
    ``2024-01-01`` a date; the platform reads them as YAML 1.2 does (text, and so on)."""
    try:
        tree = yaml.load(text, Loader=yaml.BaseLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InvalidArgumentError(f"{argument}: is not valid YAML{where}: {e.problem or e}", argument=argument) from None
    except yaml.YAMLError as e:
        raise InvalidArgumentError(f"{argument}: is not valid YAML: {e}", argument=argument) from None
    if not isinstance(tree, dict):
        raise InvalidArgumentError(f"{argument}: must describe a blueprint document (a mapping), got "
                                   f"{'a list' if isinstance(tree, list) else 'a single value'}", argument=argument)
    return tree


_YAML_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
# YAML 1.1's booleans; YAML 1.2's (true/false in three casings) are among them.
_YAML_BOOLS = frozenset(word for w in ("y", "yes", "n", "no", "true", "false", "on", "off")
                        for word in (w, w.capitalize(), w.upper()))


def _yaml_numbers(text: str) -> list[float]:
    """Every number a plain scalar can mean in YAML 1.1 or 1.2 (``0755`` is 755 or octal 493,
    ``1:30`` is 90 in 1.1, ...)."""
    body = text.replace("_", "")
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    numbers: list[float] = []
    for read in (lambda: int(body, 0), lambda: int(body, 10), lambda: int(body, 8), lambda: float(body)):
        try:
            numbers.append(sign * read())
        except ValueError:
            pass
    if ":" in body:
        try:
            total = 0.0
            for part in body.split(":"):
                total = total * 60 + float(part)
            numbers.append(sign * total)
        except ValueError:
            pass
    return numbers


def _differs(value: Any, tree: Any) -> bool:
    """Whether ``value`` (a document's JSON) and ``tree`` (YAML, scalars as text) differ under
    every reading of the YAML's scalars: a check that refuses only certain disagreements, so it
    never refuses what the platform would take."""
    if isinstance(tree, dict):
        if not isinstance(value, Mapping) or {str(k) for k in value} != set(tree):
            return True
        return any(_differs(v, tree[str(k)]) for k, v in value.items())
    if isinstance(tree, list):
        if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence) or len(value) != len(tree):
            return True
        return any(_differs(v, t) for v, t in zip(value, tree))
    if isinstance(value, (Mapping, list, tuple)):
        return True
    if isinstance(value, str):
        return value != tree
    if value is None:
        return tree not in _YAML_NULLS
    if isinstance(value, bool):
        return tree not in _YAML_BOOLS
    if isinstance(value, (int, float)):
        return value not in _yaml_numbers(tree)
    return False


def blueprint_documents(document: Any, yaml_document: Optional[str]) -> dict[str, Any]:
    """The ``document``/``yaml_document`` fields of a blueprint create: a dict or YAML text for
    ``document``, YAML for ``yaml_document``. YAML is sent as given (the platform reads it, as
    the spec allows ``yaml_document`` alone), never replaced by a local reading of it; with a
    dict too, the two are checked to describe the same blueprint before sending."""
    argument = "yaml_document"
    if isinstance(document, str):
        if yaml_document is not None and yaml_document != document:
            raise InvalidArgumentError("document: given as YAML text and yaml_document differs; pass one",
                                       argument="document")
        yaml_document, document, argument = document, None, "document"
    if document is not None and not isinstance(document, Mapping):
        raise TypeError(f"document: expected a dict or YAML text, got {type(document).__name__}")
    if yaml_document is not None and not isinstance(yaml_document, str):
        raise TypeError(f"yaml_document: expected YAML text (str), got {type(yaml_document).__name__}")
    if document is None and yaml_document is None:
        raise InvalidArgumentError("document: a blueprint needs a document (a dict or YAML text) or yaml_document",
                                   argument="document")
    fields: dict[str, Any] = {}
    if document is not None:
        fields["document"] = dict(document)
    if yaml_document is not None:
        tree = _yaml_tree(yaml_document, argument)
        if document is not None:
            given = {str(k): v for k, v in document.items()}
            differing = sorted(k for k in set(given) | set(tree) if k != "blueprint_id" and (
                k not in tree or k not in given or _differs(given[k], tree[k])))
            if differing:
                raise InvalidArgumentError(
                    f"document: document and yaml_document describe different blueprints (they differ in "
                    f"{', '.join(differing)})", argument="document")
        fields["yaml_document"] = yaml_document
    return fields


class Blueprints(Resource):
    """Blueprints: graph definitions registered under a key, with versions."""

    def create(self, blueprint_key: str, *, document: Any = None, yaml_document: Optional[str] = None,
               canonical: bool = False, replacement_of: Optional[str] = None) -> Any:
        """Registers a blueprint (the admin role; ``canonical=True`` needs super-admin). ``document``
        is a dict or YAML text; with ``yaml_document`` too, both must describe the same blueprint.
        YAML goes out as given and the platform reads it (as YAML 1.2: ``yes`` stays text).
        ``replacement_of`` (the ``blp_`` id of the key's active version) makes a new version.

        >>> client.agents.blueprints.create("my-osm", document=doc)  # doctest: +SKIP
        """
        segment(text(blueprint_key, "blueprint_key", required=True), "blueprint_key")
        body: dict[str, Any] = {"blueprint_key": blueprint_key, **blueprint_documents(document, yaml_document)}
        if flag(canonical, "canonical"):
            body["canonical"] = True
        if text(replacement_of, "replacement_of") is not None:
            body["replacement_of"] = replacement_of
        return self._call(Request("POST", "/agents/blueprints", body=body, surface="agents", cast=Blueprint.from_dict))

    def list(self, *, key: Optional[str] = None, bundles_count: Optional[bool] = None, limit: Optional[int] = None,
             after: Optional[str] = None, before: Optional[str] = None) -> Any:
        """Every blueprint visible to you, newest first, fetched page by page; ``after`` starts
        below (older than) a blueprint id, ``before`` lists those newer than it, oldest first
        (from the id outwards).

        >>> [b.blueprint_key for b in client.agents.blueprints.list()]  # doctest: +SKIP
        """
        direction, start = cursor_walk(after, before)
        params = query(key=text(key, "key"), bundles_count=flag(bundles_count, "bundles_count"), limit=_limit(limit))
        return self._list(ListRequest("/agents/blueprints", BlueprintSummary.from_dict, params, "agents",
                                      cursor_param=direction, start=start))

    def get(self, reference: str, *, yaml: bool = False) -> Any:
        """One blueprint by ``blp_`` id or key, with its document (and YAML when ``yaml=True``).

        >>> bp = client.agents.blueprints.get("osm", yaml=True)  # doctest: +SKIP
        >>> bp.blueprint_key, bp.yaml_document is not None  # doctest: +SKIP
        ('osm', True)
        """
        path = f"/agents/blueprints/{segment(reference, 'reference')}"
        return self._call(Request("GET", path, query(yaml=flag(yaml, "yaml") or None), surface="agents",
                                  cast=Blueprint.from_dict))

    def delete(self, reference: str) -> Any:
        """Deletes a blueprint.

        >>> client.agents.blueprints.delete("my-osm")  # doctest: +SKIP
        """
        return self._call(Request("DELETE", f"/agents/blueprints/{segment(reference, 'reference')}", surface="agents"))

    def versions(self, reference: str) -> Any:
        """Every version that has held the key, newest first (replaced ones with their archived keys).

        >>> [(v.id, v.is_active) for v in client.agents.blueprints.versions("my-osm")]  # doctest: +SKIP
        [('blp_...', True), ('blp_...', False)]
        """
        path = f"/agents/blueprints/{segment(reference, 'reference')}/versions"
        return self._list(ListRequest(path, BlueprintSummary.from_dict, surface="agents"))


class Bundles(Resource):
    """Bundles: a pinned blueprint with value and model overrides."""

    def create(self, blueprint: str, *, name: str, description: Optional[str] = None,
               models: Optional[Mapping[str, Any]] = None, values: Optional[Mapping[str, Any]] = None,
               artifacts: Optional[Mapping[str, Any]] = None, model: Any = None) -> Any:
        """Creates a bundle of ``blueprint`` (a key or ``blp_`` id). ``models`` maps slot names to
        registry tags (release 1.1.10 on; the single ``model`` field is gone).

        >>> client.agents.bundles.create("osm", name="Line 3", values={"window_size": 64})  # doctest: +SKIP
        """
        if model is not None:
            raise InvalidArgumentError(
                "model: bundles no longer take a single model (removed in release 1.1.10); pass models={slot: tag}",
                argument="model")
        segment(blueprint, "blueprint")
        text(name, "name", required=True)
        body = query(blueprint=blueprint, name=name, description=string(description, "description"),
                     models=_models(models), values=mapping(values, "values"), artifacts=mapping(artifacts, "artifacts"))
        return self._call(Request("POST", "/agents/bundles", body=body, surface="agents", cast=Bundle.from_dict))

    def list(self, *, sort: Optional[str] = None, order: Optional[str] = None, query: Optional[str] = None,
             blueprint_id: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """Every bundle visible to you (canonical Quick Starts included); ``query`` matches name and id.

        >>> [b.name for b in client.agents.bundles.list(query="Quick Start")]  # doctest: +SKIP
        """
        params = {k: v for k, v in dict(sort=one_of(sort, BUNDLE_SORTS, "sort"), order=one_of(order, ORDERS, "order"),
                                        query=string(query, "query"), blueprint_id=string(blueprint_id, "blueprint_id"),
                                        limit=_limit(limit)).items() if v is not None}
        return self._list(ListRequest("/agents/bundles", Bundle.from_dict, params, "agents"))

    def get(self, bundle_id: str, *, include_latest_runs: bool = False) -> Any:
        """One bundle; ``include_latest_runs`` adds its five newest runs.

        >>> b = client.agents.bundles.get(bundle.id, include_latest_runs=True)  # doctest: +SKIP
        >>> [r.status for r in b.latest_runs or []]  # doctest: +SKIP
        ['completed']
        """
        path = f"/agents/bundles/{segment(bundle_id, 'bundle_id')}"
        params = query(include_latest_runs=flag(include_latest_runs, "include_latest_runs") or None)
        return self._call(Request("GET", path, params, surface="agents", cast=Bundle.from_dict))

    def delete(self, bundle_id: str) -> Any:
        """Deletes a bundle.

        >>> client.agents.bundles.delete(bundle.id)  # doctest: +SKIP
        """
        return self._call(Request("DELETE", f"/agents/bundles/{segment(bundle_id, 'bundle_id')}", surface="agents"))

    def run(self, bundle_id: str, source: Any = None, *, sink: Optional[SourceItem] = None,
            mode: Optional[str] = None) -> Any:
        """Starts an agent: one run of the bundle over ``source`` (file ids, ``FileRecord``s or data
        refs; several files share the input port). Without ``sink`` each input gets its own result
        file; with it, all output goes to that one file. ``mode="serving"`` starts a serving agent
        (no source) that answers ``instances.query``.

        >>> run = client.agents.bundles.run(bundle.id, ["a.csv", "b.csv"])  # doctest: +SKIP
        """
        path = f"/agents/bundles/{segment(bundle_id, 'bundle_id')}/run"
        if one_of(mode, RUN_MODES, "mode") == "serving":
            connectors: dict[str, Any] = {"source": _refs(source, "source") if source is not None else []}
        else:
            if source is None:
                raise InvalidArgumentError("source: a run needs at least one input (file id, FileRecord or data ref)",
                                           argument="source")
            connectors = {"source": _refs(source, "source")}
            if not connectors["source"]:
                raise InvalidArgumentError("source: a run needs at least one input", argument="source")
        if sink is not None:
            connectors["sink"] = data_ref(sink, "sink")
        body = query(connectors=connectors, mode=mode)
        return self._call(Request("POST", path, body=body, surface="agents", cast=Agent.from_dict,
                                  renamed={'connectors["source"]': "source", 'connectors["sink"]': "sink"}))


class Instances(Resource):
    """Agents: one run of a bundle each."""

    def list(self, *, status: Optional[str] = None, query: Optional[str] = None, bundle_id: Optional[str] = None,
             blueprint_id: Optional[str] = None, limit: Optional[int] = None) -> Any:
        """Every run of your organization, newest first; filters combine. ``status`` is one of the
        agent states (``running``, ``paused``, ``completed``, ``failed``, ``canceled``).

        >>> [a.id for a in client.agents.instances.list(status="running", bundle_id=bundle.id)]  # doctest: +SKIP
        ['agt_...']
        """
        params = {k: v for k, v in dict(status=one_of(status, AGENT_STATUSES, "status"), query=string(query, "query"),
                                        bundle_id=string(bundle_id, "bundle_id"),
                                        blueprint_id=string(blueprint_id, "blueprint_id"),
                                        limit=_limit(limit)).items() if v is not None}
        return self._list(ListRequest("/agents/instances", Agent.from_dict, params, "agents"))

    def _path(self, agent_id: str, tail: str = "") -> str:
        return f"/agents/instances/{segment(agent_id, 'agent_id')}{tail}"

    def get(self, agent_id: str) -> Any:
        """One run's record.

        >>> client.agents.instances.get(run.id).status  # doctest: +SKIP
        'running'
        """
        return self._call(Request("GET", self._path(agent_id), surface="agents", cast=Agent.from_dict))

    def delete(self, agent_id: str) -> Any:
        """Deletes a finished run (a running or paused one must be canceled first: 409).

        >>> client.agents.instances.delete(agent.id)  # doctest: +SKIP
        """
        return self._call(Request("DELETE", self._path(agent_id), surface="agents"))

    def pause(self, agent_id: str) -> Any:
        """Pauses a running agent (409 when it is not running).

        >>> client.agents.instances.pause(run.id).status  # doctest: +SKIP
        'paused'
        """
        return self._call(Request("POST", self._path(agent_id, "/pause"), surface="agents", cast=Agent.from_dict))

    def resume(self, agent_id: str) -> Any:
        """Resumes a paused agent.

        >>> client.agents.instances.resume(run.id).status  # doctest: +SKIP
        'running'
        """
        return self._call(Request("POST", self._path(agent_id, "/resume"), surface="agents", cast=Agent.from_dict))

    def cancel(self, agent_id: str, *, ok_if_terminal: bool = False) -> Any:
        """Cancels a running or paused agent. The platform answers 409 when it has already ended;
        with ``ok_if_terminal=True`` that is success and the agent's record is returned, with the
        terminal status its logs show when the record still lags behind (an unknown id is still
        ``NotFoundError``). A 409 that follows this call's own lost answer is not raised when the
        agent is canceled: the lost attempt was the cancel.

        >>> client.agents.instances.cancel(run.id, ok_if_terminal=True).status  # doctest: +SKIP
        'canceled'
        """
        segment(agent_id, "agent_id")
        return self._drive(self._cancel(agent_id, bool(flag(ok_if_terminal, "ok_if_terminal"))))

    def _cancel(self, agent_id: str, ok_if_terminal: bool) -> Operation[Agent]:
        # Safe to repeat (as every cancel here): a repeat meets 409 already-terminal, settled by
        # the record.
        return (yield from canceling(
            Request("POST", self._path(agent_id, "/cancel"), surface="agents", cast=Agent.from_dict, repeatable=True),
            lambda: Request("GET", self._path(agent_id), surface="agents", cast=Agent.from_dict), ok_if_terminal,
            ended=lambda current: self._ended(agent_id, current)))

    def _ended(self, agent_id: str, current: Agent) -> Operation[Agent]:
        """``current`` with the terminal status its logs show when the record still lags (after a
        409 says the run has ended)."""
        if current.is_terminal:
            return current
        logs = yield self._recent_logs(agent_id)
        ended = ended_in(logs)
        return with_status(current, ended, logs) if ended is not None else current

    def events(self, agent_id: str) -> Any:
        """The run's events, page by page.

        >>> for event in client.agents.instances.events(run.id):  # doctest: +SKIP
        ...     print(event.created_at, event.level, event.message)
        """
        return self._list(ListRequest(self._path(agent_id, "/events"), AgentEvent.from_dict, surface="agents"))

    def logs(self, agent_id: str, *, level: Optional[str] = None, search: Optional[str] = None,
             limit: Optional[int] = None) -> Any:
        """The run's log lines, newest first; ``level`` and ``search`` narrow them.

        >>> [log.event_type for log in client.agents.instances.logs(agent.id)]  # doctest: +SKIP
        ['job.completed', ..., 'job.admitted']
        """
        params = {k: v for k, v in dict(level=string(level, "level"), search=string(search, "search"),
                                        limit=_limit(limit)).items() if v is not None}
        return self._list(ListRequest(self._path(agent_id, "/logs"), AgentLog.from_dict, params, "agents"))

    def results(self, agent_id: str) -> Any:
        """The run's output files (listed once it has ended).

        >>> [(r.filename, r.ref) for r in client.agents.instances.results(agent.id)]  # doctest: +SKIP
        [('agt_...__output_line3.csv', '/files/download/agt_...__output_line3.csv')]
        """
        return self._list(ListRequest(self._path(agent_id, "/results"), AgentResult.from_dict, surface="agents"))

    def query(self, agent_id: str, data: Any) -> Any:
        """Asks a serving agent (``bundles.run(..., mode="serving")``). ``data`` is a dict sent as
        is, or a numeric window shaped as ``embed`` takes it. Returns the answer's JSON.

        >>> client.agents.instances.query(agent.id, {"text": "status?"})  # doctest: +SKIP
        """
        if isinstance(data, Mapping):
            body: dict[str, Any] = dict(data)
        else:
            from .._numeric import as_channels

            channels = as_channels(data, "data")
            if 0 in channels.shape:  # as `[]` is refused, and as `embed` refuses it
                raise InvalidArgumentError(f"data: is empty (shape {channels.shape}); a window needs at least one value "
                                           "per channel", argument="data")
            body = {"type": "data.numeric_array", "event_data": {"contents": channels.reshape(
                (1, -1) if channels.ndim == 1 else channels.shape).tolist()}}
        # A repeated query changes nothing, so a lost answer is asked for again.
        return self._call(Request("POST", self._path(agent_id, "/query"), body=body, surface="agents", repeatable=True,
                                  renamed={"": "data"}))

    def _recent_logs(self, agent_id: str) -> Request[list[AgentLog]]:
        # One page of the newest lines is enough: the terminal event is the newest row.
        # Read as the pager reads a page: `data: null` (or none) is no lines. An answer of any
        # other shape is an APIResponseValidationError, which `wait_for` takes as a logs feed that
        # failed (the round reads the record instead).
        def cast(raw: Any) -> list[AgentLog]:
            items = raw.get("data") if isinstance(raw, dict) else raw
            if items is None and isinstance(raw, dict):
                items = []
            if not isinstance(items, list):
                got = f"one whose data is {_json_kind(items)}" if isinstance(raw, dict) else _json_kind(raw)
                raise APIResponseValidationError(f"expected a page of log lines {{data: [...]}}, got {got}",
                                                 body=_answer_text(raw))
            return [AgentLog.from_dict(item) for item in items]

        return Request("GET", self._path(agent_id, "/logs"), {"limit": 20}, surface="agents", cast=cast)

    def wait(self, agent_id: str, *, timeout: Optional[float] = None, progress: bool = False) -> Any:
        """Waits until the run ends and returns its final ``Agent``. Polls with backoff; Ctrl-C
        interrupts it. "Ended" is read from the status (``canceled`` and ``cancelled`` alike) and
        from the terminal events in the logs, because the status is known to lag (a logs feed
        that fails leaves the wait to the status). A failed run raises ``AgentRunError`` with the
        agent, its error and its last log lines; when the logs show the failure before the record
        does, the record is read again for up to 10 s, and if it still lags the error is the
        failure's log line. ``timeout`` raises ``WaitTimeoutError``. A status poll that fails with
        a retryable error (5xx, 429, no connection) once the client's retries are spent is logged
        as a warning and made again while ``timeout`` allows (without one, until five minutes of
        nothing but failed polls); any other error (400, 401, 404...) is raised at once.

        >>> agent = client.agents.instances.wait(run.id, timeout=600, progress=True)  # doctest: +SKIP
        """
        segment(agent_id, "agent_id")
        return self._drive(wait_for(lambda: Request("GET", self._path(agent_id), surface="agents",
                                                    cast=Agent.from_dict),
                                    lambda: self._recent_logs(agent_id), timeout, progress, f"agent {agent_id}"))

    def download_results(self, agent_id: str, directory: StrPath, *,
                         concurrency: Optional[int] = None, on_progress: Optional[ProgressCallback] = None,
                         progress: bool = False) -> Any:
        """Downloads every result file of a run into ``directory`` (created when missing), each
        under its ``filename``, ``concurrency`` at a time (16 by default), each atomic like
        ``files.download``. Relative ``/files/download/...`` refs and presigned URLs alike; expired
        presigned URLs are listed afresh. Returns the paths, in listing order. Byte progress as in
        ``files.download``. Files that fail for good cost only themselves: the first failure is
        raised once the rest are written, of its own class and a ``sensorium.errors.DownloadError``
        too, with ``written`` and ``failed``, and a symbolic link in ``directory`` under a listed
        name is replaced, never written through (as ``batch.jobs.download_outputs``).

        >>> client.agents.instances.download_results(run.id, "out/")  # doctest: +SKIP
        [PosixPath('out/agt_..._output_line3.csv')]
        """
        listing = ListRequest(self._path(agent_id, "/results"), AgentResult.from_dict, surface="agents")
        # The listing is on the agents surface, but a relative ref (`/files/download/<name>`) is
        # a files path, under the API's base URL: on the version-less agents mount the agents
        # base has no `/v0.5` and the file is not there.
        return self._drive(download_listed(listing, folder(directory), surface="api",
                                           concurrency=concurrency, on_progress=on_progress, progress=progress))


class Evals(Resource):
    """Evaluations of a blueprint over labelled examples."""

    def create(self, blueprint_id: str, examples: Any, *, name: Optional[str] = None, primary: Optional[str] = None,
               targets: Any = None, emit_predictions: Optional[bool] = None) -> Any:
        """Starts an evaluation. ``examples`` are file ids, ``FileRecord``s, data refs or whole
        example dicts (``{"inputs": [...], "ground_truth": ...}``). A CSV's labels can come from a
        column named after the target (``state``).

        >>> ev = client.agents.evals.create("osm", ["labelled.csv"], name="line 3 check")  # doctest: +SKIP
        >>> ev.status  # doctest: +SKIP
        'running'
        """
        segment(blueprint_id, "blueprint_id")
        body = query(blueprint_id=blueprint_id, examples=_examples(examples, "examples"), name=string(name, "name"),
                     primary=string(primary, "primary"), targets=targets,
                     emit_predictions=flag(emit_predictions, "emit_predictions"))
        return self._call(Request("POST", "/agents/evals", body=body, surface="agents", cast=Eval.from_dict))

    def list(self, *, limit: Optional[int] = None) -> Any:
        """Every evaluation, page by page.

        >>> [(e.name, e.status) for e in client.agents.evals.list()]  # doctest: +SKIP
        [('line 3 check', 'completed')]
        """
        return self._list(ListRequest("/agents/evals", Eval.from_dict, query(limit=_limit(limit)), "agents"))

    def _path(self, eval_id: str, tail: str = "") -> str:
        return f"/agents/evals/{segment(eval_id, 'eval_id')}{tail}"

    def get(self, eval_id: str) -> Any:
        """One evaluation.

        >>> client.agents.evals.get(ev.id).status  # doctest: +SKIP
        'completed'
        """
        return self._call(Request("GET", self._path(eval_id), surface="agents", cast=Eval.from_dict))

    def delete(self, eval_id: str) -> Any:
        """Deletes an evaluation.

        >>> client.agents.evals.delete(ev.id)  # doctest: +SKIP
        """
        return self._call(Request("DELETE", self._path(eval_id), surface="agents"))

    def cancel(self, eval_id: str) -> Any:
        """Cancels a running evaluation (409 once it has ended, unless that answers this call's own
        cancel, whose first answer was lost).

        >>> client.agents.evals.cancel(ev.id).status  # doctest: +SKIP
        'canceled'
        """
        segment(eval_id, "eval_id")
        return self._drive(canceling(
            Request("POST", self._path(eval_id, "/cancel"), surface="agents", cast=Eval.from_dict, repeatable=True),
            lambda: Request("GET", self._path(eval_id), surface="agents", cast=Eval.from_dict), False))

    def examples(self, eval_id: str) -> Any:
        """The evaluation's examples (with their results once done), page by page, as dicts.

        >>> for example in client.agents.evals.examples(ev.id):  # doctest: +SKIP
        ...     print(example)
        """
        return self._list(ListRequest(self._path(eval_id, "/examples"), dict, surface="agents"))

    def wait(self, eval_id: str, *, timeout: Optional[float] = None, progress: bool = False) -> Any:
        """Waits until the evaluation ends; returns the final ``Eval`` (``AgentRunError`` if failed).
        Failing polls are made again as ``instances.wait`` says.

        >>> ev = client.agents.evals.wait(ev.id, timeout=600)  # doctest: +SKIP
        >>> ev.metrics_report["targets"]["state"]["class_names"]  # doctest: +SKIP
        ['idle', ...]
        """
        segment(eval_id, "eval_id")
        return self._drive(wait_for(lambda: Request("GET", self._path(eval_id), surface="agents", cast=Eval.from_dict),
                                    None, timeout, progress, f"evaluation {eval_id}"))


class Optimizations(Resource):
    """Optimizations: searches over a blueprint's values, trial by trial."""

    def create(self, blueprint_id: str, *, objective: Any, validation_examples: Any, max_trials: int,
               training_examples: Any = None, calibration_examples: Any = None, search_space: Any = None,
               overrides: Any = None, constraints: Any = None, name: Optional[str] = None) -> Any:
        """Starts an optimization of ``blueprint_id`` for ``objective`` within ``max_trials`` trials.

        >>> opt = client.agents.optimizations.create("osm", objective="macro_f1",  # doctest: +SKIP
        ...                                          validation_examples=["labelled.csv"], max_trials=4)
        """
        segment(blueprint_id, "blueprint_id")
        if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
            raise InvalidArgumentError(f"max_trials: is {max_trials!r}; it takes a whole number from 1",
                                       argument="max_trials")
        if objective is None:
            raise InvalidArgumentError("objective: is required (what the trials are scored by, e.g. a metric name)",
                                       argument="objective")
        if not isinstance(objective, (str, Mapping)):
            raise TypeError(f"objective: expected a metric name (str) or an objective dict, got "
                            f"{type(objective).__name__}")
        body = query(
            blueprint_id=blueprint_id, objective=objective,
            validation_examples=_examples(validation_examples, "validation_examples"),
            training_examples=None if training_examples is None else _examples(training_examples, "training_examples"),
            calibration_examples=None if calibration_examples is None
            else _examples(calibration_examples, "calibration_examples"),
            budget={"max_trials": max_trials}, search_space=search_space, overrides=overrides, constraints=constraints,
            name=string(name, "name"))
        return self._call(Request("POST", "/agents/optimizations", body=body, surface="agents",
                                  cast=Optimization.from_dict))

    def list(self, *, limit: Optional[int] = None) -> Any:
        """Every optimization, page by page.

        >>> [(o.id, o.status) for o in client.agents.optimizations.list(limit=20)]  # doctest: +SKIP
        [('opt_...', 'running')]
        """
        return self._list(ListRequest("/agents/optimizations", Optimization.from_dict, query(limit=_limit(limit)),
                                      "agents"))

    def _path(self, optimization_id: str, tail: str = "") -> str:
        return f"/agents/optimizations/{segment(optimization_id, 'optimization_id')}{tail}"

    def get(self, optimization_id: str) -> Any:
        """One optimization, with its ``progress``.

        >>> opt = client.agents.optimizations.get(opt.id)  # doctest: +SKIP
        >>> opt.status, opt.progress  # doctest: +SKIP
        ('running', {...})
        """
        return self._call(Request("GET", self._path(optimization_id), surface="agents", cast=Optimization.from_dict))

    def delete(self, optimization_id: str) -> Any:
        """Deletes an optimization.

        >>> client.agents.optimizations.delete(opt.id)  # doctest: +SKIP
        """
        return self._call(Request("DELETE", self._path(optimization_id), surface="agents"))

    def cancel(self, optimization_id: str) -> Any:
        """Cancels a running optimization (409 once it has ended, unless that answers this call's
        own cancel, whose first answer was lost).

        >>> client.agents.optimizations.cancel(opt.id).status  # doctest: +SKIP
        'canceled'
        """
        segment(optimization_id, "optimization_id")
        return self._drive(canceling(
            Request("POST", self._path(optimization_id, "/cancel"), surface="agents", cast=Optimization.from_dict,
                    repeatable=True),
            lambda: Request("GET", self._path(optimization_id), surface="agents", cast=Optimization.from_dict), False))

    def trials(self, optimization_id: str) -> Any:
        """The optimization's trials, page by page.

        >>> best = max(client.agents.optimizations.trials(opt.id),  # doctest: +SKIP
        ...            key=lambda t: t.objective_value if t.objective_value is not None else float("-inf"))
        """
        return self._list(ListRequest(self._path(optimization_id, "/trials"), Trial.from_dict, surface="agents"))

    def promote(self, optimization_id: str, trial_id: str, *, blueprint_key: Optional[str] = None,
                name: Optional[str] = None, description: Optional[str] = None) -> Any:
        """Makes a completed trial's values and fitted models a blueprint of your own; returns that
        ``Blueprint``. By default the platform keys it after the searched blueprint and the trial.

        >>> bp = client.agents.optimizations.promote(opt.id, best.id)  # doctest: +SKIP
        """
        path = self._path(optimization_id, f"/trials/{segment(trial_id, 'trial_id')}/promote")
        body = query(blueprint_key=blueprint_key, name=name, description=description)
        return self._call(Request("POST", path, body=body, surface="agents", cast=Blueprint.from_dict))

    def wait(self, optimization_id: str, *, timeout: Optional[float] = None, progress: bool = False) -> Any:
        """Waits until the optimization ends; returns the final ``Optimization`` (``AgentRunError``
        if it failed). Failing polls are made again as ``instances.wait`` says.

        >>> client.agents.optimizations.wait(opt.id, timeout=1800).status  # doctest: +SKIP
        'completed'
        """
        segment(optimization_id, "optimization_id")
        return self._drive(wait_for(lambda: Request("GET", self._path(optimization_id), surface="agents",
                                                    cast=Optimization.from_dict),
                                    None, timeout, progress, f"optimization {optimization_id}"))


class Nodes(Resource):
    """The node registry: the source, sink and processing node types blueprints use."""

    def registry(self) -> Any:
        """Every node type of the registry.

        >>> [n.key for n in client.agents.nodes.registry()]  # doctest: +SKIP
        ['MultiModalSource', 'RecordsSink', ...]
        """
        return self._drive(self._registry())

    def _registry(self) -> Operation[list[Node]]:
        nodes: list[Node] = yield CollectList(ListRequest("/agents/nodes/registry", Node.from_dict, surface="agents"))
        return nodes


# The resources of `async_client.agents`: the same methods, which return awaitables and async
# pagers there (the runner decides); the classes exist so that the stubs' names are real.
@awaited("create", "get", "delete")
class AsyncBlueprints(Blueprints):
    """``async_client.agents.blueprints``."""


@awaited("create", "get", "delete", "run")
class AsyncBundles(Bundles):
    """``async_client.agents.bundles``."""


@awaited("get", "delete", "pause", "resume", "cancel", "query", "wait", "download_results")
class AsyncInstances(Instances):
    """``async_client.agents.instances``."""


@awaited("create", "get", "delete", "cancel", "wait")
class AsyncEvals(Evals):
    """``async_client.agents.evals``."""


@awaited("create", "get", "delete", "cancel", "promote", "wait")
class AsyncOptimizations(Optimizations):
    """``async_client.agents.optimizations``."""


@awaited("registry")
class AsyncNodes(Nodes):
    """``async_client.agents.nodes``."""


class Agents(Namespace):
    """``client.agents``: ``blueprints``, ``bundles``, ``instances``, ``evals``, ``optimizations``,
    ``nodes``."""

    def __init__(self, runner: Runner) -> None:
        asynchronous = runner.asynchronous
        self.blueprints = (AsyncBlueprints if asynchronous else Blueprints)(runner)
        self.bundles = (AsyncBundles if asynchronous else Bundles)(runner)
        self.instances = (AsyncInstances if asynchronous else Instances)(runner)
        self.evals = (AsyncEvals if asynchronous else Evals)(runner)
        self.optimizations = (AsyncOptimizations if asynchronous else Optimizations)(runner)
        self.nodes = (AsyncNodes if asynchronous else Nodes)(runner)


class AsyncAgents(Agents):
    """``async_client.agents``: the same surface with awaitables and async pagers."""
