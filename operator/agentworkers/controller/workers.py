"""Reconcile a Worker: bind its profile, start its run in one pod, follow the pod, kill it.

Every step is safe to repeat from any line. The binding is written with a
resourceVersion precondition (exactly once); the pod has a deterministic name and is
adopted when a crashed pass already made it; status is recomputed from what exists.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, NoReturn

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from agentworkers import metrics
from agentworkers.access import access_objects, account_name, role_rules
from agentworkers.api import AgentConfigSpec, AgentConfigStatus
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.worker import (
    COLLECTED_ANNOTATION,
    RUNTIME_STATUS,
    TERMINAL_PHASES,
    InheritedBounds,
    WorkerSpec,
    WorkerStatus,
)
from agentworkers.conditions import Status, now, set_condition
from agentworkers.controller import lineage
from agentworkers.effective import EffectiveConfig, inherit, resolve
from agentworkers.errors import SecretNotAllowedError, describe
from agentworkers.pods import AGENT_LABEL, build_pod, owned_by, pod_name
from agentworkers.spawning import (
    BINDING_ANNOTATION,
    ParentRun,
    ancestor_profile,
    check_binding,
    check_spawn,
    encode_binding,
    summary,
    verify_run_start,
)
from agentworkers.storage import REVISION_LABEL, Conflict, Repository, ref
from agentworkers.virtualagent import Profile, VirtualAgentError

log = logging.getLogger(__name__)

READY = "Ready"
STARTED = "Started"
BOUND = "ProfileBound"
KILLED = "Killed"
FROZEN_ANNOTATION = "agentworkers.io/frozen-revision"

_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


class RunFailedError(VirtualAgentError):
    """The run cannot go on for a reason outside the seed's list (a conflict, a lost pod)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("", message)
        self.reason = reason  # type: ignore[misc]


@dataclass
class Worker:
    """One pass's view of a Worker, and the status it will write."""

    body: dict[str, Any]
    spec: WorkerSpec
    status: WorkerStatus

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def generation(self) -> int | None:
        generation = self.body["metadata"].get("generation")
        return int(generation) if generation is not None else None

    @property
    def annotations(self) -> dict[str, str]:
        return self.body["metadata"].get("annotations") or {}

    def update(self, **changes: Any) -> None:
        self.status = self.status.model_copy(update=changes)

    def condition(self, type_: str, status: Status, reason: str, message: str) -> None:
        conditions = set_condition(
            self.status.conditions, type_, status, reason, message, self.generation
        )
        self.update(conditions=conditions)

    def save(self, storage: Repository, before: dict[str, Any]) -> None:
        """Write the fields that changed, if any but timestamps did.

        Only on the version read: the runtime reports to the same status, and a stale
        write must not undo its report (a 409 makes the pass run again on fresh data).
        """
        status = self.status.model_copy(update={"observed_generation": self.generation})
        new, old = _comparable(status.wire()), _comparable(before)
        if new == old:
            return
        self.status = status.model_copy(update={"updated_at": now()})
        wire = self.status.wire()
        changed = {k: v for k, v in wire.items() if k == "updatedAt" or new.get(k) != old.get(k)}
        version = storage.patch_status(
            "workers", self.namespace, self.name, changed, self.body["metadata"]["resourceVersion"]
        )
        if version:
            self.body["metadata"]["resourceVersion"] = version


def load(body: dict[str, Any]) -> Worker:
    try:
        status = WorkerStatus.model_validate(body.get("status") or {})
    except ValidationError:
        status = WorkerStatus()  # unreadable status is recomputed
    try:
        spec = WorkerSpec.model_validate(body.get("spec") or {})
    except ValidationError as e:
        raise describe(e) from e
    return Worker(body, spec, status)


