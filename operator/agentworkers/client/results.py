"""What the client returns: snapshots of workers, events, explanations, revisions and diffs,
and the pure helpers that make them (unit-tested without a cluster)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentworkers.api import (
    FrozenProfile,
    FrozenProfileMap,
    TokenQuotaSpec,
    TokenQuotaStatus,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.api.worker import TERMINAL_PHASES, McpServerStatus, WorkerEvent
from agentworkers.core.effective import AGENT, PROFILE, EffectiveConfig
from agentworkers.core.revisions import revision_name

Body = dict[str, Any]
Change = Literal["added", "removed", "changed", "unchanged"]


@dataclass(frozen=True)
class WorkerInfo:
    """A snapshot of one worker (the seed's WorkerInfo)."""

    name: str
    spec: WorkerSpec
    status: WorkerStatus
    created: str
    namespace: str = ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkerInfo:
        metadata = body["metadata"]
        return cls(
            name=metadata["name"],
            spec=WorkerSpec.model_validate(body["spec"]),
            status=WorkerStatus.model_validate(body.get("status") or {}),
            created=metadata.get("creationTimestamp", ""),
            namespace=metadata.get("namespace", ""),
        )

    @property
    def phase(self) -> str:
        return self.status.phase or "Pending"

    @property
    def waiting(self) -> str | None:
        """Why a run that has not started waits (its Ready condition), e.g.
        "AgentConfigMissing: AgentConfig 'x' does not exist"; None once it has its pod."""
        if self.status.pod:
            return None
        for condition in self.status.conditions:
            if condition.type == "Ready" and condition.status == "False":
                return f"{condition.reason}: {condition.message}"
        return None

    @property
    def started(self) -> str:
        """When the run started; a worker not started yet counts from its creation."""
        return self.status.started_at or self.created


@dataclass(frozen=True)
class WorkerFilter:
    """Which workers a cluster-wide verb acts on, as kubectl selects: `labels` is a label
    selector (`team=a,tier!=batch`, sent to the API server); `agent`, `phases` and
    `parent` match spec.agent, the phase (Pending: none yet) and spec.parent. Empty
    matches every worker (`--all`)."""

    labels: str = ""
    agent: str | None = None
    phases: frozenset[str] = frozenset()
    parent: str | None = None

    def matches(self, info: WorkerInfo) -> bool:
        """The checks the API server cannot make (all but the labels)."""
        return (
            (self.agent is None or info.spec.agent == self.agent)
            and (not self.phases or info.phase in self.phases)
            and (self.parent is None or info.spec.parent == self.parent)
        )

    @property
    def everything(self) -> bool:
        return self == WorkerFilter()


KillOutcome = Literal["killed", "already killed", "finished"]


@dataclass(frozen=True)
class KillResult:
    """What a kill by selector did (or, in a dry run, would do) to one matched worker:
    killed; already killed (the first reason stands); finished (Done or Failed on its
    own: nothing to kill, left alone)."""

    name: str
    namespace: str
    outcome: KillOutcome
    phase: str
    reason: str
    dry_run: bool = False


def kill_outcome(info: WorkerInfo) -> KillOutcome:
    """What a kill would do to the run as it is."""
    if info.spec.kill is not None:
        return "already killed"
    return "finished" if info.phase in TERMINAL_PHASES else "killed"


@dataclass(frozen=True)
class CollectResult:
    name: str
    phase: str
    output: str
    error: str
    # Whether collect deleted the Worker (and with it its pod and children).
    deleted: bool = True
    # For a killed run: its children the kill reached (names), when these credentials can
    # list Workers (a runtime's cannot).
    killed_children: tuple[str, ...] = ()
    namespace: str = ""


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
    namespace: str = ""


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
    # Its tree: root and depth, and the tree's limits with where each came from.
    tree: tuple[ExplainedField, ...] = ()
    # Its pod's knobs (image, runtime class, placement, resources) and who set each.
    pod: tuple[ExplainedField, ...] = ()
    # Each MCP server it keeps, and the tools the run got from it.
    mcp: tuple[ExplainedField, ...] = ()


@dataclass(frozen=True)
class RevisionInfo:
    name: str
    agent: str
    revision: int
    digest: str
    created: str
    active: bool
    profiles: int
    namespace: str = ""
    # The GitOps engine that applied it, where the engine marks its objects ("" if none).
    applied_by: str = ""


@dataclass(frozen=True)
class QuotaInfo:
    """A TokenQuota and its usage in the current window, as the operator last summed it."""

    name: str
    namespace: str
    agent: str | None  # None: every run of the namespace
    window: str
    tokens: int
    used: int
    reserved: int
    remaining: int
    resets_at: str | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> QuotaInfo:
        spec = TokenQuotaSpec.model_validate(body["spec"])
        status = TokenQuotaStatus.model_validate(body.get("status") or {})
        remaining = spec.tokens if status.remaining is None else status.remaining
        return cls(
            body["metadata"]["name"],
            body["metadata"].get("namespace", ""),
            spec.agent,
            spec.window,
            spec.tokens,
            status.used,
            status.reserved,
            remaining,
            status.resets_at,
        )


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


@dataclass(frozen=True)
class TreeNode:
    """A worker and the workers it spawned (spec.parent), as `tree` shows them."""

    worker: WorkerInfo
    children: tuple[TreeNode, ...] = ()
    # On the root `tree NAME` returns: the id of the trace its runs' spans go to, where
    # tracing is on (core.tracing: its traceparent's trace, else one derived from its uid).
    trace_id: str | None = None


# --- pure helpers --------------------------------------------------------------------


def spawn_tree(workers: Iterable[WorkerInfo], root: str) -> TreeNode | None:
    """The tree below `root` from a flat list of one namespace (children oldest first);
    None: no such worker."""
    by_name = {w.name: w for w in workers}
    return _tree_below(by_name[root], _children(by_name.values())) if root in by_name else None


def spawn_forest(workers: Iterable[WorkerInfo]) -> tuple[TreeNode, ...]:
    """Every tree in a flat list of one namespace or many: a root is a worker whose parent
    is not in the list (none, or already collected); ordered by namespace, then start."""
    every = list(workers)
    known = {(w.namespace, w.name) for w in every}
    children = _children(every)
    order = sorted(every, key=lambda w: (w.namespace, w.started, w.name))
    trees = [
        _tree_below(w, children)
        for w in order
        if not w.spec.parent or (w.namespace, w.spec.parent) not in known
    ]
    # A parent loop has no root: its oldest member draws it, so no worker goes unshown.
    reached = {(n.worker.namespace, n.worker.name) for tree in trees for n in _walk(tree)}
    for w in order:
        if (w.namespace, w.name) not in reached:
            trees.append(loop := _tree_below(w, children))
            reached.update((n.worker.namespace, n.worker.name) for n in _walk(loop))
    return tuple(trees)


def _walk(node: TreeNode) -> Iterator[TreeNode]:
    yield node
    for child in node.children:
        yield from _walk(child)


_Key = tuple[str, str]  # (namespace, name): names are unique in a namespace only


def _children(workers: Iterable[WorkerInfo]) -> dict[_Key, list[WorkerInfo]]:
    children: dict[_Key, list[WorkerInfo]] = {}
    for w in workers:
        if w.spec.parent:
            children.setdefault((w.namespace, w.spec.parent), []).append(w)
    return children


def _tree_below(root: WorkerInfo, children: Mapping[_Key, list[WorkerInfo]]) -> TreeNode:
    def node(info: WorkerInfo, seen: frozenset[str]) -> TreeNode:
        below = sorted(
            children.get((info.namespace, info.name), ()), key=lambda w: (w.started, w.name)
        )
        return TreeNode(info, tuple(node(c, seen | {c.name}) for c in below if c.name not in seen))

    return node(root, frozenset({root.name}))


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
        events = WorkerStatus.model_validate(body.get("status") or {}).recent_events
        fresh = sorted((e for e in events if e.index > last), key=lambda e: e.index)
        if fresh:
            self._seen[uid] = fresh[-1].index
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace", "")
        return [EventRecord(name, e.index, e.kind, e.time, e.summary, namespace) for e in fresh]

    def forget(self, body: Mapping[str, Any]) -> None:
        self._seen.pop(body["metadata"].get("uid") or body["metadata"]["name"], None)


def inspection(info: WorkerInfo, since: int = 0) -> Inspection:
    events = tuple(
        sorted((e for e in info.status.recent_events if e.index > since), key=lambda e: e.index)
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
        value = values[wire]
        if name == "mcp_servers":  # each server whole is in its own rows (explain_mcp)
            value = [server["name"] for server in value]
        rows.append(ExplainedField(wire, value, layer))
    return tuple(rows)


def explain_mcp(
    effective: EffectiveConfig, reported: tuple[McpServerStatus, ...] | None
) -> tuple[ExplainedField, ...]:
    """Each MCP server the run keeps: where it is and the tools the run got from it (or
    why none), as its runtime reported them; layer `runtime`, or `config` before the run
    reported."""
    found = {s.name: s for s in reported or ()}
    rows = []
    for server in effective.mcp_servers:
        seen = found.get(server.name)
        need = " (required)" if server.required else ""
        if seen is None:
            value = f"{server.url}{need}: not reached yet"
        elif seen.state == "Connected":
            value = f"{server.url}{need}: {', '.join(seen.tools) or 'no tools offered'}"
        else:
            value = f"{server.url}{need}: unavailable: {seen.message}"
        layer = "config" if seen is None else "runtime"
        rows.append(ExplainedField(f"mcp.{server.name}", value, layer))
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
