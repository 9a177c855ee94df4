"""A Worker's pass's types: the context it decides from, the plan it returns and the
writes that plan asks for; and the status as written (kstatus, change detection)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigRevisionSpec, AgentConfigSpec, reasons
from agentworkers.api.agentconfig import RevisionRef, TreeLimits
from agentworkers.api.quota import TokenQuotaSpec
from agentworkers.api.worker import (
    RUNTIME_STATUS,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.api.workerpod import WorkerPod
from agentworkers.core import clocks
from agentworkers.core.conditions import Status, abnormal_conditions, set_condition
from agentworkers.core.effective import EffectiveConfig
from agentworkers.core.objects import meta
from agentworkers.core.quota import Usage
from agentworkers.core.tree import Shape
from agentworkers.errors import Refusal, describe

Body = dict[str, Any]

# Seconds a run that waits (for its AgentConfig, a revision, a provider) is looked at again.
WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Context:
    """What one pass knows, read once from the store before it decides."""

    body: Body  # the Worker
    now: dt.datetime
    pod_defaults: WorkerPod = field(default_factory=WorkerPod)
    config: Body | None = None  # its AgentConfig
    provider: Body | None = None  # the ModelProvider that AgentConfig names, if any
    # The run and every run above it to its tree's root (the last), for a live child run;
    # `broken`: why the chain stops short (a missing link fails closed).
    chain: Sequence[Body] = ()
    broken: Refusal | None = None
    parent: Body | None = None  # its parent, as the store has it (a chain may end short)
    below: Sequence[Body] = ()  # a top-level run's descendants (its tree's sums)
    pod: Body | None = None  # the run's pod (the store's; the API's when the store lacks it)
    workload: Body | None = None  # Kueue's Workload of that pod
    children: Sequence[str] = ()  # its children (its runtime's Role names them)
    siblings: Sequence[str] = ()  # its parent's children (the parent's Role)
    frozen_revision: AgentConfigRevisionSpec | None = None  # the parent's frozen revision
    active_revision: AgentConfigRevisionSpec | None = None  # the agent's active revision
    # Gathered only for a run about to start, under its tree's and namespace's locks:
    shape: Shape | None = None  # where it joins its tree, counting started runs
    tree_limits: TreeLimits | None = None  # its root's AgentConfig's spec.tree
    quotas: Sequence[tuple[str, TokenQuotaSpec, Usage]] = ()  # its namespace's, by name


# --- what a plan asks to be written --------------------------------------------------------


@dataclass(frozen=True)
class Bind:
    """The Worker's binding annotation, labels and owner references, at the version read."""

    annotations: dict[str, str]
    labels: dict[str, str]
    owners: list[Body]


@dataclass(frozen=True)
class Grant:
    """A runtime's Role in step with its children."""

    namespace: str
    role: str
    rules: list[Body]


@dataclass(frozen=True)
class Access:
    """The runtime's Role and RoleBinding, made after its pod; made already: `regrant`."""

    objects: list[Body]
    regrant: Grant


@dataclass(frozen=True)
class Start:
    """The run's pod: a warm one of its pool if one is ready, else `pod`, after `account`."""

    pod: Body
    account: Body
    config: AgentConfigSpec
    active: RevisionRef
    frozen: RevisionRef | None
    deadline_seconds: int | None
    effective: EffectiveConfig


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str


@dataclass(frozen=True)
class ShortenDeadline:
    pod: str
    uid: str
    seconds: int


@dataclass(frozen=True)
class StopBelow:
    """Every live run below this one stops, each with `cause` and one Event."""

    cause: str


@dataclass(frozen=True)
class DeleteWorker:
    uid: str


Action = Bind | Grant | Access | DeletePod | ShortenDeadline | StopBelow | DeleteWorker


