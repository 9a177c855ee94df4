"""Reconcile a Worker: bind its profile, start its run in one pod, follow the pod, kill it.

Every step is safe to repeat from any line. The binding is written with a
resourceVersion precondition (exactly once); the pod has a deterministic name and is
adopted when a crashed pass already made it; status is recomputed from what exists.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import Any, NoReturn

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, AgentConfigStatus, reasons
from agentworkers.api.agentconfig import RevisionRef, WorkerPod
from agentworkers.api.names import BINDING_ANNOTATION, COLLECTED_ANNOTATION, FROZEN_ANNOTATION
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.worker import TERMINAL_PHASES, WorkerSpec, WorkerStatus
from agentworkers.controller import lineage, metrics, pools, quotas, tracing, worker_tree
from agentworkers.controller.requeue import Later
from agentworkers.controller.worker_pass import Worker, load
from agentworkers.controller.worker_start import adopt, bind, grant_access, start
from agentworkers.core import clocks
from agentworkers.core.clocks import now
from agentworkers.core.pods import failure, owned_by, pod_name, running_since
from agentworkers.core.queueing import standing
from agentworkers.core.spawning import check_binding
from agentworkers.errors import REFUSALS, Refusal, RunFailedError, UnknownWorkerError, describe
from agentworkers.kube.repository import Repository

log = logging.getLogger(__name__)

PARENT_KILLED = "parent killed: "
# Seconds a started container's runtime has to report Running itself before the pod's
# phase stands in for it: one status write per run fewer, when the runtime is alive.
RUNTIME_REPORT_SECONDS = 3.0


def reconcile(
    storage: Repository, namespace: str, name: str, pod_defaults: WorkerPod | None = None
) -> None:
    """One pass over a Worker. Its `Requeue` never runs two passes of one Worker at once.
    `pod_defaults`: the install's worker pod knobs, under the AgentConfig's own."""
    body = storage.get("workers", namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    try:
        worker = load(body)
    except REFUSALS as error:
        _fail_unparsed(storage, body, error)
        return
    if worker.status.phase in ("Running", "Idle", "Done"):
        pools.running(worker.uid)
    try:
        _step(storage, worker, pod_defaults or WorkerPod())
    except REFUSALS as error:
        _fail(storage, worker, error)
    finally:
        metrics.PHASES.observe(body["metadata"]["uid"], worker.status.phase)
        if (used := worker.status.tokens_used) is not None:
            metrics.TOKENS.observe(
                body["metadata"]["uid"],
                worker.spec.agent,
                worker.spec.profile or "",
                used.prompt,
                used.completion,
            )
        worker.save(storage)
    if worker.again_in is not None:
        raise Later(worker.again_in)


def _step(storage: Repository, worker: Worker, pod_defaults: WorkerPod) -> None:
    if not worker.spec.parent:
        worker_tree.account(storage, worker)
    _mcp_servers(worker)
    if worker.status.phase in TERMINAL_PHASES:
        _ended(storage, worker)
        return
    if worker.spec.kill is not None:
        kill(storage, worker)
        return
    if worker.spec.parent and (_tree_spent(storage, worker) or _parent_killed(storage, worker)):
        return
    config_body = storage.get("agentconfigs", worker.namespace, worker.spec.agent)
    if config_body is None:
        worker.wait(
            reasons.AGENT_CONFIG_MISSING, f"AgentConfig {worker.spec.agent!r} does not exist"
        )
    try:
        config = AgentConfigSpec.model_validate(config_body["spec"])
        config = config.model_copy(update={"worker": config.worker.over(pod_defaults)})
        config = _with_provider(storage, worker, config)
    except ValidationError as e:
        # Its own handler reports the fault on the AgentConfig; the run waits for a fix.
        worker.wait(
            reasons.AGENT_CONFIG_INVALID, f"AgentConfig {worker.spec.agent!r}: {describe(e)}"
        )
    active = AgentConfigStatus.model_validate(config_body.get("status") or {}).active_revision
    if active is None:
        worker.wait(
            reasons.NO_ACTIVE_REVISION, f"AgentConfig {worker.spec.agent!r} has no revision yet"
        )

    parent_body = (
        storage.get("workers", worker.namespace, worker.spec.parent) if worker.spec.parent else None
    )
    if worker.spec.parent and parent_body is None:
        raise UnknownWorkerError(
            f"parent worker {worker.spec.parent!r} does not exist", field="spec.parent"
        )
    parent, ancestor = lineage.parent_run(storage, worker.namespace, parent_body)
    if worker.spec.profile and not worker.status.pod:
        # Until the run starts, every pass checks the binding is the one written for it.
        annotation = worker.annotations.get(BINDING_ANNOTATION)
        if check_binding(worker.spec, annotation, worker.status.binding, parent) is None:
            with tracing.spawn_span("bind profile", worker.body):
                bind(storage, worker, parent_body, parent, active)
    elif parent_body is not None:
        adopt(storage, worker, parent_body, {}, {})

    if _suspended(worker):
        return

    pod = pools.run_pod(storage, worker.namespace, worker.body)
    if pod is None and worker.status.pod:
        # The store may not have seen the pod (yet): the API decides before the run fails.
        pod = storage.get_pod(worker.namespace, worker.status.pod, confirm=True)
        if pod is None:
            _lost(worker)
    if pod is None:
        with (
            worker_tree.place(storage, worker, parent_body, config.limits.token_budget),
            quotas.place(storage, worker.namespace, worker.name, worker.spec.agent),
            tracing.spawn_span("create pod", worker.body),
        ):
            pod = start(storage, worker, config, active, parent, ancestor)
    elif not owned_by(pod, worker.body["metadata"]["uid"]):
        raise RunFailedError(
            f"a pod named {pod_name(worker.name)} is not this run's", reason=reasons.POD_CONFLICT
        )
    elif not worker.status.pod:
        grant_access(storage, worker, config, pod)  # an earlier pass ended between pod and access
    if _queued(storage, worker, pod):
        return
    _follow(worker, pod)
    if worker.status.phase == "Idle":
        _idle_clock(storage, worker, pod, config)


def _suspended(worker: Worker) -> bool:
    """A suspended run waits before its pod, saying so."""
    if not worker.spec.suspend:
        return False
    if worker.status.phase is None:
        worker.update(phase="Pending")
    worker.condition(
        reasons.STARTED, "False", reasons.SUSPENDED, "the run waits for spec.suspend to be cleared"
    )
    return True


def _idle_clock(
    storage: Repository, worker: Worker, pod: dict[str, Any], config: AgentConfigSpec
) -> None:
    """An interactive run Idle past its idle timeout ends Done and frees its pod; until
    then, a pass when it would."""
    timeout = worker.spec.idle_timeout_seconds or config.worker.idle_timeout_seconds
    left = clocks.seconds_left(
        worker.status.idle_since, timeout, dt.datetime.now(dt.UTC), spread=worker.uid
    )
    if left is None:
        return
    if left > 0:
        worker.again(left)
        return
    message = f"Idle for {timeout} s (idleTimeoutSeconds): the run is Done and its pod freed"
    worker.update(phase="Done", last_event=message)
    worker.condition(reasons.READY, "False", reasons.IDLE_TIMEOUT, message)
    # Saved before the pod goes: a query the runtime took meanwhile makes this write a
    # conflict, and the run goes on.
    worker.save(storage)
    storage.delete_pod(worker.namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
    log.info("%s", message, extra=_ref(worker))
    worker.announce("Normal", reasons.IDLE_TIMEOUT, message)


def _lost(worker: Worker) -> NoReturn:
    """The run's pod is gone before the run ended: it failed (PodLost), or, when a pass
    deleted it at the deadline of the queued run and went no further, it ran out of time."""
    queued = _condition(worker, reasons.QUEUED)
    if queued is not None and queued.reason == reasons.DEADLINE_EXCEEDED:
        raise RunFailedError(queued.message, reason=reasons.DEADLINE_EXCEEDED)
    raise RunFailedError(
        f"pod {worker.status.pod} was deleted before the run ended", reason=reasons.POD_LOST
    )


def _queued(storage: Repository, worker: Worker, pod: dict[str, Any]) -> bool:
    """A run whose pod names a Kueue LocalQueue: while Kueue holds the pod back, the run is
    Pending with Queued=True and Kueue's reason, until Kueue admits it (Queued=False, one
    Event) or its deadline passes (Failed, its pod and its place in the queue freed). True
    while it waits. Kueue's Workload comes from the store: no read on the pass's path."""
    before = _condition(worker, reasons.QUEUED)
    if before is not None and before.status == "False":
        return False  # admitted, or never gated: the rest is the pod's
    name = pod["metadata"]["name"]
    found = standing(pod, storage.workload_of(worker.namespace, name), before is not None)
    if found is None:
        return False
    if worker.status.queue != found.queue:
        worker.update(queue=found.queue)
    if not found.waiting:
        worker.condition(reasons.QUEUED, "False", found.reason, found.message)
        if before is not None:  # it waited: its run starts now
            _deadline_left(storage, worker, pod)
            worker.update(started_at=now(), last_event=found.message)
            worker.announce("Normal", found.reason, found.message)
        return False
    left = _seconds_to_deadline(worker)
    if left is not None and left <= 0:
        message = (
            f"the run's deadline ({worker.status.deadline_at}) passed while it waited in "
            f"LocalQueue {found.queue}: its pod is deleted and its place in the queue freed"
        )
        # The target first: a pass that finds the pod gone after this knows why.
        worker.condition(reasons.QUEUED, "False", reasons.DEADLINE_EXCEEDED, message)
        worker.save(storage)
        storage.delete_pod(worker.namespace, name, pod["metadata"]["uid"])
        raise RunFailedError(message, reason=reasons.DEADLINE_EXCEEDED)
    if left is not None:
        worker.again(left)
    changes = {"phase": "Pending", "pod": name, "last_event": found.message}
    if any(getattr(worker.status, k) != v for k, v in changes.items()):
        worker.update(**changes)
    worker.condition(reasons.QUEUED, "True", found.reason, found.message)
    worker.condition(reasons.STARTED, "False", found.reason, found.message)
    worker.condition(reasons.READY, "False", found.reason, found.message)
    return True


def _seconds_to_deadline(worker: Worker) -> float | None:
    return clocks.seconds_left(
        worker.status.deadline_at, 0, dt.datetime.now(dt.UTC), spread=worker.uid
    )


def _deadline_left(storage: Repository, worker: Worker, pod: dict[str, Any]) -> None:
    """A run's deadline counts from its spawn (`deadlineAt`, which its children's are cut
    to), its pod's activeDeadlineSeconds from the pod's start: a run admitted after a wait
    gets what is left of it, not all of it again."""
    left = _seconds_to_deadline(worker)
    if left is not None:
        meta = pod["metadata"]
        storage.shorten_pod_deadline(
            worker.namespace, meta["name"], meta["uid"], max(1, math.ceil(left))
        )


def _follow(worker: Worker, pod: dict[str, Any]) -> None:
    """Worker status from its pod: what kubectl get workers shows between runtime reports."""
    annotations = pod["metadata"].get("annotations") or {}
    changes: dict[str, Any] = {"pod": pod["metadata"]["name"]}
    if worker.status.frozen_revision is None and FROZEN_ANNOTATION in annotations:
        frozen = RevisionRef.model_validate_json(annotations[FROZEN_ANNOTATION])
        changes.update(frozen_revision=frozen, revision=frozen.name)
    # A warm pod was made, and its container started, before its run: the run started,
    # and its runtime's clock to report Running runs, from its claim.
    claimed = pools.claimed_account(pod) is not None
    if worker.status.started_at is None:
        changes["started_at"] = (not claimed and pod["metadata"].get("creationTimestamp")) or now()
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        reason, message = failure(pod)
        raise RunFailedError(message, reason=reason or reasons.POD_FAILED)
    started = (
        (changes.get("started_at") or worker.status.started_at) if claimed else running_since(pod)
    )
    if phase == "Succeeded" and worker.status.phase != "Done":
        changes.update(phase="Done", last_event="pod succeeded")
    elif (
        phase == "Running" and worker.status.phase in (None, "Pending") and _silent(worker, started)
    ):
        changes.update(phase="Running", last_event="pod running")
    elif worker.status.phase is None:
        changes.update(phase="Pending", last_event="pod created")
    if any(getattr(worker.status, k) != v for k, v in changes.items()):
        worker.update(**changes)
    worker.condition(reasons.STARTED, "True", reasons.POD_CREATED, f"pod {pod['metadata']['name']}")
    worker.condition(reasons.READY, "True", reasons.RUNNING, "the run has its pod")


def _silent(worker: Worker, started: str | None) -> bool:
    """Whether the runtime of a running pod (its run begun at `started`) is late to report
    Running itself; while it is not, a pass is asked for when it would be."""
    if started is None:
        return True
    left = clocks.seconds_left(
        started, RUNTIME_REPORT_SECONDS, dt.datetime.now(dt.UTC), spread=worker.uid
    )
    if left is None or left <= 0:
        return True
    worker.again(left)
    return False


def _mcp_servers(worker: Worker) -> None:
    """What the runtime reported of its MCP servers: McpServersReady, and one Warning
    Event naming those it could not reach, when that changes (the runtime itself may not
    post Events)."""
    found = worker.status.mcp_servers
    if not found:
        return
    down = [s for s in found if s.state != "Connected"]
    if not down:
        message = f"{len(found)} MCP server(s) connected"
        worker.condition(reasons.MCP_SERVERS_READY, "True", reasons.MCP_SERVERS_CONNECTED, message)
        return
    before = _condition(worker, reasons.MCP_SERVERS_READY)
    message = "; ".join(
        f"MCP server {s.name} ({s.url}){' (required)' if s.required else ''} is unavailable: "
        f"{s.message}"
        for s in down
    )
    worker.condition(reasons.MCP_SERVERS_READY, "False", reasons.MCP_SERVER_UNAVAILABLE, message)
    after = _condition(worker, reasons.MCP_SERVERS_READY)
    if before is None or (before.status, before.message) != (after.status, after.message):
        worker.announce("Warning", reasons.MCP_SERVER_UNAVAILABLE, after.message)


def _condition(worker: Worker, type_: str) -> Any:
    return next((c for c in worker.status.conditions if c.type == type_), None)


def _ended(storage: Repository, worker: Worker) -> None:
    """A run that ended on its own (the runtime reported Done or Failed, or the pod
    succeeded): say so once, in Ready and in an Event. Killed runs and failures the
    operator decided have said so already (Ready is False then). Then its TTL clock."""
    if not worker.status.pod:
        # A run that ended before a pass recorded its pod (a warm pod's runtime reports
        # within moments of the claim, and its write wins over that pass's): record it now.
        pod = pools.run_pod(storage, worker.namespace, worker.body)
        if pod is not None and owned_by(pod, worker.uid):
            worker.update(pod=pod["metadata"]["name"])
    if worker.status.phase == "Killed":
        # Its runs below go with it; a pass cut short by an API error resumes here.
        _stop_descendants(storage, worker, worker.status.error or "killed")
    ready = next((c for c in worker.status.conditions if c.type == reasons.READY), None)
    if ready is None or ready.status != "False":
        if worker.status.phase == "Done":
            type_, reason, message = "Normal", reasons.COMPLETED, "the run is Done"
        elif worker.status.phase == "Failed":
            why = worker.status.error or "no reason given"
            type_, reason, message = "Warning", reasons.RUN_FAILED, f"the run failed: {why}"
            if any(s.required and s.state != "Connected" for s in worker.status.mcp_servers or ()):
                reason = reasons.MCP_SERVER_UNAVAILABLE
        else:
            return
        worker.condition(reasons.READY, "False", reason, message)
        worker.announce(type_, reason, message)
    _ttl_clock(storage, worker)


def _ttl_clock(storage: Repository, worker: Worker) -> None:
    """A finished run nobody has to collect (no parent, or one that has ended too) is
    deleted `ttlSecondsAfterFinished` after it finished; until then, a pass when it is due."""
    ttl = worker.spec.ttl_seconds_after_finished
    if ttl is None:
        config = storage.get("agentconfigs", worker.namespace, worker.spec.agent)
        template = ((config or {}).get("spec") or {}).get("worker") or {}
        ttl = template.get("ttlSecondsAfterFinished")
    ready = next((c for c in worker.status.conditions if c.type == reasons.READY), None)
    if ttl is None or ready is None:
        return
    if worker.spec.parent:
        parent = storage.get("workers", worker.namespace, worker.spec.parent)
        if parent is not None and (parent.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            worker.again(float(max(ttl, 1)))  # its parent may still collect it: look again
            return
    left = clocks.seconds_left(
        ready.last_transition_time, ttl, dt.datetime.now(dt.UTC), spread=worker.uid
    )
    if left is not None and left > 0:
        worker.again(left)
        return
    message = f"finished {ttl} s ago (ttlSecondsAfterFinished): deleted"
    log.info("%s", message, extra=_ref(worker))
    worker.announce("Normal", reasons.TTL_EXPIRED, message)
    storage.delete_worker(worker.namespace, worker.name, worker.body["metadata"]["uid"])


def kill(storage: Repository, worker: Worker) -> None:
    """Stop the run (spec.kill), then every live run below it."""
    assert worker.spec.kill is not None
    _stop(storage, worker, worker.spec.kill.reason, worker.spec.kill.by)
    metrics.KILLS.labels(via="spec").inc()
    _stop_descendants(storage, worker, worker.spec.kill.reason)


def _stop(
    storage: Repository,
    worker: Worker,
    reason: str,
    by: str | None,
    event: str = reasons.KILLED,
) -> None:
    """A target condition, the pod gone, then Killed and one Event (reason `event`)."""
    who = f" by {by}" if by else ""
    message = f"killed{who}: {reason}"
    queued = _condition(worker, reasons.QUEUED)
    if queued is not None and queued.status == "True":
        # Its pod goes, and with it its Workload: its place in the queue is free.
        worker.condition(reasons.QUEUED, "False", reasons.KILLED, f"left its queue: {message}")
    worker.condition(reasons.KILLED, "Unknown", reasons.KILLING, message)
    worker.save(storage)
    pod = pools.run_pod(storage, worker.namespace, worker.body)
    if pod is not None and owned_by(pod, worker.body["metadata"]["uid"]):
        # Only this run's pod, and only the one we saw (a precondition on its uid).
        storage.delete_pod(worker.namespace, pod["metadata"]["name"], pod["metadata"]["uid"])
    worker.update(phase="Killed", error=reason, last_event=message)
    worker.condition(reasons.KILLED, "True", reasons.KILLED, message)
    worker.condition(reasons.READY, "False", reasons.KILLED, message)
    log.info("%s", message, extra=_ref(worker))
    worker.announce("Warning", event, message)


def _with_provider(storage: Repository, worker: Worker, config: AgentConfigSpec) -> AgentConfigSpec:
    """The config with its ModelProvider's api, endpoint, key and model, as they are now:
    a key rotation or an endpoint move reaches every run that starts after it."""
    ref = config.model.provider_ref
    if ref is not None:
        found = storage.get("modelproviders", worker.namespace, ref)
        if found is None:
            worker.wait(reasons.PROVIDER_MISSING, f"ModelProvider {ref!r} does not exist")
        try:
            provider = ModelProviderSpec.model_validate(found.get("spec") or {})
        except ValidationError as e:
            worker.wait(reasons.PROVIDER_INVALID, f"ModelProvider {ref!r}: {describe(e)}")
        config = config.model_copy(update={"model": config.model.with_provider(provider)})
    if config.model.model is None and worker.spec.model is None:
        worker.wait(
            reasons.MODEL_MISSING,
            f"no model: AgentConfig {worker.spec.agent!r} names none, nor does ModelProvider "
            f"{ref!r} (defaultModel) or the Worker",
        )
    return config


def _tree_spent(storage: Repository, worker: Worker) -> bool:
    """A run whose tree spent its token budget stops (TreeBudgetExhausted). True if so."""
    root = lineage.ancestry(storage, worker.namespace, worker.body)[-1]
    tree = (root.get("status") or {}).get("tree") or {}
    if not tree.get("budgetExhausted"):
        return False
    reason = (
        f"{reasons.TREE_BUDGET_EXHAUSTED}: the tree used {tree.get('tokensUsed')} of its "
        f"{tree.get('tokenBudget')} tokens"
    )
    _stop(storage, worker, reason, root["metadata"]["name"], reasons.TREE_BUDGET_EXHAUSTED)
    metrics.KILLS.labels(via="tree-budget").inc()
    return True


def _stop_descendants(storage: Repository, worker: Worker, reason: str) -> None:
    """A killed run's children go with it, each with the reason `parent killed: <reason>`
    and one Event, before the garbage collector removes them (its pods would otherwise
    run on until then). Their specs stay as their spawner wrote them."""
    if reason.startswith(reasons.TREE_BUDGET_EXHAUSTED):
        return  # the whole tree stops, each run for that reason (`_tree_spent`)
    cause = _from_parent(reason)
    for name in storage.children(worker.namespace, worker.name):
        body = storage.get("workers", worker.namespace, name)
        if body is None:
            continue
        try:
            child = load(body)
        except REFUSALS:
            continue  # a spec that does not decode has failed already, with no pod
        if child.status.phase in TERMINAL_PHASES:
            continue
        _stop(storage, child, cause, worker.name)
        metrics.KILLS.labels(via="parent").inc()
        child.save(storage)
        _stop_descendants(storage, child, cause)


def _from_parent(reason: str) -> str:
    """A descendant's kill reason: the root's, said once however deep the tree."""
    return reason if reason.startswith(PARENT_KILLED) else PARENT_KILLED + reason


def _parent_killed(storage: Repository, worker: Worker) -> bool:
    """A run whose parent is killed, or asked to be, stops too: a child spawned while its
    parent was being killed, a child whose pod the cascade already removed, a cascade that
    a restart or an API error cut short. True when it did."""
    parent = storage.get("workers", worker.namespace, worker.spec.parent or "") or {}
    status = parent.get("status") or {}
    asked = (parent.get("spec") or {}).get("kill") or {}
    if status.get("phase") == "Killed":
        cause = status.get("error") or "killed"
    elif asked:
        cause = asked.get("reason") or "killed"
    else:
        return False
    cause = _from_parent(cause)
    _stop(storage, worker, cause, worker.spec.parent)
    metrics.KILLS.labels(via="parent").inc()
    _stop_descendants(storage, worker, cause)
    return True


def _ref(worker: Worker) -> dict[str, Any]:
    """What a JSON log line says it is about (kopf's formatter puts it under "object")."""
    return {"k8s_ref": {"kind": "Worker", "namespace": worker.namespace, "name": worker.name}}


def _fail(storage: Repository, worker: Worker, error: Refusal) -> None:
    """Fail LOUD: phase Failed, a condition with the reason, one Warning Event, no pod."""
    message = str(error)
    log.warning("failed: %s: %s", error.reason, message, extra=_ref(worker))
    worker.update(phase="Failed", error=message, last_event=f"{error.reason}: {message}")
    worker.condition(reasons.READY, "False", error.reason, message)
    metrics.RUN_FAILURES.labels(reason=error.reason).inc()
    worker.announce("Warning", error.reason, message)


def _fail_unparsed(storage: Repository, body: dict[str, Any], error: Refusal) -> None:
    """A spec that does not decode (admission was off): fail once, say which field."""
    if (body.get("status") or {}).get("phase") == "Failed":
        return
    worker = Worker(
        body, WorkerSpec(agent=body.get("spec", {}).get("agent") or "?"), WorkerStatus()
    )
    _fail(storage, worker, error)
    worker.save(storage)


def deleted(storage: Repository, body: dict[str, Any]) -> None:
    """Deleting a Worker is a kill, unless it was collected or had already ended."""
    metrics.PHASES.observe(body["metadata"]["uid"], None)
    metrics.TOKENS.forget(body["metadata"]["uid"])
    phase = (body.get("status") or {}).get("phase")
    collected = (body["metadata"].get("annotations") or {}).get(COLLECTED_ANNOTATION)
    if phase in TERMINAL_PHASES or collected:
        return
    metrics.KILLS.labels(via="deletion").inc()
    storage.post_event(
        body,
        "Warning",
        reasons.KILLED,
        f"killed: the Worker was deleted while {phase or 'Pending'}",
    )
