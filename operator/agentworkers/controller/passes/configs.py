"""Reconcile an AgentConfig: resolve its effective profile map and keep its revisions.

Idempotent from any line: revisions have deterministic names and are adopted when a
crashed pass already made them; status is recomputed from what exists. One lock per
AgentConfig keeps the AgentConfig handler and the profile watch from racing in this
process (across replicas, only the holder of the namespace's Lease reconciles: `sharding`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, AgentConfigStatus, VirtualAgentProfileSpec, reasons
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.profile import VirtualAgentProfileStatus
from agentworkers.controller.infra import metrics
from agentworkers.controller.passes.requeue import Later
from agentworkers.core.conditions import Status, set_condition, summary_conditions, truncate
from agentworkers.core.objects import meta
from agentworkers.core.revisions import (
    EffectiveMap,
    Fingerprint,
    RevisionPlan,
    SettleWindow,
    Standalone,
    applied_by,
    effective_map,
    fingerprint,
    plan_revision,
    standalone_source,
)
from agentworkers.errors import REFUSALS, Refusal, describe
from agentworkers.kube.repository import Repository
from agentworkers.virtualagent import profile_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What one pass reads: the config and the standalone profiles that name it."""

    body: dict[str, Any]
    spec: AgentConfigSpec
    profiles: list[tuple[dict[str, Any], Standalone]]


def live_profiles(storage: Repository, namespace: str, agent: str) -> list[dict[str, Any]]:
    """The standalone profiles naming `agent`, but those being deleted: from the store
    (the operator's watches), so a pass or a review costs no API read."""
    return [
        item
        for item in storage.of_agent("virtualagentprofiles", namespace, agent)
        if not meta(item).deleting
    ]


def read_profiles(
    profile_bodies: list[dict[str, Any]], *, skip_invalid: bool = False
) -> list[tuple[dict[str, Any], Standalone]]:
    """Each profile with its spec read; an invalid one is a refusal naming it, or, with
    `skip_invalid`, left out (admission: a neighbour's fault is reported on it)."""
    profiles = []
    for item in profile_bodies:
        read = meta(item)
        try:
            profile_spec = VirtualAgentProfileSpec.model_validate(item["spec"])
        except ValidationError as e:
            if skip_invalid:
                continue
            raise describe(e, f"{standalone_source(read.name)}: spec") from e
        profiles.append((item, Standalone(read.name, profile_spec, read.creation_timestamp or "")))
    return profiles


def read_inputs(body: dict[str, Any], profile_bodies: list[dict[str, Any]]) -> Inputs:
    try:
        spec = AgentConfigSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise describe(e) from e
    return Inputs(body, spec, read_profiles(profile_bodies))


