"""What the client returns: snapshots of workers, events, explanations, revisions and diffs,
and the pure helpers that make them (unit-tested without a cluster)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentworkers.api import FrozenProfile, FrozenProfileMap, WorkerSpec, WorkerStatus
from agentworkers.api.worker import WorkerEvent
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
    # Its tree: root and depth, and the tree's limits with where each came from.
    tree: tuple[ExplainedField, ...] = ()
    # Its pod's knobs (image, runtime class, placement, resources) and who set each.
    pod: tuple[ExplainedField, ...] = ()


@dataclass(frozen=True)
class RevisionInfo:
    name: str
    agent: str
    revision: int
    digest: str
    created: str
    active: bool
    profiles: int
    # The GitOps engine that applied it, where the engine marks its objects ("" if none).
    applied_by: str = ""


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


# --- pure helpers --------------------------------------------------------------------


def spawn_tree(workers: Iterable[WorkerInfo], root: str) -> TreeNode | None:
    """The tree below `root` from a flat list (children oldest first); None: no such worker."""
    by_name = {w.name: w for w in workers}
    children: dict[str, list[WorkerInfo]] = {}
    for w in by_name.values():
        if w.spec.parent:
            children.setdefault(w.spec.parent, []).append(w)

    def node(info: WorkerInfo, seen: frozenset[str]) -> TreeNode:
        below = sorted(children.get(info.name, ()), key=lambda w: (w.started, w.name))
        return TreeNode(info, tuple(node(c, seen | {c.name}) for c in below if c.name not in seen))

    return node(by_name[root], frozenset({root})) if root in by_name else None


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
        name = body["metadata"]["name"]
        return [EventRecord(name, e.index, e.kind, e.time, e.summary) for e in fresh]

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