def reconcile(storage: Repository, namespace: str, name: str) -> None:
    with _locks[(namespace, name)]:
        body = storage.get("workers", namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        before = body.get("status") or {}
        try:
            worker = load(body)
        except VirtualAgentError as error:
            _fail_unparsed(storage, body, error)
            return
        try:
            _step(storage, worker)
        except VirtualAgentError as error:
            _fail(storage, worker, error)
        finally:
            metrics.PHASES.observe(body["metadata"]["uid"], worker.status.phase)
            worker.save(storage, before)


def _comparable(status: dict[str, Any]) -> dict[str, Any]:
    """A status without what changes on every write (timestamps) and without what only the
    runtime writes (the store does not keep it), for change detection."""
    conditions = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions", [])
    ]
    kept = {k: v for k, v in status.items() if k != "updatedAt" and k not in RUNTIME_STATUS}
    return {**kept, "conditions": conditions}


def _step(storage: Repository, worker: Worker) -> None:
    if worker.status.phase in TERMINAL_PHASES:
        return
    if worker.spec.kill is not None:
        kill(storage, worker)
        return
    config_body = storage.get("agentconfigs", worker.namespace, worker.spec.agent)
    if config_body is None:
        _wait(worker, "AgentConfigMissing", f"AgentConfig {worker.spec.agent!r} does not exist")
    try:
        config = AgentConfigSpec.model_validate(config_body["spec"])
    except ValidationError as e:
        # Its own handler reports the fault on the AgentConfig; the run waits for a fix.
        _wait(worker, "AgentConfigInvalid", f"AgentConfig {worker.spec.agent!r}: {describe(e)}")
    active = AgentConfigStatus.model_validate(config_body.get("status") or {}).active_revision
    if active is None:
        _wait(worker, "NoActiveRevision", f"AgentConfig {worker.spec.agent!r} has no revision yet")

    parent_body = (
        storage.get("workers", worker.namespace, worker.spec.parent) if worker.spec.parent else None
    )
    if worker.spec.parent and parent_body is None:
        raise RunFailedError(
            "UnknownWorker", f"parent worker {worker.spec.parent!r} does not exist"
        )
    parent, ancestor = lineage.parent_run(storage, worker.namespace, parent_body)
    if worker.spec.profile and not worker.status.pod:
        # Until the run starts, every pass checks the binding is the one written for it.
        annotation = worker.annotations.get(BINDING_ANNOTATION)
        if check_binding(worker.spec, annotation, worker.status.binding, parent) is None:
            _bind(storage, worker, parent_body, parent, active)
    elif parent_body is not None:
        _adopt(storage, worker, parent_body, {}, {})

    if worker.spec.suspend:
        if worker.status.phase is None:
            worker.update(phase="Pending")
        worker.condition(
            STARTED, "False", "Suspended", "the run waits for spec.suspend to be cleared"
        )
        return

    pod = storage.get_pod(worker.namespace, pod_name(worker.name))
    if pod is None and worker.status.pod:
        # The store may not have seen the pod (yet): the API decides before the run fails.
        pod = storage.get_pod(worker.namespace, pod_name(worker.name), confirm=True)
        if pod is None:
            raise RunFailedError(
                "PodLost", f"pod {worker.status.pod} was deleted before the run ended"
            )
    if pod is None:
        pod = _start(storage, worker, config, active, parent, ancestor)
    elif not owned_by(pod, worker.body["metadata"]["uid"]):
        raise RunFailedError(
            "PodConflict", f"a pod named {pod_name(worker.name)} is not this run's"
        )
    _follow(worker, pod)


def _wait(worker: Worker, reason: str, message: str) -> NoReturn:
    worker.update(phase=worker.status.phase or "Pending")
    worker.condition(READY, "False", reason, message)
    raise kopf.TemporaryError(message, delay=5)


