"""Warm pools: pods of an agent started ahead of its runs. Pure: manifests, hashes, plans.

A warm pod is the pod a plain top-level run of the agent would get at its active
revision (`core.pods.build_pod`), less the run: no Worker named, no effective config, an
account of its own with no rights, and a downward-API file where its claim will appear.
A Worker may claim one only when the pod its own run would get has the same settings:
`settings_hash` of both manifests, with what names the run taken out, is equal (a run
that keeps other skills, secrets or MCP header Secrets mounts other volumes and starts
cold). The claim (`Claim`, an annotation on the pod) carries the run's name, uid,
revision and effective config; the pod's ownerReference moves to the Worker, so the pod
goes with the run, never back to the pool.

`plan_pool` decides, from the pods the store holds, what a pool pass does: which pods to
delete (a stale revision or settings, past their idle lifetime, ended, more than the
size) and how many to create.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, StrictStr

from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.common import KubeModel
from agentworkers.api.names import (
    AGENT_LABEL,
    BINDING_ANNOTATION,
    CLAIM_ANNOTATION,
    CLAIMED_LABEL,
    FROZEN_ANNOTATION,
    POD_SETTINGS_LABEL,
    POOL_LABEL,
    REVISION_LABEL,
    WORKER_LABEL,
)
from agentworkers.api.workerpod import WarmPool
from agentworkers.core import clocks
from agentworkers.core.effective import EffectiveConfig
from agentworkers.core.objects import meta, phase
from agentworkers.core.owners import owner_reference
from agentworkers.core.pods import EFFECTIVE_CONFIG_ENV
from agentworkers.core.spawning import decode_binding
from agentworkers.errors import WarmPodMismatchError

# A warm pod and its ServiceAccount share a name; never the `worker-` prefix of a run's
# own account (`core.access`), so admission tells the two apart.
POOL_PREFIX = "warm-"
# Where the claim appears in a warm pod (a downward-API volume of the claim annotation).
CLAIM_DIR = "/var/run/agentworkers/claim"
CLAIM_FILE_ENV = "AGENTWORKERS_CLAIM_FILE"
WARM_REVISION_ENV = "AGENTWORKERS_WARM_REVISION"
# The model endpoint of a plain run of the agent (`effective.ModelEndpoint`, as JSON): a
# warm runtime imports its provider's SDK and builds its client while it waits.
WARM_MODEL_ENV = "AGENTWORKERS_WARM_MODEL"
# The env entries and args that name a run: out of a warm pod, out of the settings hash.
RUN_ENV = frozenset({"AGENTWORKERS_WORKER", EFFECTIVE_CONFIG_ENV})
# A refill waits for claims to pause this long (seconds), but never longer than
# REFILL_MAX_WAIT after the pool fell short: a burst's runs do not share their first
# moments with the starts of the pods that replace theirs (on one machine, measured: a
# run claimed during a refill's starts reported Running 0.5-1 s later instead of 0.1-0.2).
REFILL_QUIET = 1.0
REFILL_MAX_WAIT = 5.0
# Pods a pool pass creates at most: a large pool fills over a few passes, and a pass
# that fails midway has made few.
CREATE_PER_PASS = 10
# A pool's counts (the AgentConfig's status.warmPool) are written at most this often
# (seconds): under a burst every claim changes them, and each write is an event to every
# watcher of AgentConfigs (a GitOps controller's too); people read them, not programs.
COUNTS_SECONDS = 1.0


class Claim(KubeModel):
    """What the operator writes on a warm pod it gives to a run; its runtime reads it."""

    worker: StrictStr = Field(description="Name of the Worker the pod now runs.")
    uid: StrictStr = Field(description="Its uid.")
    revision: RevisionRef = Field(description="The revision the pod was warmed at.")
    effective: StrictStr = Field(description="The run's effective config, as JSON.")


def account_name(agent: str) -> str:
    """A fresh name for a warm pod and its ServiceAccount (never reused: a RoleBinding a
    finished run left behind can never bind a later pod's account)."""
    return f"{POOL_PREFIX}{agent}-{secrets.token_hex(4)}"[:253]


def is_pool_account(account: str) -> bool:
    return account.startswith(POOL_PREFIX)


def settings_hash(pod: dict[str, Any]) -> str:
    """What a pod's manifest says of where and how it runs, without the run it serves:
    two manifests of equal hash are interchangeable for a run (its volumes, image,
    resources, placement, security context)."""
    spec = copy.deepcopy(pod["spec"])
    for key in ("serviceAccountName", "activeDeadlineSeconds", "automountServiceAccountToken"):
        spec.pop(key, None)
    for container in spec.get("containers") or []:
        container.pop("args", None)
        container["env"] = [e for e in container.get("env") or [] if e["name"] not in RUN_ENV]
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def warm_pod(
    template: dict[str, Any],
    agent: str,
    revision: RevisionRef,
    owner: dict[str, Any],
    name: str,
) -> dict[str, Any]:
    """A warm pod of `agent` from `template` (the pod `core.pods.build_pod` makes for a
    plain run of it), owned by the AgentConfig `owner` (removed with it), running as the
    account `name` (its own, with no rights until a claim binds a run's Role to it)."""
    pod = copy.deepcopy(template)
    namespace = meta(owner).namespace
    container = pod["spec"]["containers"][0]
    container["args"] = ["--warm", f"--namespace={namespace}"]
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    plain = EffectiveConfig.model_validate_json(env[EFFECTIVE_CONFIG_ENV])
    container["env"] = [
        *(e for e in (container.get("env") or []) if e["name"] not in RUN_ENV),
        {"name": WARM_REVISION_ENV, "value": revision.name},
        {"name": WARM_MODEL_ENV, "value": plain.endpoint.model_dump_json(by_alias=True)},
        {"name": CLAIM_FILE_ENV, "value": f"{CLAIM_DIR}/claim"},
    ]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": "claim", "mountPath": CLAIM_DIR, "readOnly": True},
    ]
    field = f"metadata.annotations['{CLAIM_ANNOTATION}']"
    claim_file = {"path": "claim", "fieldRef": {"fieldPath": field}}
    pod["spec"]["volumes"] = [
        *(pod["spec"].get("volumes") or []),
        {"name": "claim", "downwardAPI": {"items": [claim_file]}},
    ]
    pod["spec"]["serviceAccountName"] = name
    pod["spec"]["automountServiceAccountToken"] = True
    pod["spec"].pop("activeDeadlineSeconds", None)
    pod["metadata"] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            # Present (empty) so that the operator's pod watch, filtered on it, sees it.
            WORKER_LABEL: "",
            AGENT_LABEL: agent,
            POOL_LABEL: agent,
            REVISION_LABEL: revision.name,
            POD_SETTINGS_LABEL: settings_hash(template),
        },
        "ownerReferences": [owner_reference(owner)],
    }
    return pod


