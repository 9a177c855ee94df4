"""A Worker's pass, decided: from one context gathered from the store, the status to write,
the Events to post and the writes to make (docs/architecture.md, "A Worker's pass").

Pure: no I/O, and no clock but the context's `now`. `decide` reads the context top to
bottom and returns a `Plan`; `controller/workers.py` gathers the context and carries the
plan out, with one status write. Starting the run's pod is the one write whose result the
rest of the plan depends on (a warm pod claimed, or a cold one made): the plan stops there
(`Plan.start`) and `started` finishes it with the pod.

Writes are ordered so that a pass cut short at any line leaves what the next pass mends:
everything the status will name exists before the status is written (`Plan.before`); the
writes that must not happen unless the status landed come after it (`Plan.after`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigRevisionSpec, AgentConfigSpec, AgentConfigStatus, reasons
from agentworkers.api.agentconfig import RevisionRef, TreeLimits, WorkerPod
from agentworkers.api.names import (
    AGENT_LABEL,
    BINDING_ANNOTATION,
    FROZEN_ANNOTATION,
    REVISION_LABEL,
)
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.quota import TokenQuotaSpec
from agentworkers.api.worker import (
    RUNTIME_STATUS,
    TERMINAL_PHASES,
    InheritedBounds,
    TreeStatus,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.core import clocks, identities
from agentworkers.core.access import access_objects, account_name, role_rules
from agentworkers.core.checks import check_kind, check_reasoning_api, check_secrets
from agentworkers.core.conditions import Status, abnormal_conditions, set_condition
from agentworkers.core.effective import EffectiveConfig, inherit, resolve
from agentworkers.core.inputs import check_bounds as check_inputs
from agentworkers.core.owners import owner_reference
from agentworkers.core.pods import build_pod, failure, owned_by, pod_name, running_since
from agentworkers.core.pools import claimed_account
from agentworkers.core.queueing import standing
from agentworkers.core.quota import Usage, in_scope
from agentworkers.core.quota import check_spawn as check_quota
from agentworkers.core.spawning import (
    ParentRun,
    ancestor_profile,
    check_binding,
    check_spawn,
    encode_binding,
    parent_run,
    profile_run,
    summary,
    verify_run_start,
)
from agentworkers.core.tracing import check_child_trace
from agentworkers.core.tree import Shape, check_tree, tokens_used
from agentworkers.errors import REFUSALS, Refusal, RunFailedError, describe
from agentworkers.virtualagent import Binding, Profile

Body = dict[str, Any]

PARENT_KILLED = "parent killed: "
# Seconds a started container's runtime has to report Running itself before the pod's
# phase stands in for it: one status write per run fewer, when the runtime is alive.
RUNTIME_REPORT_SECONDS = 3.0
# How often a busy tree's sums (status.tree) are written to its root, at most.
TREE_SUM_SECONDS = 5.0
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

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.body["metadata"].get("uid") or "")

    @property
    def generation(self) -> int | None:
        generation = self.body["metadata"].get("generation")
        return int(generation) if generation is not None else None

    @property
    def annotations(self) -> dict[str, str]:
        """The Worker's annotations, with those this plan writes before its pod."""
        return {**(self.body["metadata"].get("annotations") or {}), **self.binds}

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


def _status(body: Body) -> WorkerStatus:
    try:
        return WorkerStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return WorkerStatus()  # an unreadable status is recomputed


def read(body: Body, now: dt.datetime) -> Plan:
    """A plan that so far changes nothing; a spec that does not decode: its refusal."""
    return Plan(body, _spec(body), _status(body), now)


# --- the decision ---------------------------------------------------------------------------


def decide(ctx: Context) -> Plan:
    """The pass over `ctx.body`, from its context."""
    try:
        plan = read(ctx.body, ctx.now)
    except REFUSALS as error:
        if (ctx.body.get("status") or {}).get("phase") == "Failed":
            return Plan(ctx.body, WorkerSpec(agent="?"), _status(ctx.body), ctx.now, quiet=True)
        # A spec that does not decode (admission was off): fail once, naming the field.
        agent = (ctx.body.get("spec") or {}).get("agent") or "?"
        plan = Plan(ctx.body, WorkerSpec(agent=agent), WorkerStatus(), ctx.now)
        fail(plan, error)
        return plan
    try:
        _decide(ctx, plan)
    except Waiting:
        pass
    except REFUSALS as error:
        fail(plan, error)
    return plan


