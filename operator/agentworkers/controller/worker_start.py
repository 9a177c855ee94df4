"""A Worker's way to its pod: bind a profiled child, grant its parent access, start the run.

Every write here is safe to repeat: the binding carries a resourceVersion precondition
(it is written once), the pod has a deterministic name and is adopted when a crashed pass
made it already, the runtime's RBAC objects are created or kept (its ServiceAccount before
the pod, its Role and RoleBinding after: two writes on the way to the pod, not four; one
when the run takes a pooled account, `controller.identities`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf

from agentworkers.api import AgentConfigSpec, reasons
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import (
    AGENT_LABEL,
    BINDING_ANNOTATION,
    FROZEN_ANNOTATION,
    REVISION_LABEL,
)
from agentworkers.api.worker import InheritedBounds
from agentworkers.controller import identities, metrics, pools
from agentworkers.controller.worker_pass import Worker, load
from agentworkers.core import clocks
from agentworkers.core.access import access_objects, account_name, role_rules
from agentworkers.core.checks import check_kind, check_reasoning_api, check_secrets
from agentworkers.core.effective import EffectiveConfig, inherit, resolve
from agentworkers.core.identities import run_as
from agentworkers.core.inputs import check_bounds as check_inputs
from agentworkers.core.owners import owner_reference
from agentworkers.core.pods import build_pod
from agentworkers.core.spawning import (
    ParentRun,
    ancestor_profile,
    check_spawn,
    encode_binding,
    summary,
    verify_run_start,
)
from agentworkers.core.tracing import check_child_trace
from agentworkers.errors import REFUSALS, ApiError, RunFailedError
from agentworkers.kube.repository import Conflict, Repository
from agentworkers.virtualagent import Profile


def bind(
    storage: Repository,
    worker: Worker,
    parent_body: dict[str, Any] | None,
    parent: ParentRun | None,
    live: RevisionRef,
) -> None:
    """Check the spawn and write the binding annotation, once, before any pod exists."""
    frozen_revision = (
        storage.revision_spec(worker.namespace, parent.frozen.name)
        if parent and parent.frozen
        else None
    )
    try:
        binding = check_spawn(worker.spec, parent, frozen_revision, live)
    except REFUSALS as error:
        metrics.SPAWN_REFUSALS.labels(reason=error.reason, stage="handler").inc()
        raise
    revision = parent.frozen.name if parent and parent.frozen else ""
    adopt(
        storage,
        worker,
        parent_body,
        {BINDING_ANNOTATION: encode_binding(binding)},
        {AGENT_LABEL: worker.spec.agent, REVISION_LABEL: revision},
    )
    worker.update(binding=summary(binding), revision=revision or None)
    worker.condition(
        reasons.PROFILE_BOUND,
        "True",
        reasons.BOUND,
        f"profile {binding.key!r} pinned to revision {binding.config_revision_id}",
    )


def adopt(
    storage: Repository,
    worker: Worker,
    parent_body: dict[str, Any] | None,
    annotations: dict[str, str],
    labels: dict[str, str],
) -> None:
    """Write the binding and the parent's ownerReference (the child stays owned by its
    parent), and let the parent at the child: granted until the child's run starts, also
    when its creator set the reference already and there is nothing to write."""
    owners = list(worker.body["metadata"].get("ownerReferences") or [])
    write = bool(annotations)
    if parent_body is not None and parent_body["metadata"]["uid"] not in {
        o.get("uid") for o in owners
    }:
        owners.append(owner_reference(parent_body, controller=False))
        write = True
    if write:
        try:
            version = storage.patch_metadata("workers", worker.body, annotations, labels, owners)
        except ApiError as e:
            if e.status != 409:
                raise
            # Someone wrote in between (perhaps a binding): read again rather than overwrite.
            raise kopf.TemporaryError("the Worker changed while binding; retrying", delay=1) from e
        meta = worker.body["metadata"]
        meta["resourceVersion"] = version
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    # Asked again on each pass until the run starts (the same rules are not written twice),
    # so a child whose creator set the reference already is granted too.
    if parent_body is not None and (write or not worker.status.pod):
        grant(storage, parent_body)


def grant(storage: Repository, body: dict[str, Any]) -> None:
    """Keep a runtime's Role in step with its children (it may read, patch, delete them)."""
    meta = body["metadata"]
    children = storage.children(meta["namespace"], meta["name"])
    rules = role_rules(meta["name"], body["spec"]["agent"], children)
    storage.set_role_rules(meta["namespace"], account_name(meta["name"]), rules)


