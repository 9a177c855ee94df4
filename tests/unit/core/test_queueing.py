"""Where a queued run stands, from its pod and Kueue's Workload (core.queueing)."""

from __future__ import annotations

from typing import Any

from agentworkers.core.queueing import Standing, gated, standing


def pod(queue: str | None = "agents", gate: bool = True) -> dict[str, Any]:
    labels = {"agentworkers.io/worker": "w"}
    if queue:
        labels["kueue.x-k8s.io/queue-name"] = queue
    spec = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]} if gate else {}
    return {"metadata": {"name": "w", "labels": labels}, "spec": spec}


def workload(*conditions: dict[str, str], cluster_queue: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue}
    return {"metadata": {"name": "pod-w"}, "status": status}


def test_a_pod_in_no_queue_has_no_standing() -> None:
    assert standing(pod(queue=None, gate=False), None, False) is None


def test_another_gate_is_not_kueue_s() -> None:
    other = pod()
    other["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    assert not gated(other)


def test_gated_it_waits_in_kueue_s_words_once_kueue_has_them() -> None:
    assert standing(pod(), None, False) == Standing(
        "agents", True, "WaitingForAdmission",
        "waiting in LocalQueue agents: Kueue has not admitted the pod yet",
    )  # fmt: skip
    # A reserved-then-released quota without words yet: still the general words.
    bare = workload({"type": "QuotaReserved", "status": "False", "reason": "Pending"})
    assert standing(pod(), bare, True).reason == "WaitingForAdmission"  # type: ignore[union-attr]
    full = workload(
        {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
         "message": "LocalQueue agents doesn't exist"}
    )  # fmt: skip
    assert standing(pod(), full, True) == Standing(
        "agents", True, "Inadmissible",
        "waiting in LocalQueue agents: Inadmissible: LocalQueue agents doesn't exist",
    )  # fmt: skip


def test_ungated_it_was_admitted_or_never_queued() -> None:
    admitted = workload({"type": "Admitted", "status": "True"}, cluster_queue="team-a")
    assert standing(pod(gate=False), admitted, True) == Standing(
        "agents", False, "Admitted",
        "Kueue admitted the pod from LocalQueue agents into ClusterQueue team-a",
    )  # fmt: skip
    # Seen waiting, its Workload not seen (yet): admitted all the same.
    assert standing(pod(gate=False), None, True).reason == "Admitted"  # type: ignore[union-attr]
    # Never gated, no Workload: Kueue does not manage it.
    assert standing(pod(gate=False), None, False).reason == "NotQueued"  # type: ignore[union-attr]