def _decide(ctx: Context, plan: Plan) -> None:
    """The steps of docs/architecture.md's picture, in order; a refusal ends the run."""
    if not plan.spec.parent:
        _account(ctx, plan)
    _mcp_servers(plan)
    if plan.status.phase in TERMINAL_PHASES:
        _ended(ctx, plan)
        return
    if plan.spec.kill is not None:
        _stop(plan, ctx.pod, plan.spec.kill.reason, plan.spec.kill.by)
        plan.counts.append(("kill", "spec"))
        _stop_below(plan, plan.spec.kill.reason)
        return
    if ctx.broken is not None:
        raise ctx.broken
    if plan.spec.parent and (_tree_spent(ctx, plan) or _parent_killed(ctx, plan)):
        return
    config, active = _config(ctx, plan)
    parent = parent_run(ctx.chain[1:])
    if plan.spec.profile and not plan.status.pod:
        # Until the run starts, every pass checks the binding is the one written for it.
        annotation = plan.annotations.get(BINDING_ANNOTATION)
        binding = check_binding(plan.spec, annotation, plan.status.binding, parent)
        if binding is None:
            _bind(ctx, plan, parent, active)
        elif plan.status.binding is None:
            # Bound by a pass whose status write did not land (a conflict, an API error
            # after the binding): the binding is its own (checked above); say so now.
            _bound(plan, binding, parent.frozen.name if parent and parent.frozen else "")
    elif ctx.parent is not None:
        _adopt(ctx, plan, {}, {})
    if _suspended(plan):
        return
    if ctx.pod is None and plan.status.pod:
        _lost(plan)
    if ctx.pod is None:
        _start(ctx, plan, config, active, parent)
        return
    _with_pod(ctx, plan, config, ctx.pod)


def started(ctx: Context, plan: Plan, pod: Body) -> Plan:
    """The rest of a plan whose run's pod was just started (`Plan.start`): `pod`."""
    assert plan.start is not None
    config = plan.start.config
    plan.start = None
    try:
        _with_pod(ctx, plan, config, pod)
    except Waiting:
        pass
    except REFUSALS as error:
        fail(plan, error)
    return plan


def _with_pod(ctx: Context, plan: Plan, config: AgentConfigSpec, pod: Body) -> None:
    if not owned_by(pod, plan.uid):
        raise RunFailedError(
            f"a pod named {pod_name(plan.name)} is not this run's", reason=reasons.POD_CONFLICT
        )
    if not plan.status.pod:
        # Its Role and RoleBinding come after its pod, made by the pass that records the
        # pod: a pass that finds a pod its Worker does not record yet makes them again.
        objects = _access(ctx, plan, config, pod)[1:]
        plan.before.append(Access(objects, _grant(ctx.body, ctx.children)))
    if _queued(ctx, plan, pod):
        return
    _follow(plan, pod)
    if plan.status.phase == "Idle":
        _idle_clock(plan, pod, config)


def _config(ctx: Context, plan: Plan) -> tuple[AgentConfigSpec, RevisionRef]:
    """The run's AgentConfig with the install's pod defaults under its own and its
    ModelProvider's settings as they are now, and its active revision; or the wait."""
    agent = plan.spec.agent
    if ctx.config is None:
        raise plan.wait(reasons.AGENT_CONFIG_MISSING, f"AgentConfig {agent!r} does not exist")
    try:
        config = AgentConfigSpec.model_validate(ctx.config["spec"])
        config = config.model_copy(update={"worker": config.worker.over(ctx.pod_defaults)})
        config = _with_provider(ctx, plan, config)
    except ValidationError as e:
        # Its own handler reports the fault on the AgentConfig; the run waits for a fix.
        raise plan.wait(
            reasons.AGENT_CONFIG_INVALID, f"AgentConfig {agent!r}: {describe(e)}"
        ) from e
    active = AgentConfigStatus.model_validate(ctx.config.get("status") or {}).active_revision
    if active is None:
        raise plan.wait(reasons.NO_ACTIVE_REVISION, f"AgentConfig {agent!r} has no revision yet")
    return config, active


