"""A Worker's pass: gather its context from the store, let `core.worker_plan` decide, carry
the plan out with one status write (docs/architecture.md, "A Worker's pass").

Every step is safe to repeat from any line. The binding is written with a
resourceVersion precondition (exactly once); the pod has a deterministic name and is
adopted when a crashed pass already made it; status is recomputed from what exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from agentworkers.api import reasons
from agentworkers.api.names import BINDING_ANNOTATION, COLLECTED_ANNOTATION
from agentworkers.api.worker import TERMINAL_PHASES
from agentworkers.api.workerpod import WorkerPod
from agentworkers.controller.infra import metrics, tracing
from agentworkers.controller.passes import identities, lineage, pools, quotas
from agentworkers.core import clocks
from agentworkers.core.identities import run_as
from agentworkers.core.objects import meta, phase
from agentworkers.core.pods import pod_name
from agentworkers.core.worker_plan import decision, ends
from agentworkers.core.worker_plan.plan import (
    Access,
    Action,
    Bind,
    Context,
    DeletePod,
    DeleteWorker,
    Grant,
    Plan,
    ShortenDeadline,
    Start,
    StopBelow,
    changes,
    fail,
)
from agentworkers.errors import REFUSALS, ApiError, RunFailedError, UnknownWorkerError
from agentworkers.kube.repository import Conflict, Repository

log = logging.getLogger(__name__)

Body = dict[str, Any]
# Seconds before a pass whose binding write lost a race runs again, on what won it.
REBIND_SECONDS = 1.0


def reconcile(
    storage: Repository, namespace: str, name: str, pod_defaults: WorkerPod | None = None
) -> float | None:
    """One pass over a Worker: seconds until it wants another, if it does. Its `Requeue`
    never runs two passes of one Worker at once. `pod_defaults`: the install's worker pod
    knobs, under the AgentConfig's own."""
    with contextlib.ExitStack() as locks:
        ctx = gather(storage, namespace, name, pod_defaults or WorkerPod(), locks)
        if ctx is None:
            return None
        plan = decision.decide(ctx)
        if plan.status.phase in ("Running", "Idle", "Done"):
            pools.running(plan.uid)
        try:
            return carry_out(storage, ctx, plan, locks)
        finally:
            _observe(plan)


def gather(
    storage: Repository,
    namespace: str,
    name: str,
    pod_defaults: WorkerPod,
    locks: contextlib.ExitStack,
) -> Context | None:
    """Everything the pass decides on, read once from the store. A run about to start is
    counted against its tree and its namespace's quotas under their locks (entered on
    `locks`, held until its pod is made): two starts into one tree count one after the
    other, as admission does."""
    body = storage.get("workers", namespace, name)
    if body is None or meta(body).deleting:
        return None
    now = dt.datetime.now(dt.UTC)
    spec, status = body.get("spec") or {}, body.get("status") or {}
    if not isinstance(spec.get("agent"), str):
        return Context(body, now)  # a spec that does not decode: nothing else to read
    config = storage.get("agentconfigs", namespace, spec["agent"])
    ref = (((config or {}).get("spec") or {}).get("model") or {}).get("providerRef")
    parent_name = spec.get("parent")
    ended = phase(body) in TERMINAL_PHASES
    chain: list[Body] = [body]
    broken = None
    if parent_name and not ended and not spec.get("kill"):
        try:
            chain = lineage.ancestry(storage, namespace, body)  # the one walk up a pass makes
        except UnknownWorkerError as e:
            broken = e
    parent = chain[1] if len(chain) > 1 else None
    if parent_name and parent is None:
        parent = storage.get("workers", namespace, parent_name)
    pod = pools.run_pod(storage, namespace, body)
    if pod is None and status.get("pod") and not ended and not spec.get("kill"):
        # The store may not have seen the pod (yet): the API decides before the run fails.
        pod = storage.get_pod(namespace, status["pod"], confirm=True)
    starts = pod is None and not status.get("pod") and not ended and broken is None
    starts = starts and config is not None and not spec.get("kill") and not spec.get("suspend")
    active = ((config or {}).get("status") or {}).get("activeRevision") or {}
    frozen = ((parent or {}).get("status") or {}).get("frozenRevision") or {}
    profiled = bool(spec.get("profile")) and not status.get("pod")
    # The parent's frozen revision: what a spawn is bound against, once.
    unbound = profiled and BINDING_ANNOTATION not in meta(body).annotations
    ctx = Context(
        body,
        now,
        pod_defaults,
        config=config,
        provider=storage.get("modelproviders", namespace, ref) if ref else None,
        chain=chain,
        broken=broken,
        parent=parent,
        below=lineage.descendants(storage, namespace, name) if not parent_name else (),
        pod=pod,
        workload=storage.workload_of(namespace, meta(pod).name) if pod else None,
        children=storage.children(namespace, name),
        siblings=storage.children(namespace, parent_name) if parent_name else (),
        frozen_revision=(
            storage.revision_spec(namespace, frozen["name"])
            if unbound and frozen.get("name")
            else None
        ),
        active_revision=(
            storage.revision_spec(namespace, active["name"])
            if profiled and starts and active.get("name")
            else None
        ),
    )
    if not starts:
        return ctx
    return _counted(storage, ctx, locks)