def reconcile(
    storage: Repository,
    namespace: str,
    name: str,
    settle: SettleWindow | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Bring the AgentConfig's revisions and statuses in line with its inputs (one pass at
    a time per AgentConfig: its `Requeue` sees to that). With a `settle` window, a change
    is cut (or refused) only once the agent's inputs have kept still for it: one change
    set, one revision."""
    key = (namespace, name)
    with metrics.RECONCILE_SECONDS.time():
        body = storage.get("agentconfigs", namespace, name)
        profile_bodies = live_profiles(storage, namespace, name)
        if body is None or meta(body).deleting:
            _agent_missing(storage, name, profile_bodies)
            if settle is not None:
                settle.settled(key)
            return
        inputs_now = fingerprint([body, *profile_bodies])
        status = _status(body)
        try:
            inputs = read_inputs(body, profile_bodies)
            effective = effective_map(name, inputs.spec, (s for _, s in inputs.profiles))
        except REFUSALS as error:
            if not _reported(status, error):
                _settle(storage, settle, body, status, inputs_now, clock())
            _refuse(storage, body, status, error)
        else:
            plan = plan_revision(
                name,
                inputs.spec,
                effective,
                storage.revisions(namespace, name),
                status.active_revision.name if status.active_revision else None,
                storage.pinned_revisions(namespace, name),
            )
            if status.active_revision is None or plan.active.name != status.active_revision.name:
                _settle(storage, settle, body, status, inputs_now, clock())
            _accept(storage, inputs, effective, plan, status)
        if settle is not None:
            settle.settled(key)


def _settle(
    storage: Repository,
    settle: SettleWindow | None,
    body: dict[str, Any],
    status: AgentConfigStatus,
    inputs: Fingerprint,
    now: float,
) -> None:
    """Hold a change until its agent's inputs have kept still for the window: say so
    (Reconciling=True) and come back when the window ends."""
    if settle is None:
        return
    config = meta(body)
    remaining = settle.remaining((config.namespace, config.name), inputs, now)
    if remaining <= 0:
        return
    active = status.active_revision
    message = (
        f"a change waits until the agent's inputs keep still for {settle.seconds:g} s "
        "(the rest of its change set), then it is cut into one revision; "
        + (f"revision {active.revision} stays active" if active else "no revision yet")
    )
    generation = config.generation
    conditions = summary_conditions(
        status.conditions, "False", reasons.SETTLING, message, generation, reconciling=True
    )
    updated = status.model_copy(
        update={"conditions": conditions, "observed_generation": generation}
    )
    if updated != status:
        storage.patch_status("agentconfigs", config.namespace, config.name, updated.wire())
    raise Later(remaining)


def _agent_missing(storage: Repository, agent: str, profiles: list[dict[str, Any]]) -> None:
    """Profiles of an agent with no AgentConfig (yet) say so: valid, waiting for it (a sync
    may apply them first; Argo CD's waves go on, since they are not at fault)."""
    for item in profiles:
        _set_profile_status(
            storage,
            item,
            "False",
            reasons.AGENT_CONFIG_MISSING,
            f"AgentConfig {agent!r} does not exist (yet); the profile joins its map once it does",
            None,
            None,
        )


def _status(body: dict[str, Any]) -> AgentConfigStatus:
    try:
        return AgentConfigStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return AgentConfigStatus()  # a status we cannot read is recomputed


def refusal_message(error: Refusal) -> str:
    return f"{error}; the last good revision stays active"


def _reported(status: AgentConfigStatus, error: Refusal) -> bool:
    """Does the status say this refusal already (nothing is pending, nothing to hold)?"""
    stalled = next((c for c in status.conditions if c.type == reasons.STALLED), None)
    return (
        stalled is not None
        and stalled.status == "True"
        and (stalled.reason, stalled.message) == (error.reason, truncate(refusal_message(error)))
    )


def _refuse(
    storage: Repository, body: dict[str, Any], status: AgentConfigStatus, error: Refusal
) -> None:
    """Invalid input never becomes a revision: say why (Stalled=True, which Flux reports
    as a failure at once), keep the last good one active."""
    metrics.CONFIG_REFUSALS.labels(reason=error.reason, stage="handler").inc()
    config = meta(body)
    generation = config.generation
    message = refusal_message(error)
    conditions = summary_conditions(
        status.conditions, "False", error.reason, message, generation, stalled=True
    )
    conditions = set_condition(
        conditions, reasons.REVISION_CURRENT, "False", error.reason, message, generation
    )
    updated = status.model_copy(
        update={"conditions": conditions, "observed_generation": generation}
    )
    if updated != status:
        storage.post_event(body, "Warning", error.reason, str(error))
        storage.patch_status("agentconfigs", config.namespace, config.name, updated.wire())
    # The profile at fault hears about it too.
    culprit = str(error.field).split(":", 1)[0]
    prefix = standalone_source("")
    if culprit.startswith(prefix):
        profile = storage.get("virtualagentprofiles", config.namespace, culprit[len(prefix) :])
        if profile is not None:
            _set_profile_status(storage, profile, "False", error.reason, str(error), None, None)


def _accept(
    storage: Repository,
    inputs: Inputs,
    effective: EffectiveMap,
    plan: RevisionPlan,
    status: AgentConfigStatus,
) -> None:
    body = inputs.body
    config = meta(body)
    namespace, name = config.namespace, config.name
    if plan.create is not None:
        storage.create_revision(
            body, plan.create, applied_by([body, *(item for item, _ in inputs.profiles)])
        )
        metrics.REVISIONS_CREATED.inc()
        storage.post_event(
            body,
            "Normal",
            reasons.REVISION_CREATED,
            f"revision {plan.active.revision} ({plan.active.name}, "
            f"digest {plan.active.digest[:12]}) "
            f"with {len(effective.profile_map.profiles)} profile(s)",
        )
    elif status.active_revision is not None and plan.active.name != status.active_revision.name:
        storage.post_event(
            body,
            "Normal",
            reasons.REVISION_REACTIVATED,
            f"revision {plan.active.revision} ({plan.active.name}, "
            f"digest {plan.active.digest[:12]}) is active again: it holds this content",
        )
    generation = config.generation
    active = RevisionRef(
        name=plan.active.name, revision=plan.active.revision, digest=plan.active.digest
    )
    message = f"revision {active.revision} is active"
    if effective.excluded:
        left_out = ", ".join(f"{n} ({e.reason})" for n, e in sorted(effective.excluded.items()))
        message += f"; left out of its map: {left_out}"
    conditions = summary_conditions(
        status.conditions, "True", reasons.REVISION_ACTIVE, message, generation
    )
    conditions = set_condition(
        conditions, reasons.REVISION_CURRENT, "True", reasons.UP_TO_DATE, message, generation
    )
    updated = AgentConfigStatus(
        observed_generation=generation,
        active_revision=active,
        profiles=len(effective.profile_map.profiles),
        conditions=conditions,
    )
    if updated != status:
        storage.patch_status("agentconfigs", namespace, name, updated.wire())
    for old in plan.prune:
        storage.delete_revision(namespace, old)

    hashes = {p.key: profile_hash(p) for p in effective.profile_map.profiles}
    for item, standalone in inputs.profiles:
        key = standalone.spec.key
        refusal = effective.excluded.get(standalone.name)
        if refusal is not None:
            _set_profile_status(storage, item, "False", refusal.reason, str(refusal), None, None)
        elif standalone.name in effective.overridden:
            _set_profile_status(
                storage,
                item,
                "False",
                reasons.OVERRIDDEN,
                f"the virtualAgents section of AgentConfig {name} declares key {key!r}; it wins",
                None,
                active.name,
            )
        else:
            _set_profile_status(
                storage,
                item,
                "True",
                reasons.INCLUDED,
                f"in revision {active.revision} of AgentConfig {name}",
                hashes.get(key),
                active.name,
            )


def _set_profile_status(
    storage: Repository,
    body: dict[str, Any],
    accepted: Status,
    reason: str,
    message: str,
    profile_hash: str | None,
    revision: str | None,
) -> None:
    """Accepted says whether the profile is in the active map; Ready/Stalled what a GitOps
    engine should make of it: in the map, or shadowed by the section (Ready); waiting for
    its AgentConfig (not Ready, not stalled: it joins once the config comes); refused or
    left out (Stalled, with a Warning Event: it needs a change in git)."""
    try:
        status = VirtualAgentProfileStatus.model_validate(body.get("status") or {})
    except ValidationError:
        status = VirtualAgentProfileStatus()
    profile = meta(body)
    generation = profile.generation
    ready = accepted == "True" or reason == reasons.OVERRIDDEN
    stalled = not ready and reason != reasons.AGENT_CONFIG_MISSING
    conditions = set_condition(
        status.conditions, reasons.ACCEPTED, accepted, reason, message, generation
    )
    conditions = summary_conditions(
        conditions, "True" if ready else "False", reason, message, generation, stalled=stalled
    )
    updated = VirtualAgentProfileStatus(
        observed_generation=generation,
        hash=profile_hash if accepted == "True" else status.hash,
        revision=revision if accepted == "True" else status.revision,
        conditions=conditions,
    )
    if updated == status:
        return
    if stalled:
        storage.post_event(body, "Warning", reason, message)
    storage.patch_status(
        "virtualagentprofiles",
        profile.namespace,
        profile.name,
        updated.wire(),
    )
