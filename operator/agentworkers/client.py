"""A typed Python client for the worker lifecycle, and for the config a user reads beside it.

    from agentworkers.client import Client
    with Client.from_kubeconfig(namespace="team-a") as client:
        client.spawn("w1", WorkerSpec(agent="planner", initial_message="hello"), wait={"Running"})
        for event in client.events("w1", timeout=60):
            print(event.index, event.kind, event.summary)
        result = client.collect("w1", timeout=60)

Lifecycle (the seed's verbs): spawn, query, list, inspect, collect, kill, plus events (the
multiplexed event stream) and explain (the effective config and the layer behind each field).
Config: agents, revisions, profiles, profile, diff_revisions.

`AsyncClient` offers the same methods as coroutines (`events` as an async iterator); it runs
the blocking calls in threads, so the event loop stays free.

Errors are the seed's (UnknownWorker, WorkerNameConflict, CollectTimeout) as exception
classes; each carries the `reason` the operator uses for the same condition.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import math
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Coroutine,
    Generator,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from typing import Any, ClassVar, Concatenate, Literal, ParamSpec, TypeVar, cast

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from agentworkers import kube
from agentworkers.api import (
    GROUP,
    VERSION,
    AgentConfigRevisionSpec,
    AgentConfigSpec,
    FrozenProfile,
    FrozenProfileMap,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.api.agentconfig import AgentConfigStatus
from agentworkers.api.common import API_VERSION
from agentworkers.api.worker import (
    COLLECTED_ANNOTATION,
    SETTLED_PHASES,
    TERMINAL_PHASES,
    WorkerEvent,
)
from agentworkers.effective import AGENT, PROFILE, EffectiveConfig, resolve
from agentworkers.pods import EFFECTIVE_CONFIG_ENV
from agentworkers.revisions import revision_name
from agentworkers.spawning import BINDING_ANNOTATION, decode_binding
from agentworkers.storage import AGENT_LABEL
from agentworkers.virtualagent import Profile, VirtualAgentError

PLURAL = "workers"
DEFAULT_COLLECT_TIMEOUT = 300.0
# A watch is reopened at least this often, so a waiter can report progress and notice its
# deadline even when nothing changes.
HEARTBEAT_SECONDS = 10.0

Body = dict[str, Any]
P = ParamSpec("P")
R = TypeVar("R")
Progress = Callable[["WorkerInfo"], None]
Change = Literal["added", "removed", "changed", "unchanged"]


# --- errors --------------------------------------------------------------------------


class ClientError(Exception):
    """Base of everything this client raises on purpose."""

    reason: ClassVar[str] = "Error"


class NotFoundError(ClientError, LookupError):
    """No such object: a worker, an agent, a revision or a profile."""

    reason = "NotFound"


class WorkerError(ClientError):
    """Base of the lifecycle errors."""


class UnknownWorkerError(WorkerError, NotFoundError):
    """No worker by that name."""

    reason = "UnknownWorker"


class WorkerNameConflictError(WorkerError):
    """A live worker already has that name."""

    reason = "WorkerNameConflict"


class WaitTimeoutError(WorkerError, TimeoutError):
    """The worker did not reach the awaited phase within the timeout."""

    reason = "WaitTimeout"


class CollectTimeoutError(WaitTimeoutError):
    """The worker did not settle (idle, done, failed, killed) within the timeout."""

    reason = "CollectTimeout"


class WorkerFinishedError(WorkerError):
    """The run has ended; it takes no more queries."""

    reason = "WorkerFinished"


class ApiError(ClientError):
    """The API server refused the request (its message says why) or could not be reached."""

    reason = "ApiError"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConfigError(ClientError):
    """No usable kubeconfig (nor in-cluster service account)."""

    reason = "ConfigError"


def _server_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(error.reason or error)


def _translate(error: ApiException, not_found: ClientError | None = None) -> ClientError:
    message = _server_message(error)
    if error.status == 404 and not_found is not None:
        return not_found
    if WorkerFinishedError.reason in message:  # the admission webhook's refusal of a query
        return WorkerFinishedError(message)
    return ApiError(f"{error.status} {error.reason}: {message}", error.status)


# --- results -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerInfo:
    """A snapshot of one worker (the seed's WorkerInfo)."""

    name: str
    spec: WorkerSpec
    status: WorkerStatus
    created: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkerInfo:
        return cls(
            name=body["metadata"]["name"],
            spec=WorkerSpec.model_validate(body["spec"]),
            status=WorkerStatus.model_validate(body.get("status") or {}),
            created=body["metadata"].get("creationTimestamp", ""),
        )

    @property
    def phase(self) -> str:
        return self.status.phase or "Pending"

    @property
    def started(self) -> str:
        """When the run started; a worker not started yet counts from its creation."""
        return self.status.started_at or self.created


@dataclass(frozen=True)
class CollectResult:
    name: str
    phase: str
    output: str
    error: str


@dataclass(frozen=True)
class Inspection:
    """A worker and its events after a cursor."""

    worker: WorkerInfo
    events: tuple[WorkerEvent, ...]
    cursor: int  # pass as `since` next time
    missed: int  # events after the cursor that already left the bounded ring


@dataclass(frozen=True)
class EventRecord:
    """One event of one worker, as the multiplexed stream hands it out."""

    worker: str
    index: int
    kind: str
    time: str
    summary: str


@dataclass(frozen=True)
class ExplainedField:
    field: str
    value: Any
    layer: str  # agent, worker, profile, clamp or inherited


@dataclass(frozen=True)
class Explanation:
    worker: str
    agent: str
    profile: str | None
    config: str  # where the agent layer was read, e.g. AgentConfigRevision/planner-r1
    fields: tuple[ExplainedField, ...]
    # For a run below a virtual-profile run: whose bounds it inherits.
    inherits: str | None = None


@dataclass(frozen=True)
class RevisionInfo:
    name: str
    agent: str
    revision: int
    digest: str
    created: str
    active: bool
    profiles: int


@dataclass(frozen=True)
class ProfileSet:
    revision: RevisionInfo
    profiles: tuple[FrozenProfile, ...]


@dataclass(frozen=True)
class FieldChange:
    path: str
    before: Any
    after: Any


@dataclass(frozen=True)
class ProfileChange:
    key: str
    change: Change
    before_hash: str | None
    after_hash: str | None
    fields: tuple[FieldChange, ...]


@dataclass(frozen=True)
class ProfileDiff:
    agent: str
    before: RevisionInfo
    after: RevisionInfo
    changes: tuple[ProfileChange, ...]


# --- pure helpers --------------------------------------------------------------------


class EventCursor:
    """Which events were handed out: each (worker, index) once, in index order per worker.

    Keyed by uid, so a worker deleted and created again under its name starts afresh.
    The events of a worker only grow in index, so the highest seen is all there is to keep.
    """

    def __init__(self, since: int = 0) -> None:
        self.since = since
        self._seen: dict[str, int] = {}

    def advance(self, body: Mapping[str, Any]) -> list[EventRecord]:
        uid = body["metadata"].get("uid") or body["metadata"]["name"]
        last = self._seen.get(uid, self.since)
        events = WorkerStatus.model_validate(body.get("status") or {}).events
        fresh = sorted((e for e in events if e.index > last), key=lambda e: e.index)
        if fresh:
            self._seen[uid] = fresh[-1].index
        name = body["metadata"]["name"]
        return [EventRecord(name, e.index, e.kind, e.time, e.summary) for e in fresh]

    def forget(self, body: Mapping[str, Any]) -> None:
        self._seen.pop(body["metadata"].get("uid") or body["metadata"]["name"], None)


def inspection(info: WorkerInfo, since: int = 0) -> Inspection:
    events = tuple(
        sorted((e for e in info.status.events if e.index > since), key=lambda e: e.index)
    )
    cursor = max([since, info.status.event_index or 0, *(e.index for e in events)])
    missed = events[0].index - since - 1 if events else cursor - since
    return Inspection(info, events, cursor, max(missed, 0))


# Fields every run gets from its agent unless a profile says otherwise; `resolve` records
# the layer only of the fields a worker or profile can touch.
_UNSOURCED = {"profile": PROFILE, "output_schema": PROFILE}


def explain_fields(effective: EffectiveConfig) -> tuple[ExplainedField, ...]:
    """Each effective field (as spelt on the wire), its value and the layer that set it."""
    values = effective.model_dump(by_alias=True, mode="json")
    rows = []
    for name, info in EffectiveConfig.model_fields.items():
        if name in {"sources", "agent"}:
            continue
        layer = effective.sources.get(name, _UNSOURCED.get(name, AGENT))
        wire = info.alias or name
        rows.append(ExplainedField(wire, values[wire], layer))
    return tuple(rows)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return flat
    return {prefix: value}


def diff_profiles(before: FrozenProfileMap, after: FrozenProfileMap) -> tuple[ProfileChange, ...]:
    """Per key: added, removed, changed (with the changed fields) or unchanged."""
    old = {p.profile.key: p for p in before.profiles}
    new = {p.profile.key: p for p in after.profiles}
    changes = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        flat_a = _flatten(a.wire()) if a else {}
        flat_b = _flatten(b.wire()) if b else {}
        fields = tuple(
            FieldChange(path, flat_a.get(path), flat_b.get(path))
            for path in sorted(flat_a.keys() | flat_b.keys())
            if path != "hash" and flat_a.get(path) != flat_b.get(path)
        )
        change: Change = "changed" if fields else "unchanged"
        if a is None or b is None:
            change = "added" if a is None else "removed"
        changes.append(
            ProfileChange(key, change, a.hash if a else None, b.hash if b else None, fields)
        )
    return tuple(changes)


def revision_ref(agent: str, ref: str | int) -> str:
    """A revision by id (3, "3", "r3") or by name (planner-r3)."""
    text = str(ref)
    digits = text[1:] if text[:1] == "r" else text
    return revision_name(agent, int(digits)) if digits.isdigit() else text


# --- the client ----------------------------------------------------------------------


class Client:
    """Synchronous: every call blocks until the API server answered (or a wait ended)."""

    def __init__(
        self, api: kubernetes.client.ApiClient, namespace: str, *, owns_api: bool = False
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self._owns_api = owns_api

    @classmethod
    def from_kubeconfig(cls, namespace: str | None = None, kubeconfig: str | None = None) -> Client:
        """From the kubeconfig given, else KUBECONFIG, else (in a pod) its service account,
        else ~/.kube/config. The namespace defaults to the context's (the pod's)."""
        try:
            connection = kube.connect(kubeconfig)
        except kube.ConfigError as e:
            raise ConfigError(str(e)) from e
        return cls(connection.api, namespace or connection.namespace, owns_api=True)

    def close(self) -> None:
        if self._owns_api:
            self.api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------

    def _call(
        self,
        fn: Callable[..., Any],
        *args: Any,
        not_found: ClientError | None = None,
        **kwargs: Any,
    ) -> Body:
        """One API call, its refusals as this module's errors."""
        try:
            return cast(Body, fn(*args, **kwargs))
        except ApiException as e:
            raise _translate(e, not_found) from e
        except urllib3.exceptions.HTTPError as e:
            raise ApiError(f"cannot reach the API server: {e}") from e

    def _unknown(self, name: str) -> UnknownWorkerError:
        return UnknownWorkerError(f"unknown worker {name!r} in namespace {self.namespace}")

    def _get_object(self, plural: str, name: str, not_found: ClientError) -> Body:
        return self._call(
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            plural,
            name,
            not_found=not_found,
        )

    def _list(self, plural: str, **selectors: str) -> Body:
        return self._call(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            plural,
            **selectors,
        )

    def _get(self, name: str) -> Body:
        return self._get_object(PLURAL, name, self._unknown(name))

    def _patch(
        self, name: str, patch: Any, content_type: str = "application/merge-patch+json"
    ) -> Body:
        return self._call(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            patch,
            _content_type=content_type,
            not_found=self._unknown(name),
        )

    def _observe(
        self, name: str | None, deadline: float | None
    ) -> Iterator[tuple[str, Body | None]]:
        """Every change of one worker (or of all) from now on, without polling.

        Yields ("ADDED" | "MODIFIED" | "DELETED", body), ("SYNCED", None) after each listing
        and ("IDLE", None) after each quiet spell of at most HEARTBEAT_SECONDS. It lists,
        then watches from the listing's resourceVersion, so nothing falls in between; when
        a watch expires (410 Gone) it lists again, and what vanished meanwhile comes out
        DELETED. Ends at the deadline.
        """
        selector = f"metadata.name={name}" if name else ""
        known: dict[str, Body] = {}
        while True:
            listing = self._list(PLURAL, field_selector=selector)
            version = listing["metadata"]["resourceVersion"]
            current = {b["metadata"]["uid"]: b for b in listing.get("items", [])}
            for uid in known.keys() - current.keys():
                yield "DELETED", known.pop(uid)
            for uid, body in current.items():
                known[uid] = body
                yield "ADDED", body
            yield "SYNCED", None
            while True:
                spell = HEARTBEAT_SECONDS
                if deadline is not None:
                    spell = min(spell, deadline - time.monotonic())
                    if spell <= 0:
                        return
                watch = kubernetes.watch.Watch()
                try:
                    for event in watch.stream(
                        self.custom.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        self.namespace,
                        PLURAL,
                        field_selector=selector,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=max(1, math.ceil(spell)),
                        _request_timeout=spell + 30,
                    ):
                        body = event["object"]
                        version = body["metadata"]["resourceVersion"]
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "DELETED":
                            known.pop(body["metadata"]["uid"], None)
                        else:
                            known[body["metadata"]["uid"]] = body
                        yield event["type"], body
                except ApiException as e:
                    if e.status != 410:
                        raise _translate(e) from e
                    break  # expired: list again
                except urllib3.exceptions.HTTPError as e:
                    raise ApiError(f"the watch broke: {e}") from e
                finally:
                    watch.stop()
                yield "IDLE", None

    # --- lifecycle -------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        spec: WorkerSpec,
        labels: dict[str, str] | None = None,
        *,
        wait: Collection[str] | None = None,
        timeout: float = DEFAULT_COLLECT_TIMEOUT,
        progress: Progress | None = None,
    ) -> WorkerInfo:
        """Create the worker; with `wait`, return once it is in one of those phases (or ended)."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "Worker",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec.wire(),
        }
        try:
            created = self._call(
                self.custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                body,
            )
        except ApiError as e:
            if e.status == 409:
                raise WorkerNameConflictError(f"worker name {name!r} already in use") from e
            raise
        info = WorkerInfo.from_body(created)
        if wait:
            info = self.wait(name, frozenset(wait), timeout, progress)
        return info

    def get(self, name: str) -> WorkerInfo:
        return WorkerInfo.from_body(self._get(name))

    def list(self) -> list[WorkerInfo]:
        """Every worker, oldest first (start time, then name): a stable order to page through."""
        infos = [WorkerInfo.from_body(b) for b in self._list(PLURAL).get("items", [])]
        return sorted(infos, key=lambda w: (w.started, w.name))

    def query(self, name: str, message: str) -> WorkerInfo:
        """Append a message to spec.queries; the operator refuses one to a finished worker."""
        for _ in range(5):
            body = self._get(name)
            if (body.get("spec") or {}).get("queries"):
                # A JSON patch `add` at the end: concurrent queries all land.
                patch: Any = [{"op": "add", "path": "/spec/queries/-", "value": message}]
                return WorkerInfo.from_body(
                    self._patch(name, patch, content_type="application/json-patch+json")
                )
            # The first query creates the list: guard it, or a concurrent first query is lost.
            patch = {
                "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                "spec": {"queries": [message]},
            }
            try:
                return WorkerInfo.from_body(self._patch(name, patch))
            except ApiError as e:
                if e.status != 409:
                    raise
        raise ApiError(f"worker {name!r} kept changing; the query was not sent", 409)

    def inspect(self, name: str, since: int = 0) -> Inspection:
        """The worker and its recent events with index > since (from the status's ring)."""
        return inspection(self.get(name), since)

    def kill(self, name: str, reason: str = "", by: str = "") -> WorkerInfo:
        """Ask the operator to stop the run; the reason comes back on collect."""
        kill = {"reason": reason.strip() or "killed", "by": by}
        return WorkerInfo.from_body(self._patch(name, {"spec": {"kill": kill}}))

    def wait(
        self,
        name: str,
        phases: frozenset[str],
        timeout: float,
        progress: Progress | None = None,
    ) -> WorkerInfo:
        """Wait, on a watch (not by polling), until the worker is in one of `phases`.

        A run that has ended is returned too: it will not reach any other phase. `progress`
        is called with the worker on every change and after every quiet spell.
        """
        info: WorkerInfo | None = None
        for kind, body in self._observe(name, time.monotonic() + timeout):
            if kind == "DELETED" or (kind == "SYNCED" and info is None):
                raise self._unknown(name)
            if body is not None:
                info = WorkerInfo.from_body(body)
            if info is None:
                continue
            if progress is not None:
                progress(info)
            if info.phase in phases or info.phase in TERMINAL_PHASES:
                return info
        phase = info.phase if info else "Pending"
        raise WaitTimeoutError(f"worker {name!r} still {phase} after {timeout:g}s")

    def collect(
        self, name: str, timeout: float = DEFAULT_COLLECT_TIMEOUT, progress: Progress | None = None
    ) -> CollectResult:
        """Wait for idle/done/failed/killed, return output, phase and error, remove the worker.

        For a killed worker the error is the kill reason. The worker's pod, sandbox and
        children go with it (they are owned by it). A timeout removes nothing.
        """
        try:
            # A run asked to stop is not settled until it is Killed (or ended on its own).
            phases = TERMINAL_PHASES if self.get(name).spec.kill else SETTLED_PHASES
            info = self.wait(name, phases, timeout, progress)
        except WaitTimeoutError as e:
            raise CollectTimeoutError(str(e)) from None
        error = info.status.error or ""
        if info.phase == "Killed" and not error:
            error = info.spec.kill.reason if info.spec.kill else "killed"
        result = CollectResult(name, info.phase, info.status.output or "", error)

        # Marked first, so the operator does not take the deletion for a kill.
        self._patch(name, {"metadata": {"annotations": {COLLECTED_ANNOTATION: "true"}}})
        # Someone else removed it already: collected all the same.
        with contextlib.suppress(UnknownWorkerError):
            self._call(
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                propagation_policy="Background",
                not_found=self._unknown(name),
            )
        return result

    def events(
        self,
        name: str | None = None,
        *,
        follow: bool = True,
        since: int = 0,
        timeout: float | None = None,
    ) -> Generator[EventRecord, None, None]:
        """The events (index > since) of one worker or all, multiplexed from one watch.

        Each (worker, index) comes once, in index order per worker. Without `follow` it
        ends after what is there now; with it, when the one worker is deleted, or at the
        timeout (None: never).
        """
        cursor = EventCursor(since)
        deadline = None if timeout is None else time.monotonic() + timeout
        found = False
        for kind, body in self._observe(name, deadline):
            if kind == "SYNCED":
                if name and not found:
                    raise self._unknown(name)
                if not follow:
                    return
            elif kind == "DELETED" and body is not None:
                cursor.forget(body)
                if name:
                    return
            elif body is not None:
                found = True
                yield from cursor.advance(body)

    def explain(self, name: str) -> Explanation:
        """The worker's effective config, and which layer (agent, worker, profile, clamp,
        inherited) set each field.

        Once the run has its pod, this is what the operator decided and the pod runs
        with. Before, it is worked out the same way: the agent layer is the revision the
        run pinned (a profiled child's binding) or froze, else the live AgentConfig; a
        profiled child's profile is the sealed snapshot in its binding annotation.
        """
        body = self._get(name)
        info = WorkerInfo.from_body(body)
        spec = info.spec
        inherited = info.status.inherited
        inherits = (
            f"profile {inherited.profile!r} of worker {inherited.worker}" if inherited else None
        )
        profile: Profile | None = None
        pinned: str | None = None
        if spec.profile:
            annotation = (body["metadata"].get("annotations") or {}).get(BINDING_ANNOTATION)
            if annotation is None:
                raise ClientError(
                    f"worker {name!r} has no binding yet: the operator binds a profiled "
                    "child at spawn (is it running?)"
                )
            try:
                binding = decode_binding(annotation)
            except VirtualAgentError as e:
                raise ClientError(f"{e.reason}: {e}") from e
            pinned = revision_ref(spec.agent, binding.config_revision_id)
            profile = binding.profile
        elif info.status.frozen_revision is not None:
            pinned = info.status.frozen_revision.name
        decided = self._pod_config(info.status.pod) if info.status.pod else None
        if decided is not None:
            where = f"AgentConfigRevision/{pinned}" if pinned else f"AgentConfig/{spec.agent}"
            return Explanation(
                name, spec.agent, spec.profile, where, explain_fields(decided), inherits
            )
        config, where, revision = self._config_at(spec.agent, pinned)
        if spec.profile and profile is None and revision is not None:
            # An older binding without the sealed snapshot: the pinned revision's map has it.
            found = [
                p.profile for p in revision.profile_map.profiles if p.profile.key == spec.profile
            ]
            profile = found[0] if found else None
        effective = resolve(config, spec, profile)
        return Explanation(
            name, spec.agent, spec.profile, where, explain_fields(effective), inherits
        )

    def _pod_config(self, pod: str) -> EffectiveConfig | None:
        """The effective config the operator gave the run's pod; None if it cannot be read."""
        core = kubernetes.client.CoreV1Api(self.api)
        try:
            found = self._call(core.read_namespaced_pod, pod, self.namespace)
        except ClientError:
            return None  # gone, or not readable with these credentials
        for container in found.spec.containers:  # type: ignore[attr-defined]
            for env in container.env or ():
                if env.name == EFFECTIVE_CONFIG_ENV and env.value:
                    return EffectiveConfig.model_validate_json(env.value)
        return None

    def _config_at(
        self, agent: str, revision: str | None
    ) -> tuple[AgentConfigSpec, str, AgentConfigRevisionSpec | None]:
        if revision is not None:
            try:
                spec = self._revision_spec(revision)
                return spec.config, f"AgentConfigRevision/{revision}", spec
            except NotFoundError:
                pass  # pruned: the live config is the best there is
        body = self._agent_body(agent)
        return AgentConfigSpec.model_validate(body["spec"]), f"AgentConfig/{agent}", None

    # --- config: agents, revisions, profiles -----------------------------------------

    def agents(self) -> builtins.list[str]:
        return sorted(b["metadata"]["name"] for b in self._list("agentconfigs").get("items", []))

    def _agent_body(self, agent: str) -> Body:
        missing = NotFoundError(f"unknown agent {agent!r} in namespace {self.namespace}")
        return self._get_object("agentconfigs", agent, missing)

    def _revision_body(self, name: str) -> Body:
        missing = NotFoundError(f"unknown revision {name!r} in namespace {self.namespace}")
        return self._get_object("agentconfigrevisions", name, missing)

    def _revision_spec(self, name: str) -> AgentConfigRevisionSpec:
        return AgentConfigRevisionSpec.model_validate(self._revision_body(name)["spec"])

    def _active(self, agent: str) -> str | None:
        status = AgentConfigStatus.model_validate(self._agent_body(agent).get("status") or {})
        return status.active_revision.name if status.active_revision else None

    @staticmethod
    def _revision_info(body: Body, active: str | None) -> RevisionInfo:
        spec = AgentConfigRevisionSpec.model_validate(body["spec"])
        name = body["metadata"]["name"]
        return RevisionInfo(
            name=name,
            agent=spec.agent,
            revision=spec.revision,
            digest=spec.digest,
            created=body["metadata"].get("creationTimestamp", ""),
            active=name == active,
            profiles=len(spec.profile_map.profiles),
        )

    def revisions(self, agent: str) -> builtins.list[RevisionInfo]:
        """The agent's revision history, oldest first."""
        active = self._active(agent)
        found = self._list("agentconfigrevisions", label_selector=f"{AGENT_LABEL}={agent}")
        infos = [self._revision_info(b, active) for b in found.get("items", [])]
        return sorted(infos, key=lambda r: r.revision)

    def revision(
        self, agent: str, ref: str | int | None = None
    ) -> tuple[RevisionInfo, AgentConfigRevisionSpec]:
        """One revision of the agent (by id or name); None: the active one."""
        active = self._active(agent)
        name = revision_ref(agent, ref) if ref is not None else active
        if name is None:
            raise NotFoundError(f"agent {agent!r} has no active revision yet")
        body = self._revision_body(name)
        info = self._revision_info(body, active)
        if info.agent != agent:
            raise NotFoundError(f"revision {name!r} belongs to agent {info.agent!r}, not {agent!r}")
        return info, AgentConfigRevisionSpec.model_validate(body["spec"])

    def profiles(self, agent: str, revision: str | int | None = None) -> ProfileSet:
        """The profiles of a revision's frozen map (default: the active revision)."""
        info, spec = self.revision(agent, revision)
        return ProfileSet(info, spec.profile_map.profiles)

    def profile(self, agent: str, key: str, revision: str | int | None = None) -> FrozenProfile:
        found = self.profiles(agent, revision)
        for frozen in found.profiles:
            if frozen.profile.key == key:
                return frozen
        known = ", ".join(p.profile.key for p in found.profiles) or "none"
        raise NotFoundError(
            f"no profile {key!r} in revision {found.revision.name} (known: {known})"
        )

    def diff_revisions(self, agent: str, before: str | int, after: str | int) -> ProfileDiff:
        """How the profile maps of two revisions differ."""
        old, old_spec = self.revision(agent, before)
        new, new_spec = self.revision(agent, after)
        return ProfileDiff(
            agent, old, new, diff_profiles(old_spec.profile_map, new_spec.profile_map)
        )


# --- async ---------------------------------------------------------------------------


def _in_thread(
    method: Callable[Concatenate[Client, P], R],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    """`method` of the sync client as a coroutine that runs it in a thread."""

    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class AsyncClient:
    """The same client for asyncio code: each call runs in a thread (`asyncio.to_thread`).

    A long wait (collect, spawn with `wait`, a followed event stream) holds one thread of
    the loop's default executor while it lasts. Progress callbacks run in that thread.
    """

    def __init__(self, client: Client) -> None:
        self.sync = client

    @classmethod
    async def from_kubeconfig(
        cls, namespace: str | None = None, kubeconfig: str | None = None
    ) -> AsyncClient:
        return cls(await asyncio.to_thread(Client.from_kubeconfig, namespace, kubeconfig))

    @property
    def namespace(self) -> str:
        return self.sync.namespace

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    close = _in_thread(Client.close)
    spawn = _in_thread(Client.spawn)
    get = _in_thread(Client.get)
    list = _in_thread(Client.list)
    query = _in_thread(Client.query)
    inspect = _in_thread(Client.inspect)
    kill = _in_thread(Client.kill)
    wait = _in_thread(Client.wait)
    collect = _in_thread(Client.collect)
    explain = _in_thread(Client.explain)
    agents = _in_thread(Client.agents)
    revisions = _in_thread(Client.revisions)
    revision = _in_thread(Client.revision)
    profiles = _in_thread(Client.profiles)
    profile = _in_thread(Client.profile)
    diff_revisions = _in_thread(Client.diff_revisions)

    async def events(
        self,
        name: str | None = None,
        *,
        follow: bool = True,
        since: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[EventRecord]:
        """`Client.events` as an async iterator: each next event is awaited in a thread."""
        stream = self.sync.events(name, follow=follow, since=since, timeout=timeout)
        try:
            while (record := await asyncio.to_thread(next, stream, None)) is not None:
                yield record
        finally:
            # Closes the watch now. A cancelled wait may still be running in its thread
            # (closing then refuses); the watch ends at its next heartbeat all the same.
            with contextlib.suppress(ValueError):
                stream.close()