def _with_provider(ctx: Context, plan: Plan, config: AgentConfigSpec) -> AgentConfigSpec:
    """The config with its ModelProvider's api, endpoint, key and model, as they are now:
    a key rotation or an endpoint move reaches every run that starts after it."""
    ref = config.model.provider_ref
    if ref is not None:
        if ctx.provider is None:
            raise plan.wait(reasons.PROVIDER_MISSING, f"ModelProvider {ref!r} does not exist")
        try:
            provider = ModelProviderSpec.model_validate(ctx.provider.get("spec") or {})
        except ValidationError as e:
            raise plan.wait(
                reasons.PROVIDER_INVALID, f"ModelProvider {ref!r}: {describe(e)}"
            ) from e
        config = config.model_copy(update={"model": config.model.with_provider(provider)})
    if config.model.model is None and plan.spec.model is None:
        raise plan.wait(
            reasons.MODEL_MISSING,
            f"no model: AgentConfig {plan.spec.agent!r} names none, nor does ModelProvider "
            f"{ref!r} (defaultModel) or the Worker",
        )
    return config


# --- on the way to the pod --------------------------------------------------------------------


def _bind(ctx: Context, plan: Plan, parent: ParentRun | None, live: RevisionRef) -> None:
    """Check the spawn and write the binding annotation, once, before any pod exists."""
    try:
        binding = check_spawn(plan.spec, parent, ctx.frozen_revision, live)
    except REFUSALS as error:
        plan.counts.append(("spawn_refusal", error.reason))
        raise
    revision = parent.frozen.name if parent and parent.frozen else ""
    _adopt(
        ctx,
        plan,
        {BINDING_ANNOTATION: encode_binding(binding)},
        {AGENT_LABEL: plan.spec.agent, REVISION_LABEL: revision},
    )
    _bound(plan, binding, revision)


def _bound(plan: Plan, binding: Binding, revision: str) -> None:
    """What status says of a binding: its summary (what later passes check it against),
    its revision, ProfileBound."""
    plan.update(binding=summary(binding), revision=revision or None)
    plan.condition(
        reasons.PROFILE_BOUND,
        "True",
        reasons.BOUND,
        f"profile {binding.key!r} pinned to revision {binding.config_revision_id}",
    )


def _adopt(ctx: Context, plan: Plan, annotations: dict[str, str], labels: dict[str, str]) -> None:
    """Write the binding and the parent's ownerReference (the child stays owned by its
    parent), and let the parent at the child: granted until the child's run starts, also
    when its creator set the reference already and there is nothing to write."""
    owners = list(plan.body["metadata"].get("ownerReferences") or [])
    write = bool(annotations)
    if ctx.parent is not None and ctx.parent["metadata"]["uid"] not in {
        o.get("uid") for o in owners
    }:
        owners.append(owner_reference(ctx.parent, controller=False))
        write = True
    if write:
        plan.before.append(Bind(annotations, labels, owners))
        plan.binds.update(annotations)
    # Asked again on each pass until the run starts (the same rules are not written twice),
    # so a child whose creator set the reference already is granted too.
    if ctx.parent is not None and (write or not plan.status.pod):
        plan.before.append(_grant(ctx.parent, ctx.siblings))


def _grant(body: Body, children: Sequence[str]) -> Grant:
    meta = body["metadata"]
    rules = role_rules(meta["name"], body["spec"]["agent"], list(children))
    return Grant(meta["namespace"], account_name(meta["name"]), rules)