def _counted(storage: Repository, ctx: Context, locks: contextlib.ExitStack) -> Context:
    """`ctx` with its tree's and its namespace's counts, taken under their locks: the runs
    started (with a pod), since admission counted from a store a burst may outrun (or was
    off). Runs that slipped past it fail in the planner, before any pod of theirs."""
    namespace, name = meta(ctx.body).namespace, meta(ctx.body).name

    def started(body: Body) -> bool:
        other = meta(body).name
        return bool((body.get("status") or {}).get("pod")) or (
            storage.get_pod(namespace, pod_name(other)) is not None
        )

    shape = limits = None
    if len(ctx.chain) > 1:
        root = ctx.chain[-1]
        locks.enter_context(lineage.tree_lock(namespace, meta(root).name))
        shape = lineage.tree_shape(storage, namespace, list(ctx.chain[1:]), started, name)
        limits = lineage.tree_limits(storage, namespace, root)
    found: list[Any] = []
    if storage.in_namespace(quotas.PLURAL, namespace):
        locks.enter_context(quotas.lock(namespace))
        others = lambda body: meta(body).name != name and started(body)  # noqa: E731
        found = [
            (meta(body).name, spec, usage)
            for body, spec, usage in quotas.usages(storage, namespace, ctx.now, others)
        ]
    return dataclasses.replace(ctx, shape=shape, tree_limits=limits, quotas=found)


def carry_out(
    storage: Repository, ctx: Context, plan: Plan, locks: contextlib.ExitStack
) -> float | None:
    """The plan's writes, in its order: those before the status (the pod's start among
    them), the status (once, at the version read), its Events, those after it. The
    tree's and quotas' `locks` are let go once the pod is made (or not)."""
    done = 0
    try:
        while True:
            for action in plan.before[done:]:
                _do(storage, plan, action)
            done = len(plan.before)
            if plan.start is None:
                break
            with tracing.spawn_span("create pod", plan.body):
                try:
                    pod = _start(storage, plan, plan.start)
                except REFUSALS as error:
                    fail(plan, error)
                else:
                    decision.started(ctx, plan, pod)
    except _Rebind:
        return REBIND_SECONDS
    finally:
        locks.close()
    _write(storage, plan)
    for action in plan.after:
        _do(storage, plan, action)
    return plan.again_in


class _Rebind(Exception):
    """The Worker changed while its binding was written."""


def _write(storage: Repository, plan: Plan) -> None:
    """The status, if it changed, only on the version read: the runtime reports to the same
    status, and a stale write must not undo its report (a 409 makes the pass run again on
    fresh data, its Events unsaid). Then the Events of the pass."""
    if plan.quiet:
        return
    changed = changes(plan)
    if changed is not None:
        version = storage.patch_status(
            "workers", plan.namespace, plan.name, changed, meta(plan.body).resource_version
        )
        if version:
            plan.body["metadata"]["resourceVersion"] = version
    for type_, reason, message in plan.events:
        level = logging.WARNING if type_ == "Warning" else logging.INFO
        log.log(level, "%s: %s", reason, message, extra=_ref(plan))
        storage.post_event(plan.body, type_, reason, message)
    for counter, label in plan.counts:
        _COUNTERS[counter](label)


_COUNTERS: dict[str, Callable[[str], None]] = {
    "kill": lambda via: metrics.KILLS.labels(via=via).inc(),
    "failure": lambda reason: metrics.RUN_FAILURES.labels(reason=reason).inc(),
    "spawn_refusal": lambda reason: metrics.SPAWN_REFUSALS.labels(
        reason=reason, stage="handler"
    ).inc(),
    "pin_failure": lambda reason: metrics.PIN_FAILURES.labels(reason=reason).inc(),
}


