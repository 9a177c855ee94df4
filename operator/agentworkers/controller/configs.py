"""Reconcile an AgentConfig: resolve its effective profile map and keep its revisions.

Idempotent from any line: revisions have deterministic names and are adopted when a
crashed pass already made them; status is recomputed from what exists. One lock per
AgentConfig keeps the AgentConfig handler and the profile watch from racing in this
process (operator replicas are active/standby through kopf peering).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, AgentConfigStatus, VirtualAgentProfileSpec, reasons
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.profile import VirtualAgentProfileStatus
from agentworkers.controller import metrics
from agentworkers.core.conditions import Status, set_condition
from agentworkers.core.revisions import (
    EffectiveMap,
    Standalone,
    effective_map,
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


def read_inputs(storage: Repository, namespace: str, name: str) -> Inputs | None:
    body = storage.get("agentconfigs", namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    try:
        spec = AgentConfigSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise describe(e) from e
    profiles = []
    for item in storage.of_agent("virtualagentprofiles", namespace, name):
        if item["metadata"].get("deletionTimestamp"):
            continue
        try:
            profile_spec = VirtualAgentProfileSpec.model_validate(item["spec"])
        except ValidationError as e:
            raise describe(e, f"{standalone_source(item['metadata']['name'])}: spec") from e
        meta = item["metadata"]
        profiles.append(
            (item, Standalone(meta["name"], profile_spec, meta.get("creationTimestamp", "")))
        )
    return Inputs(body, spec, profiles)


def reconcile(storage: Repository, namespace: str, name: str) -> None:
    """Bring the AgentConfig's revisions and statuses in line with its inputs (one pass at
    a time per AgentConfig: its `Requeue` sees to that)."""
    with metrics.RECONCILE_SECONDS.time():
        body = storage.get("agentconfigs", namespace, name)
        if body is None:
            return
        try:
            inputs = read_inputs(storage, namespace, name)
            if inputs is None:
                return
            effective = effective_map(name, inputs.spec, (s for _, s in inputs.profiles))
        except REFUSALS as error:
            _refuse(storage, body, error)
            return
        _accept(storage, inputs, effective)


def _status(body: dict[str, Any]) -> AgentConfigStatus:
    try:
        return AgentConfigStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return AgentConfigStatus()  # a status we cannot read is recomputed


def _refuse(storage: Repository, body: dict[str, Any], error: Refusal) -> None:
    """Invalid input never becomes a revision: say why, keep the last good one active."""
    metrics.CONFIG_REFUSALS.labels(reason=error.reason, stage="handler").inc()
    status = _status(body)
    generation = body["metadata"].get("generation")
    message = f"{error}; the last good revision stays active"
    conditions = set_condition(
        status.conditions, reasons.READY, "False", error.reason, message, generation
    )
    conditions = set_condition(
        conditions, reasons.REVISION_CURRENT, "False", error.reason, message, generation
    )
    updated = status.model_copy(
        update={"conditions": conditions, "observed_generation": generation}
    )
    if updated != status:
        storage.post_event(body, "Warning", error.reason, str(error))
    storage.patch_status(
        "agentconfigs", body["metadata"]["namespace"], body["metadata"]["name"], updated.wire()
    )
    # The profile at fault hears about it too.
    culprit = str(error.field).split(":", 1)[0]
    prefix = standalone_source("")
    if culprit.startswith(prefix):
        profile = storage.get(
            "virtualagentprofiles", body["metadata"]["namespace"], culprit[len(prefix) :]
        )
        if profile is not None:
            _set_profile_status(
                storage, profile, "False", error.reason, str(error), None, None, warn=True
            )


def _accept(storage: Repository, inputs: Inputs, effective: EffectiveMap) -> None:
    body, spec = inputs.body, inputs.spec
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    status = _status(body)
    plan = plan_revision(
        name,
        spec,
        effective,
        storage.revisions(namespace, name),
        status.active_revision.name if status.active_revision else None,
        storage.pinned_revisions(namespace, name),
    )
    if plan.create is not None:
        storage.create_revision(body, plan.create)
        metrics.REVISIONS_CREATED.inc()
        storage.post_event(
            body,
            "Normal",
            reasons.REVISION_CREATED,
            f"revision {plan.active.revision} ({plan.active.name}, "
            f"digest {plan.active.digest[:12]}) "
            f"with {len(effective.profile_map.profiles)} profile(s)",
        )
    generation = body["metadata"].get("generation")
    active = RevisionRef(
        name=plan.active.name, revision=plan.active.revision, digest=plan.active.digest
    )
    message = f"revision {active.revision} is active"
    if effective.excluded:
        left_out = ", ".join(f"{n} ({e.reason})" for n, e in sorted(effective.excluded.items()))
        message += f"; left out of its map: {left_out}"
    conditions = set_condition(
        status.conditions, reasons.READY, "True", reasons.REVISION_ACTIVE, message, generation
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
            _set_profile_status(
                storage, item, "False", refusal.reason, str(refusal), None, None, warn=True
            )
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
    warn: bool = False,
) -> None:
    try:
        status = VirtualAgentProfileStatus.model_validate(body.get("status") or {})
    except ValidationError:
        status = VirtualAgentProfileStatus()
    generation = body["metadata"].get("generation")
    conditions = set_condition(
        status.conditions, reasons.ACCEPTED, accepted, reason, message, generation
    )
    updated = VirtualAgentProfileStatus(
        observed_generation=generation,
        hash=profile_hash if accepted == "True" else status.hash,
        revision=revision if accepted == "True" else status.revision,
        conditions=conditions,
    )
    if updated == status:
        return
    if warn:
        storage.post_event(body, "Warning", reason, message)
    storage.patch_status(
        "virtualagentprofiles",
        body["metadata"]["namespace"],
        body["metadata"]["name"],
        updated.wire(),
    )
