"""A run that stops or ended: kills (its own, its parent's, its tree's budget), the runs
below a killed one (`stop`), a top-level run's tree sums and a finished run's TTL."""

from __future__ import annotations

import datetime as dt

from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, reasons
from agentworkers.api.agentconfig import TreeLimits
from agentworkers.api.worker import (
    TERMINAL_PHASES,
    TreeStatus,
)
from agentworkers.core import clocks
from agentworkers.core.objects import meta, phase
from agentworkers.core.owners import owned_by
from agentworkers.core.tree import tokens_used
from agentworkers.core.worker_plan.plan import (
    Body,
    Context,
    DeletePod,
    DeleteWorker,
    Plan,
    StopBelow,
    condition_of,
    read,
)
from agentworkers.errors import REFUSALS

PARENT_KILLED = "parent killed: "
# How often a busy tree's sums (status.tree) are written to its root, at most.
TREE_SUM_SECONDS = 5.0


def ended(ctx: Context, plan: Plan) -> None:
    """A run that ended on its own (the runtime reported Done or Failed, or the pod
    succeeded): say so once, in Ready and in an Event. Killed runs and failures the
    operator decided have said so already (Ready is False then). Then its TTL clock."""
    if not plan.status.pod and ctx.pod is not None and owned_by(ctx.pod, plan.uid):
        # A run that ended before a pass recorded its pod (a warm pod's runtime reports
        # within moments of the claim, and its write wins over that pass's): record it now.
        plan.update(pod=meta(ctx.pod).name)
    if plan.status.phase == "Killed":
        # Its runs below go with it; a pass cut short by an API error resumes here.
        stop_below(plan, plan.status.error or "killed")
    ready = condition_of(plan, reasons.READY)
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
    ready = condition_of(plan, reasons.READY)
    if ttl is None or ready is None:
        return
    parent = ctx.parent if plan.spec.parent else None
    if parent is not None and phase(parent) not in TERMINAL_PHASES:
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


def stop_run(
    plan: Plan, pod: Body | None, reason: str, by: str | None, event: str = reasons.KILLED
) -> None:
    """The run stops: its pod goes (before the status says Killed: a pass cut short
    between the two stops it again), then Killed and one Event (reason `event`)."""
    who = f" by {by}" if by else ""
    message = f"killed{who}: {reason}"
    queued = condition_of(plan, reasons.QUEUED)
    if queued is not None and queued.status == "True":
        # Its pod goes, and with it its Workload: its place in the queue is free.
        plan.condition(reasons.QUEUED, "False", reasons.KILLED, f"left its queue: {message}")
    if pod is not None and owned_by(pod, plan.uid):
        # Only this run's pod, and only the one we saw (a precondition on its uid).
        plan.before.append(DeletePod(meta(pod).name, meta(pod).uid))
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
    stop_run(plan, pod, cause, by)
    plan.counts.append(("kill", "parent"))
    stop_below(plan, cause)
    return plan


def stop_below(plan: Plan, reason: str) -> None:
    """A killed run's children go with it, each with the reason `parent killed: <reason>`
    and one Event, before the garbage collector removes them (its pods would otherwise
    run on until then). Their specs stay as their spawner wrote them."""
    if reason.startswith(reasons.TREE_BUDGET_EXHAUSTED):
        return  # the whole tree stops, each run for that reason (`tree_spent`)
    plan.before.append(StopBelow(_from_parent(reason)))


def _from_parent(reason: str) -> str:
    """A descendant's kill reason: the root's, said once however deep the tree."""
    return reason if reason.startswith(PARENT_KILLED) else PARENT_KILLED + reason


def parent_killed(ctx: Context, plan: Plan) -> bool:
    """A run below a killed run, or one asked to be, stops too: a child spawned while its
    parent was being killed, a run whose pod a cascade from above removed before its parent
    was written Killed (its own pass must not call that PodLost), a cascade that a restart
    or an API error cut short. The nearest such run above gives the reason. True when it
    stopped."""
    for above in ctx.chain[1:] or ([ctx.parent] if ctx.parent else []):
        asked = (above.get("spec") or {}).get("kill") or {}
        if phase(above) == "Killed":
            cause = (above.get("status") or {}).get("error") or "killed"
        elif asked:
            cause = asked.get("reason") or "killed"
        else:
            continue
        cause = _from_parent(cause)
        stop_run(plan, ctx.pod, cause, plan.spec.parent)
        plan.counts.append(("kill", "parent"))
        stop_below(plan, cause)
        return True
    return False


def tree_spent(ctx: Context, plan: Plan) -> bool:
    """A run whose tree spent its token budget stops (TreeBudgetExhausted). True if so."""
    root = ctx.chain[-1]
    tree = (root.get("status") or {}).get("tree") or {}
    if not tree.get("budgetExhausted"):
        return False
    reason = (
        f"{reasons.TREE_BUDGET_EXHAUSTED}: the tree used {tree.get('tokensUsed')} of its "
        f"{tree.get('tokenBudget')} tokens"
    )
    stop_run(plan, ctx.pod, reason, meta(root).name, reasons.TREE_BUDGET_EXHAUSTED)
    plan.counts.append(("kill", "tree-budget"))
    return True


def sum_tree(ctx: Context, plan: Plan) -> None:
    """A top-level run sums its tree (runs, live runs, tokens) into `status.tree`, at most
    every TREE_SUM_SECONDS. Past the tree's tokenBudget it marks the tree spent (and tells
    the root by one Event); each live run below then stops itself in its own pass
    (`tree_spent`), so that no Worker has two writers."""
    below = ctx.below
    previous = plan.status.tree
    if not below and previous is None:
        return  # a run alone: no tree to speak of
    limits = _tree_limits(ctx.config)
    budget = limits.token_budget if limits else None
    used = tokens_used(plan.body) + sum(tokens_used(b) for b in below)
    live = [b for b in below if phase(b) not in TERMINAL_PHASES]
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