def _bind(
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
    except VirtualAgentError as error:
        metrics.SPAWN_REFUSALS.labels(reason=error.reason, stage="handler").inc()
        raise
    revision = parent.frozen.name if parent and parent.frozen else ""
    _adopt(
        storage,
        worker,
        parent_body,
        {BINDING_ANNOTATION: encode_binding(binding)},
        {AGENT_LABEL: worker.spec.agent, REVISION_LABEL: revision},
    )
    worker.update(binding=summary(binding))
    worker.condition(
        BOUND,
        "True",
        "Bound",
        f"profile {binding.key!r} pinned to revision {binding.config_revision_id}",
    )


def _adopt(
    storage: Repository,
    worker: Worker,
    parent_body: dict[str, Any] | None,
    annotations: dict[str, str],
    labels: dict[str, str],
) -> None:
    """Write the binding and the parent's ownerReference: the child stays owned by its parent."""
    owners = list(worker.body["metadata"].get("ownerReferences") or [])
    if parent_body is not None and parent_body["metadata"]["uid"] not in {
        o.get("uid") for o in owners
    }:
        owners.append(ref(parent_body, controller=False))
    elif not annotations:
        return
    try:
        version = storage.patch_metadata("workers", worker.body, annotations, labels, owners)
    except ApiException as e:
        if e.status != 409:
            raise
        # Someone wrote in between (perhaps a binding): read again rather than overwrite.
        raise kopf.TemporaryError("the Worker changed while binding; retrying", delay=1) from e
    meta = worker.body["metadata"]
    meta["resourceVersion"] = version
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    if parent_body is not None:
        _grant(storage, parent_body)


def _grant(storage: Repository, body: dict[str, Any]) -> None:
    """Keep a runtime's Role in step with its children (it may read, patch, delete them)."""
    meta = body["metadata"]
    children = storage.children(meta["namespace"], meta["name"])
    rules = role_rules(meta["name"], body["spec"]["agent"], children)
    storage.set_role_rules(meta["namespace"], account_name(meta["name"]), rules)


def _start(
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
        except VirtualAgentError as error:
            metrics.PIN_FAILURES.labels(reason=error.reason).inc()
            raise
        worker.update(binding=summary(binding))
    refused = set(worker.spec.allowed_secrets) - set(config.allowed_secrets)
    if refused:
        raise SecretNotAllowedError(
            "spec.allowedSecrets",
            f"AgentConfig {worker.spec.agent} does not allow {sorted(refused)}",
        )
    effective = resolve(config, worker.spec, profile)
    if ancestor is not None and not worker.spec.profile:
        effective = _bounded(worker, config, ancestor, effective)
    children = storage.children(worker.namespace, worker.name)
    if not storage.ensure_access(access_objects(worker.body, worker.spec.agent, children)):
        _grant(storage, worker.body)  # made by an earlier pass: its children may have changed
    pod = build_pod(
        worker.body, worker.spec, config, effective, service_account=account_name(worker.name)
    )
    # A top-level run freezes its agent's active revision: its children bind against it.
    frozen = None if worker.spec.profile else active
    if frozen is not None:
        pod["metadata"]["annotations"] = {FROZEN_ANNOTATION: frozen.model_dump_json(by_alias=True)}
    try:
        created = storage.create_pod(pod, worker.body["metadata"]["uid"])
    except Conflict as e:
        raise RunFailedError("PodConflict", str(e)) from e
    metrics.SPAWNS.inc()
    born = dt.datetime.fromisoformat(
        worker.body["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    )
    metrics.POD_LATENCY.observe(max((dt.datetime.now(dt.UTC) - born).total_seconds(), 0))
    return created


def _bounded(
    worker: Worker, config: AgentConfigSpec, ancestor: dict[str, Any], own: EffectiveConfig
) -> EffectiveConfig:
    """A run below a profile run never gets more than that run's effective config."""
    above = load(ancestor)
    profile = ancestor_profile(
        above.spec, above.annotations.get(BINDING_ANNOTATION), above.status.binding
    )
    if profile is None:
        _wait(worker, "AncestorNotBound", f"worker {above.name} has no profile binding yet")
    via = InheritedBounds(worker=above.name, profile=profile.key)
    worker.update(inherited=via)
    return inherit(own, resolve(config, above.spec, profile), via)


def _follow(worker: Worker, pod: dict[str, Any]) -> None:
    """Worker status from its pod: what kubectl get workers shows between runtime reports."""
    annotations = pod["metadata"].get("annotations") or {}
    changes: dict[str, Any] = {"pod": pod["metadata"]["name"]}
    if worker.status.frozen_revision is None and FROZEN_ANNOTATION in annotations:
        changes["frozen_revision"] = RevisionRef.model_validate_json(annotations[FROZEN_ANNOTATION])
    if worker.status.started_at is None:
        changes["started_at"] = pod["metadata"].get("creationTimestamp") or now()
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        status = pod.get("status") or {}
        raise RunFailedError(
            status.get("reason") or "PodFailed", status.get("message") or "the pod failed"
        )
    if phase == "Succeeded" and worker.status.phase != "Done":
        changes.update(phase="Done", last_event="pod succeeded")
    elif phase == "Running" and worker.status.phase in (None, "Pending"):
        changes.update(phase="Running", last_event="pod running")
    elif worker.status.phase is None:
        changes.update(phase="Pending", last_event="pod created")
    if any(getattr(worker.status, k) != v for k, v in changes.items()):
        worker.update(**changes)
    worker.condition(STARTED, "True", "PodCreated", f"pod {pod['metadata']['name']}")
    worker.condition(READY, "True", "Running", "the run has its pod")


def kill(storage: Repository, worker: Worker) -> None:
    """Stop the run: a target condition, the pod gone, then Killed and one Event."""
    assert worker.spec.kill is not None
    who = f" by {worker.spec.kill.by}" if worker.spec.kill.by else ""
    message = f"killed{who}: {worker.spec.kill.reason}"
    worker.condition(KILLED, "Unknown", "Killing", message)
    worker.save(storage, worker.body.get("status") or {})
    pod = storage.get_pod(worker.namespace, pod_name(worker.name))
    if pod is not None and owned_by(pod, worker.body["metadata"]["uid"]):
        # Only this run's pod, and only the one we saw (a precondition on its uid).
        storage.delete_pod(worker.namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
    worker.update(phase="Killed", error=worker.spec.kill.reason, last_event=message)
    worker.condition(KILLED, "True", "Killed", message)
    worker.condition(READY, "False", "Killed", message)
    metrics.KILLS.labels(via="spec").inc()
    log.info("%s", message, extra=_ref(worker))
    storage.post_event(worker.body, "Warning", "Killed", message)


def _ref(worker: Worker) -> dict[str, Any]:
    """What a JSON log line says it is about (kopf's formatter puts it under "object")."""
    return {"k8s_ref": {"kind": "Worker", "namespace": worker.namespace, "name": worker.name}}


def _fail(storage: Repository, worker: Worker, error: VirtualAgentError) -> None:
    """Fail LOUD: phase Failed, a condition with the reason, one Warning Event, no pod."""
    message = str(error)
    log.warning("failed: %s: %s", error.reason, message, extra=_ref(worker))
    worker.update(phase="Failed", error=message, last_event=f"{error.reason}: {message}")
    worker.condition(READY, "False", error.reason, message)
    metrics.RUN_FAILURES.labels(reason=error.reason).inc()
    storage.post_event(worker.body, "Warning", error.reason, message)


def _fail_unparsed(storage: Repository, body: dict[str, Any], error: VirtualAgentError) -> None:
    """A spec that does not decode (admission was off): fail once, say which field."""
    if (body.get("status") or {}).get("phase") == "Failed":
        return
    worker = Worker(
        body, WorkerSpec(agent=body.get("spec", {}).get("agent") or "?"), WorkerStatus()
    )
    _fail(storage, worker, error)
    worker.save(storage, {})


def deleted(storage: Repository, body: dict[str, Any]) -> None:
    """Deleting a Worker is a kill, unless it was collected or had already ended."""
    _locks.pop((body["metadata"]["namespace"], body["metadata"]["name"]), None)
    metrics.PHASES.observe(body["metadata"]["uid"], None)
    phase = (body.get("status") or {}).get("phase")
    collected = (body["metadata"].get("annotations") or {}).get(COLLECTED_ANNOTATION)
    if phase in TERMINAL_PHASES or collected:
        return
    metrics.KILLS.labels(via="deletion").inc()
    storage.post_event(
        body, "Warning", "Killed", f"killed: the Worker was deleted while {phase or 'Pending'}"
    )