def claim_patch(
    pod: dict[str, Any],
    worker_body: dict[str, Any],
    claim: Claim,
    frozen: RevisionRef | None,
    deadline_seconds: int | None,
) -> list[dict[str, Any]]:
    """The one write that gives a warm pod to a run, as a JSON patch (RFC 6902) whose
    `test` operations are its preconditions: the pod is the one the store showed (its uid),
    of the revision and settings the claim chose it for, still in its agent's pool and not
    being deleted. A second claimer, or a pool pass's delete, makes it fail (422, or 404
    once the pod is gone), so no warm pod serves two runs; a write that changed nothing of
    that (the kubelet's status, a finalizer) does not, as a `resourceVersion` precondition
    would. The pod leaves the pool, names the run, carries the claim and, for a top-level
    run, the revision it froze, and is owned by the Worker alone."""
    warm = meta(pod)
    annotations = {CLAIM_ANNOTATION: claim.model_dump_json(by_alias=True)}
    if frozen is not None:
        annotations[FROZEN_ANNOTATION] = frozen.model_dump_json(by_alias=True)
    agent = warm.labels[AGENT_LABEL]
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": warm.uid},
        # The API server's JSON patch: a test of null passes only where the field is absent.
        {"op": "test", "path": "/metadata/deletionTimestamp", "value": None},
        *(
            {"op": "test", "path": _label(key), "value": warm.labels[key]}
            for key in (POOL_LABEL, REVISION_LABEL, POD_SETTINGS_LABEL)
        ),
        {"op": "remove", "path": _label(POOL_LABEL)},
        {"op": "add", "path": _label(CLAIMED_LABEL), "value": agent},
        {"op": "add", "path": _label(WORKER_LABEL), "value": meta(worker_body).name},
        {"op": "add", "path": "/metadata/ownerReferences", "value": [owner_reference(worker_body)]},
    ]
    if warm.annotations:
        ops += [
            {"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
            for k, v in annotations.items()
        ]
    else:  # a warm pod is made with none
        ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    if deadline_seconds:
        # A pod may be given a deadline it did not have (never a longer one).
        ops.append({"op": "add", "path": "/spec/activeDeadlineSeconds", "value": deadline_seconds})
    return ops


def _escape(key: str) -> str:
    """A map key as one JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _label(key: str) -> str:
    return f"/metadata/labels/{_escape(key)}"


def check_claim(claim: Claim, warm_revision: str, worker_body: dict[str, Any]) -> None:
    """The runtime's own check of its claim, before the run's binding and pin checks: the
    claim names this very Worker, and the revision the pod was warmed at is the one the
    claim, and a profiled run's binding, name. A pod warmed under one revision never runs
    a run bound to another, whatever the operator wrote."""
    worker = meta(worker_body)
    if (claim.worker, claim.uid) != (worker.name, worker.uid):
        raise WarmPodMismatchError(
            f"the claim names worker {claim.worker} ({claim.uid}), not this one",
            field=CLAIM_ANNOTATION,
        )
    if claim.revision.name != warm_revision:
        raise WarmPodMismatchError(
            f"the pod was warmed at revision {warm_revision}; the claim names "
            f"{claim.revision.name}",
            field=CLAIM_ANNOTATION,
        )
    annotation = worker.annotations.get(BINDING_ANNOTATION)
    if annotation is not None:
        binding = decode_binding(annotation)
        warmed = (str(claim.revision.revision), claim.revision.digest)
        if (binding.config_revision_id, binding.config_digest) != warmed:
            raise WarmPodMismatchError(
                f"the run is bound to revision {binding.config_revision_id}; the pod was "
                f"warmed at revision {claim.revision.revision}",
                field=BINDING_ANNOTATION,
            )


# --- the plan of a pool pass -------------------------------------------------------------


@dataclass(frozen=True)
class PoolPod:
    """What a pool pass needs of one of its pods."""

    name: str
    uid: str
    version: str
    revision: str
    settings: str
    created: dt.datetime
    phase: str | None
    deleting: bool = False

    @property
    def ready(self) -> bool:
        return self.phase == "Running" and not self.deleting

    @classmethod
    def of(cls, body: dict[str, Any]) -> PoolPod:
        of = meta(body)
        return cls(
            name=of.name,
            uid=of.uid,
            version=of.resource_version,
            revision=of.labels.get(REVISION_LABEL, ""),
            settings=of.labels.get(POD_SETTINGS_LABEL, ""),
            created=clocks.parse(of.creation_timestamp or "1970-01-01T00:00:00Z"),
            phase=phase(body),
            deleting=of.deleting,
        )


@dataclass(frozen=True)
class PoolPlan:
    create: int
    # Each pod to delete, with why (stale, idle, ended, surplus).
    delete: tuple[tuple[PoolPod, str], ...]
    ready: int
    starting: int
    # Seconds until the next pod's idle lifetime ends (a pass then); None: no clock.
    again_in: float | None


def plan_pool(
    pool: WarmPool | None,
    revision: str | None,
    settings: str | None,
    pods: Sequence[PoolPod],
    now: dt.datetime,
) -> PoolPlan:
    """What a pass over one agent's pool does. `revision`, `settings`: those a warm pod
    must have now (None: the agent has no pod to warm yet, so none is kept). `pods`: the
    pool's unclaimed pods."""
    size = pool.size if pool is not None and revision and settings else 0
    idle = pool.idle_seconds if pool is not None else 0
    delete: list[tuple[PoolPod, str]] = []
    kept: list[PoolPod] = []
    for pod in pods:
        if pod.deleting:
            continue
        if pod.revision != revision or pod.settings != settings:
            delete.append((pod, "stale"))
        elif pod.phase in ("Succeeded", "Failed"):
            delete.append((pod, "ended"))
        elif (now - pod.created).total_seconds() >= idle:
            delete.append((pod, "idle"))
        else:
            kept.append(pod)
    # Over the size: the pods not ready yet go first, then the oldest.
    kept.sort(key=lambda p: (not p.ready, p.created))
    delete += [(p, "surplus") for p in kept[size:]]
    kept = kept[:size]
    expiries = [idle - (now - p.created).total_seconds() for p in kept]
    return PoolPlan(
        create=min(size - len(kept), CREATE_PER_PASS),
        delete=tuple(delete),
        ready=sum(p.ready for p in kept),
        starting=sum(not p.ready for p in kept),
        again_in=max(min(expiries), 0.0) if expiries else None,
    )


def refill_wait(last_claim: float | None, short_since: float, now: float) -> float:
    """Seconds a pool pass waits before it makes pods (monotonic clock): until claims have
    paused for REFILL_QUIET, at most REFILL_MAX_WAIT after the pool fell short at
    `short_since`."""
    if last_claim is None:
        return 0.0
    return max(0.0, min(last_claim + REFILL_QUIET - now, short_since + REFILL_MAX_WAIT - now))


def counts_wait(last_written: float | None, now: float) -> float:
    """Seconds before a pool's changed counts may be written (monotonic clock)."""
    if last_written is None:
        return 0.0
    return max(0.0, last_written + COUNTS_SECONDS - now)


def claimable(
    pods: Sequence[PoolPod], revision: str, settings: str, now: dt.datetime, idle: int
) -> list[PoolPod]:
    """The warm pods a run at `revision` whose pod has `settings` may claim, the oldest
    first (the nearest to their idle end): ready, of that revision and settings, and not
    past their lifetime (a pass is about to replace it)."""
    found = [
        p
        for p in pods
        if p.ready
        and p.revision == revision
        and p.settings == settings
        and (now - p.created).total_seconds() < idle
    ]
    return sorted(found, key=lambda p: p.created)


def claimed_account(pod: dict[str, Any]) -> str | None:
    """The ServiceAccount of a warm pod a run claimed (named as the pod); None for a pod
    made for its run, which runs as the run's own account."""
    of = meta(pod)
    return of.name if of.labels.get(CLAIMED_LABEL) else None
