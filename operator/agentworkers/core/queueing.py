"""Runs that wait in a Kueue LocalQueue. Pure: a run's pod and Kueue's Workload for it in,
where the run stands in its queue out.

An AgentConfig's spec.worker.queueName puts Kueue's queue label on each of its runs' pods.
Kueue's pod webhook then gates the pod (`kueue.x-k8s.io/admission`), makes a Workload for
it, and removes the gate once a ClusterQueue has quota for the pod's requests; only then
does the scheduler place it. The gate says whether the run still waits; the Workload's
QuotaReserved condition says why, in Kueue's own words. docs/multitenancy.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentworkers.api import reasons
from agentworkers.api.names import KUEUE_ADMISSION_GATE, KUEUE_QUEUE_LABEL
from agentworkers.core.objects import meta, pod_status

# The Workload condition that is False, with Kueue's reason, while no quota is reserved.
QUOTA_RESERVED = "QuotaReserved"
# Kueue's reason for a Workload no quota is reserved for; what it is called when Kueue has
# not said more yet.
KUEUE_PENDING = "Pending"


@dataclass(frozen=True)
class Standing:
    """Where a queued run stands: waiting (Queued=True) or not, with a reason and a message."""

    queue: str
    waiting: bool
    reason: str
    message: str


def queue_of(pod: dict[str, Any]) -> str | None:
    """The LocalQueue the pod was put in, if any."""
    queue = meta(pod).labels.get(KUEUE_QUEUE_LABEL)
    return str(queue) if queue else None


def gated(pod: dict[str, Any]) -> bool:
    """Whether Kueue still holds the pod back (it has not admitted it)."""
    return KUEUE_ADMISSION_GATE in pod_status(pod).gates


def _condition(workload: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def standing(
    pod: dict[str, Any], workload: dict[str, Any] | None, was_waiting: bool
) -> Standing | None:
    """Where the run of `pod` stands in its queue; None for a pod in no queue.
    `workload`: Kueue's for the pod, as last seen (None: not seen, or no Kueue);
    `was_waiting`: the run's Queued condition is True (it was seen gated)."""
    queue = queue_of(pod)
    if queue is None:
        return None
    where = f"LocalQueue {queue}"
    if gated(pod):
        reserved = _condition(workload, QUOTA_RESERVED)
        if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
            why = f"{reserved.get('reason') or KUEUE_PENDING}: {reserved['message']}"
            return Standing(queue, True, reserved.get("reason") or KUEUE_PENDING, _in(where, why))
        why = "Kueue has not admitted the pod yet"
        return Standing(queue, True, reasons.WAITING_FOR_ADMISSION, _in(where, why))
    if workload is None and not was_waiting:
        # Kueue's webhook gates every pod it manages as it is created: this one it never did.
        return Standing(
            queue,
            False,
            reasons.NOT_QUEUED,
            f"the pod names {where}, but Kueue did not gate it: Kueue is not installed, or its "
            "pod integration does not manage this namespace (managedJobsNamespaceSelector)",
        )
    cluster_queue = ((workload or {}).get("status") or {}).get("admission", {}).get("clusterQueue")
    into = f" into ClusterQueue {cluster_queue}" if cluster_queue else ""
    return Standing(queue, False, reasons.ADMITTED, f"Kueue admitted the pod from {where}{into}")


def _in(where: str, why: str) -> str:
    return f"waiting in {where}: {why}"