def _access(
    ctx: Context, plan: Plan, config: AgentConfigSpec, pod: Body | None = None
) -> list[Body]:
    """The run's ServiceAccount, Role and RoleBinding; the binding's subject the account
    of `pod` when it is a warm pod the run claimed or runs as a pooled account."""
    return access_objects(
        plan.body,
        plan.spec.agent,
        list(ctx.children),
        config.worker.service_account_annotations,
        account=(claimed_account(pod) or identities.of_pod(pod)) if pod is not None else None,
    )


def _suspended(plan: Plan) -> bool:
    """A suspended run waits before its pod, saying so."""
    if not plan.spec.suspend:
        return False
    if plan.status.phase is None:
        plan.update(phase="Pending")
    plan.condition(
        reasons.STARTED, "False", reasons.SUSPENDED, "the run waits for spec.suspend to be cleared"
    )
    return True


def _start(
    ctx: Context,
    plan: Plan,
    config: AgentConfigSpec,
    active: RevisionRef,
    parent: ParentRun | None,
) -> None:
    """Run start: room in its tree and quotas, the pin verified against the current map,
    the pod built (it freezes a top-level run's revision)."""
    if ctx.shape is not None:
        check_tree(ctx.tree_limits, ctx.chain[-1]["spec"]["agent"], ctx.shape)
    budget = config.limits.token_budget
    for name, spec, usage in ctx.quotas:
        if in_scope(spec, plan.spec.agent):
            check_quota(name, spec, usage, budget)
    profile: Profile | None = None
    if plan.spec.profile:
        try:
            binding, profile = verify_run_start(
                plan.spec,
                plan.annotations.get(BINDING_ANNOTATION),
                plan.status.binding,
                parent,
                ctx.active_revision,
            )
        except REFUSALS as error:
            plan.counts.append(("pin_failure", error.reason))
            raise
        plan.update(binding=summary(binding))
    check_secrets(plan.spec, config.allowed_secrets)
    check_reasoning_api(plan.spec, config.model)
    check_kind(plan.spec)
    if parent is not None:
        check_child_trace(plan.spec.traceparent, parent.name, parent.trace_id)
    effective = resolve(config, plan.spec, profile)
    via = ""
    ancestor = profile_run(ctx.chain[1:])
    if ancestor is not None and not plan.spec.profile:
        effective, profile = _bounded(plan, config, ancestor, effective)
        via = ancestor["metadata"]["name"]
    # Admission's check again (it can be off): the inputs fit the profile that bounds the run.
    check_inputs(plan.spec.inputs, profile, via)
    account = _access(ctx, plan, config)[0]
    deadline = clocks.deadline(
        plan.spec.deadline_seconds or config.worker.deadline_seconds,
        parent.deadline_at if parent else None,
        ctx.now,
    )
    if deadline is not None:
        plan.update(deadline_at=deadline[1])
    pod = build_pod(
        plan.body,
        plan.spec,
        config,
        effective,
        service_account=account_name(plan.name),
        deadline_seconds=deadline[0] if deadline else None,
    )
    # A top-level run freezes its agent's active revision: its children bind against it.
    frozen = None if plan.spec.profile else active
    if frozen is not None:
        pod["metadata"]["annotations"] = {FROZEN_ANNOTATION: frozen.model_dump_json(by_alias=True)}
    plan.start = Start(
        pod, account, config, active, frozen, deadline[0] if deadline else None, effective
    )


def _bounded(
    plan: Plan, config: AgentConfigSpec, ancestor: Body, own: EffectiveConfig
) -> tuple[EffectiveConfig, Profile]:
    """A run below a profile run never gets more than that run's effective config; and
    that run's profile, which bounds it."""
    above = read(ancestor, plan.now)
    profile = ancestor_profile(
        above.spec, above.annotations.get(BINDING_ANNOTATION), above.status.binding
    )
    if profile is None:
        raise plan.wait(
            reasons.ANCESTOR_NOT_BOUND, f"worker {above.name} has no profile binding yet"
        )
    via = InheritedBounds(worker=above.name, profile=profile.key)
    plan.update(inherited=via)
    return inherit(own, resolve(config, above.spec, profile), via), profile


# --- with its pod -------------------------------------------------------------------------------


def _condition(plan: Plan, type_: str) -> Any:
    return next((c for c in plan.status.conditions if c.type == type_), None)


