"""A run whose AgentConfig names a Kueue LocalQueue, pass by pass, against the in-memory
repository: its pod carries the queue's label; while Kueue's gate holds the pod the run is
Pending with Queued=True and Kueue's reason; admitted, it goes on (one Event); a kill or
its deadline frees its place. tests/e2e/test_kueue.py shows the same with Kueue itself."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agentworkers.api.names import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL
from agentworkers.controller.passes import workers
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import planner, pod_phase, reconcile, worker

QUEUED_WORKER = {"queueName": "agents", "resources": {"requests": {"cpu": "500m"}}}
INSUFFICIENT = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
    "default, 500m more needed"
)


class Kueued(Memory):
    """The repository with Kueue's pod webhook in front: a pod that names a LocalQueue is
    created gated (the API server returns it so)."""

    def create_pod(self, pod: dict[str, Any], owner_uid: str) -> dict[str, Any]:
        if KUEUE_QUEUE_LABEL in pod["metadata"]["labels"]:
            pod["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
        return super().create_pod(pod, owner_uid)


def _workload(memory: Memory, pod: str, **status: Any) -> None:
    memory.put(
        "workloads",
        {
            "metadata": {
                "name": f"pod-{pod}-1a2b3",
                "ownerReferences": [{"kind": "Pod", "name": pod, "uid": f"uid-{pod}"}],
            },
            "spec": {"queueName": "agents"},
            "status": status,
        },
    )


def _pending(memory: Memory, pod: str) -> None:
    _workload(
        memory,
        pod,
        conditions=[
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": INSUFFICIENT,
            }
        ],
    )


def _admit(memory: Memory, name: str) -> None:
    memory.objects[("pods", "ns", name)]["spec"].pop("schedulingGates")
    _workload(
        memory,
        name,
        conditions=[{"type": "Admitted", "status": "True", "reason": "Admitted"}],
        admission={"clusterQueue": "team-a"},
    )


def _status(memory: Memory, name: str) -> dict[str, Any]:
    return memory.find("workers", name)["status"]  # type: ignore[index]


def _condition(memory: Memory, name: str, type_: str) -> dict[str, Any]:
    return next(c for c in _status(memory, name)["conditions"] if c["type"] == type_)


def _queued(memory: Memory, name: str, **spec: Any) -> None:
    memory.put("workers", worker(name, **spec))
    reconcile(memory, name)


def test_a_queued_run_waits_with_kueue_s_reason_and_goes_on_once_admitted() -> None:
    memory = Kueued()
    planner(memory, worker=QUEUED_WORKER)
    _queued(memory, "w")
    pod = memory.find("pods", "w")
    assert pod is not None and pod["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "agents"

    # Gated, before Kueue made its Workload: waiting, in general words.
    reconcile(memory, "w")
    queued = _condition(memory, "w", "Queued")
    assert (queued["status"], queued["reason"]) == ("True", "WaitingForAdmission")
    assert _status(memory, "w")["phase"] == "Pending"
    assert _status(memory, "w")["queue"] == "agents"

    # Kueue's Workload says why: its reason and message, the queue named.
    _pending(memory, "w")
    reconcile(memory, "w")
    queued = _condition(memory, "w", "Queued")
    assert (queued["status"], queued["reason"]) == ("True", "Pending")
    assert queued["message"] == f"waiting in LocalQueue agents: Pending: {INSUFFICIENT}"
    assert _condition(memory, "w", "Ready")["status"] == "False"
    assert _condition(memory, "w", "Reconciling")["status"] == "True"
    assert _status(memory, "w").get("startedAt") is None
    writes = len(memory.writes)
    reconcile(memory, "w")
    assert len(memory.writes) == writes  # nothing new: nothing written

    # Admitted: Queued=False, one Event, and the pod's phase from then on.
    _admit(memory, "w")
    pod_phase(memory, "w", "Running")
    reconcile(memory, "w")
    queued = _condition(memory, "w", "Queued")
    assert (queued["status"], queued["reason"]) == ("False", "Admitted")
    assert (
        queued["message"]
        == "Kueue admitted the pod from LocalQueue agents into ClusterQueue team-a"
    )
    assert _status(memory, "w")["startedAt"]
    assert memory.reasons("w") == ["Admitted"]
    reconcile(memory, "w")
    assert memory.reasons("w") == ["Admitted"]
    assert sum(1 for w in memory.writes if w == ("POST", "pods", "w")) == 1


def test_a_pod_kueue_never_gated_says_so_and_runs() -> None:
    memory = Memory()  # no Kueue: nothing gates the pod
    planner(memory, worker=QUEUED_WORKER)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    queued = _condition(memory, "w", "Queued")
    assert (queued["status"], queued["reason"]) == ("False", "NotQueued")
    assert "managedJobsNamespaceSelector" in queued["message"]
    assert _status(memory, "w")["phase"] == "Pending"
    assert memory.reasons("w") == []


def test_killing_a_queued_run_frees_its_place() -> None:
    memory = Kueued()
    planner(memory, worker=QUEUED_WORKER)
    _queued(memory, "w")
    _pending(memory, "w")
    reconcile(memory, "w")
    memory.objects[("workers", "ns", "w")]["spec"]["kill"] = {"reason": "not needed", "by": "me"}
    reconcile(memory, "w")
    assert memory.find("pods", "w") is None  # with its pod goes its Workload, and its place
    assert _status(memory, "w")["phase"] == "Killed"
    queued = _condition(memory, "w", "Queued")
    assert (queued["status"], queued["reason"]) == ("False", "Killed")
    assert memory.reasons("w") == ["Killed"]


def test_a_queued_run_past_its_deadline_fails_and_frees_its_place() -> None:
    memory = Kueued()
    planner(memory, worker={**QUEUED_WORKER, "deadlineSeconds": 60})
    _queued(memory, "w")
    _pending(memory, "w")
    later = workers.reconcile(memory, "ns", "w")  # its deadline: a clock of the pass while it waits
    assert later is not None and 58 <= later <= 61
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    memory.objects[("workers", "ns", "w")]["status"]["deadlineAt"] = past.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    reconcile(memory, "w")
    assert memory.find("pods", "w") is None
    status = _status(memory, "w")
    assert status["phase"] == "Failed"
    assert _condition(memory, "w", "Ready")["reason"] == "DeadlineExceeded"
    assert "passed while it waited in LocalQueue agents" in status["error"]
    assert memory.reasons("w") == ["DeadlineExceeded"]


def test_a_pass_that_freed_the_place_but_ended_before_failing_the_run_fails_it() -> None:
    memory = Kueued()
    planner(memory, worker={**QUEUED_WORKER, "deadlineSeconds": 60})
    _queued(memory, "w")
    reconcile(memory, "w")
    kept = memory.objects[("workers", "ns", "w")]
    kept["status"]["conditions"] = [
        {**c, "status": "False", "reason": "DeadlineExceeded", "message": "deadline passed"}
        if c["type"] == "Queued"
        else c
        for c in kept["status"]["conditions"]
    ]
    memory.objects.pop(("pods", "ns", "w"))  # the pass deleted the pod, then crashed
    reconcile(memory, "w")
    assert _status(memory, "w")["phase"] == "Failed"
    assert _condition(memory, "w", "Ready")["reason"] == "DeadlineExceeded"  # not PodLost


def test_a_run_admitted_after_a_wait_gets_what_is_left_of_its_deadline() -> None:
    memory = Kueued()
    planner(memory, worker={**QUEUED_WORKER, "deadlineSeconds": 600})
    _queued(memory, "w")
    assert memory.find("pods", "w")["spec"]["activeDeadlineSeconds"] == 600  # type: ignore[index]
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=100)
    memory.objects[("workers", "ns", "w")]["status"]["deadlineAt"] = soon.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )  # it waited 500 s
    _admit(memory, "w")
    reconcile(memory, "w")
    left = memory.find("pods", "w")["spec"]["activeDeadlineSeconds"]  # type: ignore[index]
    assert 98 <= left <= 101
    assert _status(memory, "w")["deadlineAt"] == soon.strftime("%Y-%m-%dT%H:%M:%SZ")
