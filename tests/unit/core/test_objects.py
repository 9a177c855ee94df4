"""The typed views of a body: every field read the one way, a missing optional one included,
and nothing written back through them."""

from __future__ import annotations

from typing import Any

import pytest

from agentworkers.core.objects import Meta, PodStatus, Terminated, meta, phase, pod_status
from agentworkers.core.owners import (
    OwnerReference,
    owned_by,
    owner_names,
    owner_reference,
    references,
)
from agentworkers.kube.store import TRIM

OWNER = {
    "apiVersion": "agentworkers.io/v1alpha1",
    "kind": "Worker",
    "name": "lead",
    "uid": "u-lead",
    "controller": True,
    "blockOwnerDeletion": True,
}


def full() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "lead",
            "namespace": "ns",
            "uid": "u-pod",
            "resourceVersion": "42",
            "generation": 3,
            "labels": {"agentworkers.io/worker": "lead"},
            "annotations": {"agentworkers.io/binding": "{}"},
            "ownerReferences": [OWNER],
            "creationTimestamp": "2026-12-02T10:00:00Z",
            "deletionTimestamp": "2026-12-02T11:00:00Z",
        },
        "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low on memory",
            "containerStatuses": [
                {"name": "agent", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
    }


def test_every_field_of_the_metadata_is_read() -> None:
    seen = meta(full())
    assert seen == Meta(
        name="lead",
        namespace="ns",
        uid="u-pod",
        resource_version="42",
        generation=3,
        labels={"agentworkers.io/worker": "lead"},
        annotations={"agentworkers.io/binding": "{}"},
        creation_timestamp="2026-12-02T10:00:00Z",
        deletion_timestamp="2026-12-02T11:00:00Z",
    )
    assert seen.deleting


def test_owner_references_are_read_in_one_place() -> None:
    body = full()
    lead = OwnerReference("agentworkers.io/v1alpha1", "Worker", "lead", "u-lead", True, True)
    assert references(body) == (lead,)
    assert owned_by(body, "u-lead") and not owned_by(body, "u-other")
    assert owner_names(body, "Worker") == ["lead"] and owner_names(body, "Pod") == []


@pytest.mark.parametrize(
    "body",
    [{}, {"metadata": None}, {"metadata": {}}, {"metadata": {"labels": None, "annotations": None,
     "ownerReferences": None, "generation": None, "deletionTimestamp": None}}],
    ids=["no metadata", "null metadata", "empty metadata", "null fields"],
)  # fmt: skip
def test_missing_optional_fields_read_as_empty(body: dict[str, Any]) -> None:
    seen = meta(body)
    assert seen == Meta()
    assert (seen.name, seen.uid, seen.resource_version) == ("", "", "")
    assert seen.generation is None and seen.creation_timestamp is None
    assert dict(seen.labels) == {} and dict(seen.annotations) == {}
    assert not seen.deleting
    assert references(body) == () and not owned_by(body, "") and owner_names(body, "Pod") == []
    assert phase(body) is None and pod_status(body) == PodStatus()


def test_a_view_cannot_change_its_body() -> None:
    body = full()
    seen = meta(body)
    with pytest.raises(AttributeError):
        seen.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        seen.labels["x"] = "y"  # type: ignore[index]
    assert body["metadata"]["labels"] == {"agentworkers.io/worker": "lead"}


def test_an_owner_reference_is_written_back_as_it_was_read() -> None:
    assert OwnerReference.of(OWNER).wire() == OWNER
    bare = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}
    assert OwnerReference.of(bare).wire() == bare
    assert owner_reference({**full(), "kind": "Worker"}, controller=False) == {
        "apiVersion": "v1",
        "kind": "Worker",
        "name": "lead",
        "uid": "u-pod",
        "controller": False,
        "blockOwnerDeletion": True,
    }


def test_a_pods_status_as_the_store_keeps_it() -> None:
    ended = PodStatus(
        phase="Failed",
        reason="Evicted",
        message="low on memory",
        gates=("kueue.x-k8s.io/admission",),
        terminated=Terminated("agent", 137, "OOMKilled"),
    )
    assert pod_status(full()) == ended
    # The store's trimmed copy reads the same: the view reads what TRIM keeps.
    assert pod_status(TRIM["pods"](full())) == ended
    assert meta(TRIM["pods"](full())) == meta(full())
    assert phase(full()) == "Failed"


def test_the_first_running_and_the_first_ended_container() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}},
                {"name": "b", "state": {"running": {"startedAt": "2026-12-02T10:00:05Z"}}},
                {"name": "c", "state": {"running": {}}},
                {"name": "d", "state": {"terminated": {"exitCode": 0}}},
            ],
        }
    }
    seen = pod_status(pod)
    assert seen.running_since == "2026-12-02T10:00:05Z"
    assert seen.terminated == Terminated("d", 0, None)
    assert seen.gates == () and seen.reason is None