def _lost(plan: Plan) -> None:
    """The run's pod is gone before the run ended: it failed (PodLost), or, when a pass
    deleted it at the deadline of the queued run and went no further, it ran out of time."""
    queued = _condition(plan, reasons.QUEUED)
    if queued is not None and queued.reason == reasons.DEADLINE_EXCEEDED:
        raise RunFailedError(queued.message, reason=reasons.DEADLINE_EXCEEDED)
    if queued is not None and queued.status == "True":
        left = plan.left(plan.status.deadline_at, 0)
        if left is not None and left <= 0:  # deleted at its deadline, before the write
            raise RunFailedError(_deadline_message(plan), reason=reasons.DEADLINE_EXCEEDED)
    raise RunFailedError(
        f"pod {plan.status.pod} was deleted before the run ended", reason=reasons.POD_LOST
    )


def _deadline_message(plan: Plan, queue: str | None = None) -> str:
    return (
        f"the run's deadline ({plan.status.deadline_at}) passed while it waited in "
        f"LocalQueue {queue or plan.status.queue}: its pod is deleted and its place in the "
        "queue freed"
    )


def _queued(ctx: Context, plan: Plan, pod: Body) -> bool:
    """A run whose pod names a Kueue LocalQueue: while Kueue holds the pod back, the run is
    Pending with Queued=True and Kueue's reason, until Kueue admits it (Queued=False, one
    Event) or its deadline passes (Failed, its pod and its place in the queue freed). True
    while it waits."""
    before = _condition(plan, reasons.QUEUED)
    if before is not None and before.status == "False":
        return False  # admitted, or never gated: the rest is the pod's
    name = pod["metadata"]["name"]
    workload = ctx.workload if pod is ctx.pod else None
    found = standing(pod, workload, before is not None)
    if found is None:
        return False
    if plan.status.queue != found.queue:
        plan.update(queue=found.queue)
    if not found.waiting:
        plan.condition(reasons.QUEUED, "False", found.reason, found.message)
        if before is not None:  # it waited: its run starts now
            left = plan.left(plan.status.deadline_at, 0)
            if left is not None:
                # Its deadline counts from its spawn, its pod's from the pod's start: what
                # is left of it, not all of it again.
                seconds = max(1, math.ceil(left))
                plan.before.append(ShortenDeadline(name, pod["metadata"]["uid"], seconds))
            plan.update(started_at=clocks.stamp(plan.now), last_event=found.message)
            plan.announce("Normal", found.reason, found.message)
        return False
    left = plan.left(plan.status.deadline_at, 0)
    if left is not None and left <= 0:
        # The pod first (this pass's status says why); a pass that finds it gone after a
        # crash here knows why too (`_lost`).
        plan.before.append(DeletePod(name, pod["metadata"]["uid"]))
        message = _deadline_message(plan, found.queue)
        plan.condition(reasons.QUEUED, "False", reasons.DEADLINE_EXCEEDED, message)
        raise RunFailedError(message, reason=reasons.DEADLINE_EXCEEDED)
    if left is not None:
        plan.again(left)
    changes = {"phase": "Pending", "pod": name, "last_event": found.message}
    if any(getattr(plan.status, k) != v for k, v in changes.items()):
        plan.update(**changes)
    plan.condition(reasons.QUEUED, "True", found.reason, found.message)
    plan.condition(reasons.STARTED, "False", found.reason, found.message)
    plan.condition(reasons.READY, "False", found.reason, found.message)
    return True