def _do(storage: Repository, plan: Plan, action: Action) -> None:
    namespace = plan.namespace
    match action:
        case Bind(annotations, labels, owners):
            with tracing.spawn_span("bind profile", plan.body):
                try:
                    version = storage.patch_metadata(
                        "workers", plan.body, annotations, labels, owners
                    )
                except ApiError as e:
                    if e.status != 409:
                        raise
                    # Someone wrote in between (perhaps a binding): read again, not overwrite.
                    raise _Rebind from e
            written = plan.body["metadata"]
            written["resourceVersion"] = version
            written["annotations"] = {**meta(plan.body).annotations, **annotations}
        case Grant(grant_namespace, role, rules):
            storage.set_role_rules(grant_namespace, role, rules)
        case Access(objects, regrant):
            if not storage.ensure_access(objects):
                _do(storage, plan, regrant)  # made by an earlier pass: its children may differ
        case DeletePod(name, uid):
            storage.delete_pod(namespace, name, uid)
        case ShortenDeadline(pod, uid, seconds):
            storage.shorten_pod_deadline(namespace, pod, uid, seconds)
        case StopBelow(cause):
            _stop_below(storage, namespace, plan.name, cause, plan.now)
        case DeleteWorker(uid):
            storage.delete_worker(namespace, plan.name, uid)


def _start(storage: Repository, plan: Plan, start: Start) -> Body:
    """The run's pod: a ready warm pod of its pool if one is ready (no pod and no account
    to make), else its own, as a free account of its agent's identity pool or after its
    own ServiceAccount (the API server admits no pod naming an absent account). The
    RoleBinding, made after the pod, names the account the pod runs as
    (`worker_plan.decision.started`)."""
    created = pools.claim(
        storage,
        plan.body,
        start.config,
        start.pod,
        start.active,
        start.frozen,
        start.deadline_seconds,
        start.effective,
    )
    if created is None:
        # An account of the agent's pool made ahead, if one is free: none to make first.
        pooled = identities.take(storage, plan.body, start.config)
        if pooled is None:
            storage.ensure_access([start.account])
        else:
            run_as(start.pod, pooled)
        try:
            created = storage.create_pod(start.pod, plan.uid)
        except Conflict as e:
            raise RunFailedError(str(e), reason=reasons.POD_CONFLICT) from e
    metrics.SPAWNS.inc()
    if born := meta(plan.body).creation_timestamp:
        since = dt.datetime.now(dt.UTC) - clocks.parse(born)
        metrics.POD_LATENCY.observe(max(since.total_seconds(), 0))
    return created


def _stop_below(
    storage: Repository, namespace: str, name: str, cause: str, now: dt.datetime
) -> None:
    """Every live run below `name` stops, each planned by `worker_plan.ends.stop` and written
    once: its pod first, then its status and its Event."""
    for child in storage.children(namespace, name):
        body = storage.get("workers", namespace, child)
        if body is None:
            continue
        pod = pools.run_pod(storage, namespace, body)
        plan = ends.stop(body, pod, cause, name, now)
        if plan is None:
            continue
        for action in plan.before:
            _do(storage, plan, action)
        _write(storage, plan)


def _observe(plan: Plan) -> None:
    metrics.PHASES.observe(plan.uid, plan.status.phase)
    if (used := plan.status.tokens_used) is not None:
        metrics.TOKENS.observe(
            plan.uid, plan.spec.agent, plan.spec.profile or "", used.prompt, used.completion
        )
    if plan.tree_runs is not None:
        metrics.TREE_RUNS.labels(agent=plan.spec.agent).observe(plan.tree_runs)


def _ref(plan: Plan) -> dict[str, Any]:
    """What a JSON log line says it is about (kopf's formatter puts it under "object")."""
    return {"k8s_ref": {"kind": "Worker", "namespace": plan.namespace, "name": plan.name}}


def deleted(storage: Repository, body: dict[str, Any]) -> None:
    """Deleting a Worker is a kill, unless it was collected or had already ended."""
    gone = meta(body)
    metrics.PHASES.observe(gone.uid, None)
    metrics.TOKENS.forget(gone.uid)
    ended = phase(body)
    collected = gone.annotations.get(COLLECTED_ANNOTATION)
    if ended in TERMINAL_PHASES or collected:
        return
    metrics.KILLS.labels(via="deletion").inc()
    storage.post_event(
        body,
        "Warning",
        reasons.KILLED,
        f"killed: the Worker was deleted while {ended or 'Pending'}",
    )
