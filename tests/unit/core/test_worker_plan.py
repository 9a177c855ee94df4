"""The Worker pass's planner, one row per situation: a context built from test objects in,
the whole status it wants and the writes it asks for out (as kueue's reconciler tests
compare a whole wanted Workload). No store, no clock: the context says what is and when."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.core import clocks
from agentworkers.core.worker_plan.decision import decide
from agentworkers.core.worker_plan.plan import (
    Access,
    Action,
    Context,
    DeletePod,
    DeleteWorker,
    StopBelow,
)
from agentworkers.errors import UnknownWorkerError

NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
AT = clocks.stamp(NOW)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
REVISION = {"name": "planner-1", "revision": 1, "digest": "d" * 64}


def ago(seconds: float) -> str:
    return clocks.stamp(NOW - dt.timedelta(seconds=seconds))


# --- builders ------------------------------------------------------------------------------


def worker(name: str = "w", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": ago(60),
        },
        "spec": {"agent": "planner", **spec},
        **({"status": status} if status is not None else {}),
    }


def config(active: bool = True, **worker_template: Any) -> dict[str, Any]:
    body = yaml.safe_load((EXAMPLES / "agentconfig.yaml").read_text())
    body["metadata"].update(namespace="ns", uid="uid-planner")
    body["spec"]["worker"] = {**(body["spec"].get("worker") or {}), **worker_template}
    body["status"] = {"activeRevision": REVISION} if active else {}
    return body


def pod(
    name: str = "w", phase: str = "Running", owner: str = "uid-w", **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"pod-{name}",
            "creationTimestamp": ago(30),
            "ownerReferences": [{"uid": owner, "controller": True}],
            **meta,
        },
        "status": {"phase": phase, "startTime": ago(30)},
    }


def condition(type_: str, status: str, reason: str, message: str, at: str = AT) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
        "lastTransitionTime": at,
    }


def ready(
    status: str, reason: str, message: str, phase: str | None, since: str = AT
) -> list[dict[str, Any]]:
    """Ready, with kstatus' Stalled and Reconciling beside it as the run's phase has them;
    `since`: when those two last changed (they keep their time while their status holds)."""
    failed, pending = phase == "Failed", phase in (None, "Pending")
    stalled, reconciling = ("True" if failed else "False"), ("True" if pending else "False")
    return [
        condition("Ready", status, reason, message),
        condition("Stalled", stalled, reason, message if failed else "", AT if failed else since),
        condition("Reconciling", reconciling, reason, message if pending else "", since),
    ]


RUNNING = {
    "phase": "Running",
    "pod": "w",
    "startedAt": ago(30),
    "conditions": [
        condition("Started", "True", "PodCreated", "pod w", ago(30)),
        *(
            {**c, "lastTransitionTime": ago(30)}
            for c in ready("True", "Running", "the run has its pod", "Running")
        ),
    ],
}


# --- the table -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    context: Context
    status: dict[str, Any]  # the whole status it wants written
    before: tuple[type[Action], ...] = ()
    after: tuple[type[Action], ...] = ()
    events: tuple[str, ...] = ()
    again_in: float | None = None
    starts: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def ctx(body: dict[str, Any], **kw: Any) -> Context:
    return Context(body, NOW, **{"config": config(), "chain": (body,), **kw})


MISSING = "AgentConfig 'planner' does not exist"
SPENT = "TreeBudgetExhausted: the tree used 1000 of its 1000 tokens"
SPENT_ROOT = worker(
    "root", status={"tree": {"tokensUsed": 1000, "tokenBudget": 1000, "budgetExhausted": True}}
)


def config_with_tree(**tree: Any) -> dict[str, Any]:
    body = config()
    body["spec"]["tree"] = tree
    return body


KILLED = "killed by alice: not needed"
IDLE = "Idle for 60 s (idleTimeoutSeconds): the run is Done and its pod freed"
BROKEN = "spec.parent: worker 'ghost', an ancestor of this run, does not exist"

ROWS = {
    "no AgentConfig: it waits, saying why": Row(
        ctx(worker(), config=None),
        {
            "observedGeneration": 1,
            "phase": "Pending",
            "lastEvent": f"waiting: {MISSING}",
            "conditions": ready("False", "AgentConfigMissing", MISSING, "Pending"),
        },
        again_in=5.0,
    ),
    "no revision yet: it waits": Row(
        ctx(worker(), config=config(active=False)),
        {
            "observedGeneration": 1,
            "phase": "Pending",
            "lastEvent": "waiting: AgentConfig 'planner' has no revision yet",
            "conditions": ready(
                "False", "NoActiveRevision", "AgentConfig 'planner' has no revision yet", "Pending"
            ),
        },
        again_in=5.0,
    ),
    "no pod: its pod is started, and the status waits for it": Row(
        ctx(worker()),
        {"observedGeneration": 1, "deadlineAt": clocks.stamp(NOW + dt.timedelta(seconds=600))},
        starts=True,
    ),
    "suspended: no pod, and Started says why": Row(
        ctx(worker(suspend=True)),
        {
            "observedGeneration": 1,
            "phase": "Pending",
            "conditions": [
                condition(
                    "Started", "False", "Suspended", "the run waits for spec.suspend to be cleared"
                )
            ],
        },
    ),
    "its pod runs and its runtime has been silent: the pod's phase stands in": Row(
        ctx(worker(status={"startedAt": ago(30)}), pod=pod()),
        {
            "observedGeneration": 1,
            "phase": "Running",
            "pod": "w",
            "startedAt": ago(30),
            "lastEvent": "pod running",
            "conditions": [
                condition("Started", "True", "PodCreated", "pod w"),
                *ready("True", "Running", "the run has its pod", "Running"),
            ],
        },
        before=(Access,),  # the pod is recorded now: its runtime's Role and RoleBinding
    ),
    "a running run, nothing new: nothing changes": Row(
        ctx(worker(status=RUNNING), pod=pod()), {**RUNNING, "observedGeneration": 1}
    ),
    "its pod failed": Row(
        ctx(
            worker(status=RUNNING),
            pod={**pod(), "status": {"phase": "Failed", "reason": "Evicted", "message": "oom"}},
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Failed",
            "error": "oom",
            "lastEvent": "Evicted: oom",
            "conditions": [
                RUNNING["conditions"][0],
                *ready("False", "Evicted", "oom", "Failed", ago(30)),
            ],
        },
        events=("Evicted",),
    ),
    "its pod was deleted under it": Row(
        ctx(worker(status=RUNNING)),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Failed",
            "error": "pod w was deleted before the run ended",
            "lastEvent": "PodLost: pod w was deleted before the run ended",
            "conditions": [
                RUNNING["conditions"][0],
                *ready(
                    "False", "PodLost", "pod w was deleted before the run ended", "Failed", ago(30)
                ),
            ],
        },
        events=("PodLost",),
    ),
    "a pod of its name is someone else's": Row(
        ctx(worker(), pod=pod(owner="uid-other")),
        {
            "observedGeneration": 1,
            "phase": "Failed",
            "error": "a pod named w is not this run's",
            "lastEvent": "PodConflict: a pod named w is not this run's",
            "conditions": ready(
                "False", "PodConflict", "a pod named w is not this run's", "Failed"
            ),
        },
        events=("PodConflict",),
    ),
    "killed while running: its pod first, then the runs below, then Killed": Row(
        ctx(worker(status=RUNNING, kill={"reason": "not needed", "by": "alice"}), pod=pod()),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Killed",
            "error": "not needed",
            "lastEvent": KILLED,
            "conditions": [
                RUNNING["conditions"][0],
                condition("Killed", "True", "Killed", KILLED),
                *ready("False", "Killed", KILLED, "Killed", ago(30)),
            ],
        },
        before=(DeletePod, StopBelow),
        events=("Killed",),
    ),
    "its parent is killed: it stops too": Row(
        ctx(
            worker(parent="p"),
            parent=worker("p", status={"phase": "Killed", "error": "enough"}),
            chain=(worker(parent="p"), worker("p", status={"phase": "Killed", "error": "enough"})),
        ),
        {
            "observedGeneration": 1,
            "phase": "Killed",
            "error": "parent killed: enough",
            "lastEvent": "killed by p: parent killed: enough",
            "conditions": [
                condition("Killed", "True", "Killed", "killed by p: parent killed: enough"),
                *ready("False", "Killed", "killed by p: parent killed: enough", "Killed"),
            ],
        },
        before=(StopBelow,),
        events=("Killed",),
    ),
    "its pod removed by a cascade from above, its parent not yet Killed: Killed, not PodLost": Row(
        ctx(
            worker(status=RUNNING, parent="p"),
            parent=worker("p", status=RUNNING, parent="root"),
            chain=(
                worker(status=RUNNING, parent="p"),
                worker("p", status=RUNNING, parent="root"),
                worker("root", status=RUNNING, kill={"reason": "enough", "by": "alice"}),
            ),
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Killed",
            "error": "parent killed: enough",
            "lastEvent": "killed by p: parent killed: enough",
            "conditions": [
                RUNNING["conditions"][0],
                condition("Killed", "True", "Killed", "killed by p: parent killed: enough"),
                *ready("False", "Killed", "killed by p: parent killed: enough", "Killed", ago(30)),
            ],
        },
        before=(StopBelow,),
        events=("Killed",),
    ),
    "its tree spent its budget: it stops, and the runs below stop themselves": Row(
        ctx(
            worker(status=RUNNING, parent="root"),
            pod=pod(),
            parent=SPENT_ROOT,
            chain=(worker(status=RUNNING, parent="root"), SPENT_ROOT),
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Killed",
            "error": SPENT,
            "lastEvent": f"killed by root: {SPENT}",
            "conditions": [
                RUNNING["conditions"][0],
                condition("Killed", "True", "Killed", f"killed by root: {SPENT}"),
                *ready("False", "Killed", f"killed by root: {SPENT}", "Killed", ago(30)),
            ],
        },
        before=(DeletePod,),
        events=("TreeBudgetExhausted",),
    ),
    "a top-level run past its tree's budget marks it spent, and is told once": Row(
        ctx(
            worker(status={**RUNNING, "tokensUsed": {"prompt": 900, "completion": 100}}),
            config=config_with_tree(tokenBudget=1000),
            pod=pod(),
            below=(worker("a", parent="w", status={"phase": "Running"}),),
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "tokensUsed": {"prompt": 900, "completion": 100, "estimated": 0},
            "tree": {
                "runs": 1,
                "live": 1,
                "tokensUsed": 1000,
                "tokenBudget": 1000,
                "budgetExhausted": True,
                "summedAt": AT,
            },
        },
        events=("TreeBudgetExhausted",),
    ),
    "an ancestor is missing: it fails closed": Row(
        ctx(
            worker(parent="ghost"), broken=UnknownWorkerError(field="spec.parent", rule=BROKEN[13:])
        ),
        {
            "observedGeneration": 1,
            "phase": "Failed",
            "error": BROKEN,
            "lastEvent": f"UnknownWorker: {BROKEN}",
            "conditions": ready("False", "UnknownWorker", BROKEN, "Failed"),
        },
        events=("UnknownWorker",),
    ),
    "Idle past its idle timeout: Done, its pod freed once that is written": Row(
        ctx(
            worker(
                status={**RUNNING, "phase": "Idle", "idleSince": ago(61)}, idleTimeoutSeconds=60
            ),
            pod=pod(),
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Done",
            "idleSince": ago(61),
            "lastEvent": IDLE,
            "conditions": [
                RUNNING["conditions"][0],
                *ready("False", "IdleTimeout", IDLE, "Done", ago(30)),
            ],
        },
        after=(DeletePod,),
        events=("IdleTimeout",),
    ),
    "Done a TTL ago: deleted once its Event is out": Row(
        ctx(
            worker(
                status={
                    **RUNNING,
                    "phase": "Done",
                    "conditions": [
                        condition("Ready", "False", "Completed", "the run is Done", ago(31))
                    ],
                },
                ttlSecondsAfterFinished=30,
            ),
            pod=pod(phase="Succeeded"),
        ),
        {
            **RUNNING,
            "observedGeneration": 1,
            "phase": "Done",
            "conditions": [
                condition("Ready", "False", "Completed", "the run is Done", ago(31)),
                condition("Stalled", "False", "Completed", ""),
                condition("Reconciling", "False", "Completed", ""),
            ],
        },
        after=(DeleteWorker,),
        events=("TTLExpired",),
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_planner(row: Row) -> None:
    plan = decide(row.context)
    assert plan.wanted().wire() == {"conditions": [], "recentEvents": [], **row.status}
    assert tuple(type(a) for a in plan.before) == row.before
    assert tuple(type(a) for a in plan.after) == row.after
    assert tuple(reason for _, reason, _ in plan.events) == row.events
    assert plan.again_in == row.again_in
    assert (plan.start is not None) == row.starts


def test_a_started_pod_is_named_after_its_worker_and_freezes_the_active_revision() -> None:
    plan = decide(ctx(worker()))
    assert plan.start is not None
    assert plan.start.pod["metadata"]["name"] == "w"  # deterministic: a crash adopts it
    assert plan.start.account["metadata"]["name"] == "worker-w"
    assert plan.start.frozen is not None and plan.start.frozen.name == "planner-1"


def test_a_plan_is_the_same_for_the_same_context() -> None:
    """Pure: the same context, the same decision (what makes a pass safe to repeat)."""
    for row in ROWS.values():
        first, second = decide(row.context), decide(row.context)
        assert first.wanted() == second.wanted() and first.before == second.before