def _follow(plan: Plan, pod: Body) -> None:
    """Worker status from its pod: what kubectl get workers shows between runtime reports."""
    annotations = pod["metadata"].get("annotations") or {}
    changes: dict[str, Any] = {"pod": pod["metadata"]["name"]}
    if plan.status.frozen_revision is None and FROZEN_ANNOTATION in annotations:
        frozen = RevisionRef.model_validate_json(annotations[FROZEN_ANNOTATION])
        changes.update(frozen_revision=frozen, revision=frozen.name)
    # A warm pod was made, and its container started, before its run: the run started,
    # and its runtime's clock to report Running runs, from its claim.
    claimed = claimed_account(pod) is not None
    if plan.status.started_at is None:
        changes["started_at"] = (not claimed and pod["metadata"].get("creationTimestamp")) or (
            clocks.stamp(plan.now)
        )
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        reason, message = failure(pod)
        raise RunFailedError(message, reason=reason or reasons.POD_FAILED)
    started_at = (
        (changes.get("started_at") or plan.status.started_at) if claimed else running_since(pod)
    )
    if phase == "Succeeded" and plan.status.phase != "Done":
        changes.update(phase="Done", last_event="pod succeeded")
    elif (
        phase == "Running" and plan.status.phase in (None, "Pending") and _silent(plan, started_at)
    ):
        changes.update(phase="Running", last_event="pod running")
    elif plan.status.phase is None:
        changes.update(phase="Pending", last_event="pod created")
    if any(getattr(plan.status, k) != v for k, v in changes.items()):
        plan.update(**changes)
    plan.condition(reasons.STARTED, "True", reasons.POD_CREATED, f"pod {pod['metadata']['name']}")
    plan.condition(reasons.READY, "True", reasons.RUNNING, "the run has its pod")


def _silent(plan: Plan, started_at: str | None) -> bool:
    """Whether the runtime of a running pod (its run begun at `started_at`) is late to
    report Running itself; while it is not, a pass is asked for when it would be."""
    if started_at is None:
        return True
    left = plan.left(started_at, RUNTIME_REPORT_SECONDS)
    if left is None or left <= 0:
        return True
    plan.again(left)
    return False


def _idle_clock(plan: Plan, pod: Body, config: AgentConfigSpec) -> None:
    """An interactive run Idle past its idle timeout ends Done and frees its pod; until
    then, a pass when it would."""
    timeout = plan.spec.idle_timeout_seconds or config.worker.idle_timeout_seconds
    left = plan.left(plan.status.idle_since, timeout)
    if left is None:
        return
    if left > 0:
        plan.again(left)
        return
    message = f"Idle for {timeout} s (idleTimeoutSeconds): the run is Done and its pod freed"
    plan.update(phase="Done", last_event=message)
    plan.condition(reasons.READY, "False", reasons.IDLE_TIMEOUT, message)
    # After the status: a query the runtime took meanwhile makes that write a conflict,
    # and the run goes on with its pod.
    plan.after.append(DeletePod(pod["metadata"]["name"], pod["metadata"]["uid"]))
    plan.announce("Normal", reasons.IDLE_TIMEOUT, message)


def _mcp_servers(plan: Plan) -> None:
    """What the runtime reported of its MCP servers: McpServersReady, and one Warning
    Event naming those it could not reach, when that changes (the runtime itself may not
    post Events)."""
    found = plan.status.mcp_servers
    if not found:
        return
    down = [s for s in found if s.state != "Connected"]
    if not down:
        message = f"{len(found)} MCP server(s) connected"
        plan.condition(reasons.MCP_SERVERS_READY, "True", reasons.MCP_SERVERS_CONNECTED, message)
        return
    before = _condition(plan, reasons.MCP_SERVERS_READY)
    message = "; ".join(
        f"MCP server {s.name} ({s.url}){' (required)' if s.required else ''} is unavailable: "
        f"{s.message}"
        for s in down
    )
    plan.condition(reasons.MCP_SERVERS_READY, "False", reasons.MCP_SERVER_UNAVAILABLE, message)
    after = _condition(plan, reasons.MCP_SERVERS_READY)
    if before is None or (before.status, before.message) != (after.status, after.message):
        plan.announce("Warning", reasons.MCP_SERVER_UNAVAILABLE, after.message)


# --- ends -----------------------------------------------------------------------------------------


