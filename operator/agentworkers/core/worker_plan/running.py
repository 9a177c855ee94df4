"""A started run followed through its pod: its wait in a Kueue queue, its phase from
the pod's between the runtime's own reports, its idle clock, a pod lost, and what the
runtime said of its MCP servers. Called by `decision`, never the other way round."""

from __future__ import annotations

import math
from typing import Any

from agentworkers.api import AgentConfigSpec, reasons
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import FROZEN_ANNOTATION
from agentworkers.core import clocks
from agentworkers.core.objects import meta, pod_status
from agentworkers.core.pods import failure, running_since
from agentworkers.core.pools import claimed_account
from agentworkers.core.queueing import standing
from agentworkers.core.worker_plan.plan import (
    Body,
    Context,
    DeletePod,
    Plan,
    ShortenDeadline,
    condition_of,
)
from agentworkers.errors import RunFailedError

# Seconds a started container's runtime has to report Running itself before the pod's
# phase stands in for it: one status write per run fewer, when the runtime is alive.
RUNTIME_REPORT_SECONDS = 3.0


def lost(plan: Plan) -> None:
    """The run's pod is gone before the run ended: it failed (PodLost), or, when a pass
    deleted it at the deadline of the queued run and went no further, it ran out of time."""
    queued = condition_of(plan, reasons.QUEUED)
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


def queued(ctx: Context, plan: Plan, pod: Body) -> bool:
    """A run whose pod names a Kueue LocalQueue: while Kueue holds the pod back, the run is
    Pending with Queued=True and Kueue's reason, until Kueue admits it (Queued=False, one
    Event) or its deadline passes (Failed, its pod and its place in the queue freed). True
    while it waits."""
    before = condition_of(plan, reasons.QUEUED)
    if before is not None and before.status == "False":
        return False  # admitted, or never gated: the rest is the pod's
    name = meta(pod).name
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
                plan.before.append(ShortenDeadline(name, meta(pod).uid, seconds))
            plan.update(started_at=clocks.stamp(plan.now), last_event=found.message)
            plan.announce("Normal", found.reason, found.message)
        return False
    left = plan.left(plan.status.deadline_at, 0)
    if left is not None and left <= 0:
        # The pod first (this pass's status says why); a pass that finds it gone after a
        # crash here knows why too (`lost`).
        plan.before.append(DeletePod(name, meta(pod).uid))
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


def follow(plan: Plan, pod: Body) -> None:
    """Worker status from its pod: what kubectl get workers shows between runtime reports."""
    of = meta(pod)
    annotations = of.annotations
    changes: dict[str, Any] = {"pod": of.name}
    if plan.status.frozen_revision is None and FROZEN_ANNOTATION in annotations:
        frozen = RevisionRef.model_validate_json(annotations[FROZEN_ANNOTATION])
        changes.update(frozen_revision=frozen, revision=frozen.name)
    # A warm pod was made, and its container started, before its run: the run started,
    # and its runtime's clock to report Running runs, from its claim.
    claimed = claimed_account(pod) is not None
    if plan.status.started_at is None:
        changes["started_at"] = (not claimed and of.creation_timestamp) or clocks.stamp(plan.now)
    phase = pod_status(pod).phase
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
    plan.condition(reasons.STARTED, "True", reasons.POD_CREATED, f"pod {of.name}")
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


def idle_clock(plan: Plan, pod: Body, config: AgentConfigSpec) -> None:
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
    plan.after.append(DeletePod(meta(pod).name, meta(pod).uid))
    plan.announce("Normal", reasons.IDLE_TIMEOUT, message)


def mcp_servers(plan: Plan) -> None:
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
    before = condition_of(plan, reasons.MCP_SERVERS_READY)
    message = "; ".join(
        f"MCP server {s.name} ({s.url}){' (required)' if s.required else ''} is unavailable: "
        f"{s.message}"
        for s in down
    )
    plan.condition(reasons.MCP_SERVERS_READY, "False", reasons.MCP_SERVER_UNAVAILABLE, message)
    after = condition_of(plan, reasons.MCP_SERVERS_READY)
    if before is None or (before.status, before.message) != (after.status, after.message):
        plan.announce("Warning", reasons.MCP_SERVER_UNAVAILABLE, after.message)