def _access(
    storage: Repository,
    worker: Worker,
    config: AgentConfigSpec,
    pod: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The run's ServiceAccount, Role and RoleBinding; the binding's subject the account
    of `pod` when it is a warm pod the run claimed or runs as a pooled account."""
    children = storage.children(worker.namespace, worker.name)
    return access_objects(
        worker.body,
        worker.spec.agent,
        children,
        config.worker.service_account_annotations,
        account=(pools.claimed_account(pod) or identities.of_pod(pod)) if pod is not None else None,
    )


def grant_access(
    storage: Repository, worker: Worker, config: AgentConfigSpec, pod: dict[str, Any]
) -> None:
    """The runtime's Role and RoleBinding, made after its pod: off the path to the pod (the
    runtime retries a refused first call), and done by the pass that records the pod (a
    pass that finds a pod its Worker does not record yet makes them again)."""
    _, *rbac = _access(storage, worker, config, pod)
    _grant_rbac(storage, worker, rbac)


def _grant_rbac(storage: Repository, worker: Worker, rbac: list[dict[str, Any]]) -> None:
    if not storage.ensure_access(rbac):
        grant(storage, worker.body)  # made by an earlier pass: its children may have changed


def start(
    storage: Repository,
    worker: Worker,
    config: AgentConfigSpec,
    active: RevisionRef,
    parent: ParentRun | None,
    ancestor: dict[str, Any] | None,
) -> dict[str, Any]:
    """Run start: verify the pin against the current map, freeze, create the one pod."""
    profile: Profile | None = None
    if worker.spec.profile:
        current = storage.revision_spec(worker.namespace, active.name)
        try:
            binding, profile = verify_run_start(
                worker.spec,
                worker.annotations.get(BINDING_ANNOTATION),
                worker.status.binding,
                parent,
                current,
            )
        except REFUSALS as error:
            metrics.PIN_FAILURES.labels(reason=error.reason).inc()
            raise
        worker.update(binding=summary(binding))
    check_secrets(worker.spec, config.allowed_secrets)
    check_reasoning_api(worker.spec, config.model)
    check_kind(worker.spec)
    if parent is not None:
        check_child_trace(worker.spec.traceparent, parent.name, parent.trace_id)
    effective = resolve(config, worker.spec, profile)
    via = ""
    if ancestor is not None and not worker.spec.profile:
        effective, profile = _bounded(worker, config, ancestor, effective)
        via = ancestor["metadata"]["name"]
    # Admission's check again (it can be off): the inputs fit the profile that bounds the run.
    check_inputs(worker.spec.inputs, profile, via)
    account, *rbac = _access(storage, worker, config)
    deadline = clocks.deadline(
        worker.spec.deadline_seconds or config.worker.deadline_seconds,
        parent.deadline_at if parent else None,
        dt.datetime.now(dt.UTC),
    )
    if deadline is not None:
        worker.update(deadline_at=deadline[1])
    pod = build_pod(
        worker.body,
        worker.spec,
        config,
        effective,
        service_account=account_name(worker.name),
        deadline_seconds=deadline[0] if deadline else None,
    )
    # A top-level run freezes its agent's active revision: its children bind against it.
    frozen = None if worker.spec.profile else active
    if frozen is not None:
        pod["metadata"]["annotations"] = {FROZEN_ANNOTATION: frozen.model_dump_json(by_alias=True)}
    # A ready warm pod of the agent with this pod's settings, if its pool has one: no pod
    # and no account to make. Its account gets the run's Role only once it is the run's.
    created = pools.claim(
        storage,
        worker.body,
        config,
        pod,
        active,
        frozen,
        deadline[0] if deadline else None,
        effective,
    )
    if created is not None:
        rbac = _access(storage, worker, config, created)[1:]
    else:
        # An account of the agent's pool made ahead, if one is free: none to make first.
        pooled = identities.take(storage, worker.body, config)
        if pooled is None:
            storage.ensure_access([account])  # the API server admits no pod naming an absent one
        else:
            run_as(pod, pooled)
        try:
            created = storage.create_pod(pod, worker.body["metadata"]["uid"])
        except Conflict as e:
            raise RunFailedError(str(e), reason=reasons.POD_CONFLICT) from e
        if pooled is not None:  # the account the pod runs as (an earlier pass's, if adopted)
            rbac = _access(storage, worker, config, created)[1:]
    _grant_rbac(storage, worker, rbac)
    metrics.SPAWNS.inc()
    born = clocks.parse(worker.body["metadata"]["creationTimestamp"])
    metrics.POD_LATENCY.observe(max((dt.datetime.now(dt.UTC) - born).total_seconds(), 0))
    return created


def _bounded(
    worker: Worker, config: AgentConfigSpec, ancestor: dict[str, Any], own: EffectiveConfig
) -> tuple[EffectiveConfig, Profile]:
    """A run below a profile run never gets more than that run's effective config; and
    that run's profile, which bounds it."""
    above = load(ancestor)
    profile = ancestor_profile(
        above.spec, above.annotations.get(BINDING_ANNOTATION), above.status.binding
    )
    if profile is None:
        worker.wait(reasons.ANCESTOR_NOT_BOUND, f"worker {above.name} has no profile binding yet")
    via = InheritedBounds(worker=above.name, profile=profile.key)
    worker.update(inherited=via)
    return inherit(own, resolve(config, above.spec, profile), via), profile