@dataclass
class Plan:
    """A pass's decision: the status it writes (once), its Events (posted once it is
    written), the writes before and after it, and when the next pass is due."""

    body: Body
    spec: WorkerSpec
    status: WorkerStatus
    now: dt.datetime
    before: list[Action] = field(default_factory=list)
    start: Start | None = None
    after: list[Action] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    # Seconds until a clock of this run needs another pass, if one does.
    again_in: float | None = None
    # What the operator's metrics count of this pass: (counter, label).
    counts: list[tuple[str, str]] = field(default_factory=list)
    tree_runs: int | None = None  # a top-level run's tree size, when summed
    quiet: bool = False  # nothing to write at all (a failure said once already)
    binds: dict[str, str] = field(default_factory=dict)  # annotations its `Bind` writes
    # Who the Worker is, read once: a pass's writes move its version and add annotations,
    # never these (a metadata patch leaves the generation be).
    name: str = field(init=False)
    namespace: str = field(init=False)
    uid: str = field(init=False)
    generation: int | None = field(init=False)

    def __post_init__(self) -> None:
        read = meta(self.body)
        self.name, self.namespace, self.uid = read.name, read.namespace, read.uid
        self.generation = read.generation

    @property
    def annotations(self) -> dict[str, str]:
        """The Worker's annotations, with those this plan writes before its pod."""
        return {**meta(self.body).annotations, **self.binds}

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)

    def condition(self, type_: str, status: Status, reason: str, message: str) -> None:
        conditions = set_condition(
            self.status.conditions,
            type_,
            status,
            reason,
            message,
            self.generation,
            clocks.stamp(self.now),
        )
        self.update(conditions=conditions)

    def announce(self, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def again(self, seconds: float) -> None:
        """Another pass in `seconds` (the soonest of the clocks asking)."""
        self.again_in = seconds if self.again_in is None else min(self.again_in, seconds)

    def wait(self, reason: str, message: str) -> Waiting:
        """The run cannot go on yet: say why (Ready=False); a pass again shortly."""
        self.update(phase=self.status.phase or "Pending", last_event=f"waiting: {message}")
        self.condition(reasons.READY, "False", reason, message)
        self.again_in = WAIT_SECONDS
        return Waiting(message)

    def left(self, since: str | None, limit: float | None) -> float | None:
        return clocks.seconds_left(since, limit, self.now, spread=self.uid)

    def wanted(self) -> WorkerStatus:
        """The status to write: kstatus beside Ready, the generation observed."""
        return with_kstatus(self.status, clocks.stamp(self.now)).model_copy(
            update={"observed_generation": self.generation}
        )


class Waiting(Exception):
    """Raised within `decide` when the run waits; the plan says why."""


def _spec(body: Body) -> WorkerSpec:
    try:
        return WorkerSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise describe(e) from e


def read_status(body: Body) -> WorkerStatus:
    try:
        return WorkerStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return WorkerStatus()  # an unreadable status is recomputed


def read(body: Body, now: dt.datetime) -> Plan:
    """A plan that so far changes nothing; a spec that does not decode: its refusal."""
    return Plan(body, _spec(body), read_status(body), now)


def condition_of(plan: Plan, type_: str) -> Any:
    return next((c for c in plan.status.conditions if c.type == type_), None)


def fail(plan: Plan, error: Refusal) -> None:
    """Fail LOUD: phase Failed, a condition with the reason, one Warning Event, no pod."""
    message = str(error)
    plan.start = None
    plan.update(phase="Failed", error=message, last_event=f"{error.reason}: {message}")
    plan.condition(reasons.READY, "False", error.reason, message)
    plan.counts.append(("failure", error.reason))
    plan.announce("Warning", error.reason, message)


# --- the status, as written -------------------------------------------------------------------


def with_kstatus(status: WorkerStatus, at: str | None = None) -> WorkerStatus:
    """Stalled=True once the run Failed (what Flux or `kubectl wait` report), Reconciling=True
    while it is on its way to a pod (Pending), from the Ready condition's reason."""
    ready = next((c for c in status.conditions if c.type == reasons.READY), None)
    if ready is None:
        return status
    failed = status.phase == "Failed"
    conditions = abnormal_conditions(
        status.conditions,
        ready.reason,
        (status.error or ready.message) if failed else ready.message,
        ready.observed_generation,
        stalled=failed,
        reconciling=status.phase in (None, "Pending"),
        at=at,
    )
    return status.model_copy(update={"conditions": conditions})


def comparable(status: Body) -> Body:
    """A status without what changes on every write (timestamps) and without what only the
    runtime writes (the store does not keep it), for change detection."""
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    kept = {k: v for k, v in status.items() if k != "updatedAt" and k not in RUNTIME_STATUS}
    return {**kept, "conditions": conditions}


def changes(plan: Plan) -> Body | None:
    """The status fields this plan changes, with `updatedAt`; None: nothing but
    timestamps would change, and nothing is written."""
    wanted = plan.wanted()
    new, old = comparable(wanted.wire()), comparable(plan.body.get("status") or {})
    if new == old:
        return None
    wire = wanted.model_copy(update={"updated_at": clocks.stamp(plan.now)}).wire()
    return {k: v for k, v in wire.items() if k == "updatedAt" or new.get(k) != old.get(k)}