def _ended(ctx: Context, plan: Plan) -> None:
    """A run that ended on its own (the runtime reported Done or Failed, or the pod
    succeeded): say so once, in Ready and in an Event. Killed runs and failures the
    operator decided have said so already (Ready is False then). Then its TTL clock."""
    if not plan.status.pod and ctx.pod is not None and owned_by(ctx.pod, plan.uid):
        # A run that ended before a pass recorded its pod (a warm pod's runtime reports
        # within moments of the claim, and its write wins over that pass's): record it now.
        plan.update(pod=ctx.pod["metadata"]["name"])
    if plan.status.phase == "Killed":
        # Its runs below go with it; a pass cut short by an API error resumes here.
        _stop_below(plan, plan.status.error or "killed")
    ready = _condition(plan, reasons.READY)
    if ready is None or ready.status != "False":
        if plan.status.phase == "Done":
            type_, reason, message = "Normal", reasons.COMPLETED, "the run is Done"
        elif plan.status.phase == "Failed":
            why = plan.status.error or "no reason given"
            type_, reason, message = "Warning", reasons.RUN_FAILED, f"the run failed: {why}"
            if any(s.required and s.state != "Connected" for s in plan.status.mcp_servers or ()):
                reason = reasons.MCP_SERVER_UNAVAILABLE
        else:
            return
        plan.condition(reasons.READY, "False", reason, message)
        plan.announce(type_, reason, message)
    _ttl_clock(ctx, plan)


def _ttl_clock(ctx: Context, plan: Plan) -> None:
    """A finished run nobody has to collect (no parent, or one that has ended too) is
    deleted `ttlSecondsAfterFinished` after it finished; until then, a pass when it is due."""
    ttl = plan.spec.ttl_seconds_after_finished
    if ttl is None:
        template = ((ctx.config or {}).get("spec") or {}).get("worker") or {}
        ttl = template.get("ttlSecondsAfterFinished")
    ready = _condition(plan, reasons.READY)
    if ttl is None or ready is None:
        return
    parent = ctx.parent if plan.spec.parent else None
    if parent is not None and (parent.get("status") or {}).get("phase") not in TERMINAL_PHASES:
        plan.again(float(max(ttl, 1)))  # its parent may still collect it: look again
        return
    left = plan.left(ready.last_transition_time, ttl)
    if left is not None and left > 0:
        plan.again(left)
        return
    plan.announce(
        "Normal", reasons.TTL_EXPIRED, f"finished {ttl} s ago (ttlSecondsAfterFinished): deleted"
    )
    plan.after.append(DeleteWorker(plan.uid))


def _stop(
    plan: Plan, pod: Body | None, reason: str, by: str | None, event: str = reasons.KILLED
) -> None:
    """The run stops: its pod goes (before the status says Killed: a pass cut short
    between the two stops it again), then Killed and one Event (reason `event`)."""
    who = f" by {by}" if by else ""
    message = f"killed{who}: {reason}"
    queued = _condition(plan, reasons.QUEUED)
    if queued is not None and queued.status == "True":
        # Its pod goes, and with it its Workload: its place in the queue is free.
        plan.condition(reasons.QUEUED, "False", reasons.KILLED, f"left its queue: {message}")
    if pod is not None and owned_by(pod, plan.uid):
        # Only this run's pod, and only the one we saw (a precondition on its uid).
        plan.before.append(DeletePod(pod["metadata"]["name"], pod["metadata"]["uid"]))
    plan.update(phase="Killed", error=reason, last_event=message)
    plan.condition(reasons.KILLED, "True", reasons.KILLED, message)
    plan.condition(reasons.READY, "False", reasons.KILLED, message)
    plan.announce("Warning", event, message)


def stop(body: Body, pod: Body | None, cause: str, by: str, now: dt.datetime) -> Plan | None:
    """The plan of a run below a killed one (`StopBelow`); None: nothing to stop (ended,
    or a spec that does not decode: failed already, with no pod)."""
    try:
        plan = read(body, now)
    except REFUSALS:
        return None
    if plan.status.phase in TERMINAL_PHASES:
        return None
    _stop(plan, pod, cause, by)
    plan.counts.append(("kill", "parent"))
    _stop_below(plan, cause)
    return plan


