"""A Worker's pass decided: `decide` reads the context top to bottom; `started` finishes
a plan whose run's pod was just started."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, AgentConfigStatus, reasons
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import (
    AGENT_LABEL,
    BINDING_ANNOTATION,
    FROZEN_ANNOTATION,
    REVISION_LABEL,
)
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.worker import (
    TERMINAL_PHASES,
    InheritedBounds,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.core import clocks, identities
from agentworkers.core.access import access_objects, account_name, role_rules
from agentworkers.core.checks import check_kind, check_reasoning_api, check_secrets
from agentworkers.core.effective import EffectiveConfig, inherit, resolve
from agentworkers.core.inputs import check_bounds as check_inputs
from agentworkers.core.objects import meta, phase
from agentworkers.core.owners import owned_by, owner_reference, references
from agentworkers.core.pods import build_pod, pod_name
from agentworkers.core.pools import claimed_account
from agentworkers.core.quota import check_spawn as check_quota
from agentworkers.core.quota import in_scope
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
from agentworkers.core.tree import check_tree
from agentworkers.core.worker_plan.ends import (
    ended,
    parent_killed,
    stop_below,
    stop_run,
    sum_tree,
    tree_spent,
)
from agentworkers.core.worker_plan.plan import (
    Access,
    Bind,
    Body,
    Context,
    Grant,
    Plan,
    Start,
    Waiting,
    fail,
    read,
    read_status,
)
from agentworkers.core.worker_plan.running import follow, idle_clock, lost, mcp_servers, queued
from agentworkers.errors import REFUSALS, RunFailedError, describe
from agentworkers.virtualagent import Binding, Profile


def decide(ctx: Context) -> Plan:
    """The pass over `ctx.body`, from its context."""
    try:
        plan = read(ctx.body, ctx.now)
    except REFUSALS as error:
        if phase(ctx.body) == "Failed":
            return Plan(ctx.body, WorkerSpec(agent="?"), read_status(ctx.body), ctx.now, quiet=True)
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
        sum_tree(ctx, plan)
    mcp_servers(plan)
    if plan.status.phase in TERMINAL_PHASES:
        ended(ctx, plan)
        return
    if plan.spec.kill is not None:
        stop_run(plan, ctx.pod, plan.spec.kill.reason, plan.spec.kill.by)
        plan.counts.append(("kill", "spec"))
        stop_below(plan, plan.spec.kill.reason)
        return
    if ctx.broken is not None:
        raise ctx.broken
    if plan.spec.parent and (tree_spent(ctx, plan) or parent_killed(ctx, plan)):
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
        lost(plan)
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
    if queued(ctx, plan, pod):
        return
    follow(plan, pod)
    if plan.status.phase == "Idle":
        idle_clock(plan, pod, config)


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
    owners = [o.wire() for o in references(plan.body)]
    write = bool(annotations)
    if ctx.parent is not None and not owned_by(plan.body, meta(ctx.parent).uid):
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
    of = meta(body)
    rules = role_rules(of.name, body["spec"]["agent"], list(children))
    return Grant(of.namespace, account_name(of.name), rules)


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
        via = meta(ancestor).name
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