def _stop_below(plan: Plan, reason: str) -> None:
    """A killed run's children go with it, each with the reason `parent killed: <reason>`
    and one Event, before the garbage collector removes them (its pods would otherwise
    run on until then). Their specs stay as their spawner wrote them."""
    if reason.startswith(reasons.TREE_BUDGET_EXHAUSTED):
        return  # the whole tree stops, each run for that reason (`_tree_spent`)
    plan.before.append(StopBelow(_from_parent(reason)))


def _from_parent(reason: str) -> str:
    """A descendant's kill reason: the root's, said once however deep the tree."""
    return reason if reason.startswith(PARENT_KILLED) else PARENT_KILLED + reason


def _parent_killed(ctx: Context, plan: Plan) -> bool:
    """A run whose parent is killed, or asked to be, stops too: a child spawned while its
    parent was being killed, a child whose pod the cascade already removed, a cascade that
    a restart or an API error cut short. True when it did."""
    parent = ctx.parent or {}
    status = parent.get("status") or {}
    asked = (parent.get("spec") or {}).get("kill") or {}
    if status.get("phase") == "Killed":
        cause = status.get("error") or "killed"
    elif asked:
        cause = asked.get("reason") or "killed"
    else:
        return False
    cause = _from_parent(cause)
    _stop(plan, ctx.pod, cause, plan.spec.parent)
    plan.counts.append(("kill", "parent"))
    _stop_below(plan, cause)
    return True


def _tree_spent(ctx: Context, plan: Plan) -> bool:
    """A run whose tree spent its token budget stops (TreeBudgetExhausted). True if so."""
    root = ctx.chain[-1]
    tree = (root.get("status") or {}).get("tree") or {}
    if not tree.get("budgetExhausted"):
        return False
    reason = (
        f"{reasons.TREE_BUDGET_EXHAUSTED}: the tree used {tree.get('tokensUsed')} of its "
        f"{tree.get('tokenBudget')} tokens"
    )
    _stop(plan, ctx.pod, reason, root["metadata"]["name"], reasons.TREE_BUDGET_EXHAUSTED)
    plan.counts.append(("kill", "tree-budget"))
    return True


def _account(ctx: Context, plan: Plan) -> None:
    """A top-level run sums its tree (runs, live runs, tokens) into `status.tree`, at most
    every TREE_SUM_SECONDS. Past the tree's tokenBudget it marks the tree spent (and tells
    the root by one Event); each live run below then stops itself in its own pass
    (`_tree_spent`), so that no Worker has two writers."""
    below = ctx.below
    previous = plan.status.tree
    if not below and previous is None:
        return  # a run alone: no tree to speak of
    limits = _tree_limits(ctx.config)
    budget = limits.token_budget if limits else None
    used = tokens_used(plan.body) + sum(tokens_used(b) for b in below)
    live = [b for b in below if (b.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    was_spent = previous is not None and previous.budget_exhausted
    spent = was_spent or (budget is not None and used >= budget)
    tree = TreeStatus(
        runs=len(below),
        live=len(live),
        tokens_used=previous.tokens_used if was_spent and previous else used,
        token_budget=budget,
        budget_exhausted=spent,
    )
    if previous is not None and tree == previous.model_copy(update={"summed_at": None}):
        return
    left = plan.left(previous.summed_at if previous else None, TREE_SUM_SECONDS)
    if left is not None and left > 0 and spent == was_spent:
        plan.again(left)  # a busy tree is summed every few seconds, not on every report
        return
    plan.tree_runs = tree.runs
    plan.update(tree=tree.model_copy(update={"summed_at": clocks.stamp(plan.now)}))
    if spent and not was_spent:
        plan.announce(
            "Warning",
            reasons.TREE_BUDGET_EXHAUSTED,
            f"the tree used {used} of its tokenBudget {budget}: its {len(live)} live runs "
            "below are killed",
        )


def _tree_limits(config: Body | None) -> TreeLimits | None:
    """The limits of a tree: its root's AgentConfig's `spec.tree`; missing or invalid
    (reported on it), the defaults hold meanwhile."""
    try:
        return AgentConfigSpec.model_validate((config or {}).get("spec") or {}).tree
    except ValidationError:
        return None


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
