"""What the operator makes is owned the one way: the garbage collector takes a run's pod,
its runtime's account and a child run with their owner, and a controller finds its own."""

from __future__ import annotations

from agentworkers.core.owners import owner_reference
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import bound_child, planner, started


def test_a_run_owns_its_pod_and_account_and_a_parent_its_children() -> None:
    memory = Memory()
    planner(memory)
    started(memory, "parent")
    bound_child(memory, "child", "translator")
    parent = memory.find("workers", "parent")
    assert parent is not None
    controller = owner_reference(parent)
    assert controller == {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "name": "parent",
        "uid": parent["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod = memory.find("pods", "parent")
    assert pod is not None and pod["metadata"]["ownerReferences"] == [controller]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        made = memory.objects[(kind, "ns", "worker-parent")]
        assert made["metadata"]["ownerReferences"] == [controller], kind
    child = memory.find("workers", "child")
    assert child is not None
    assert owner_reference(parent, controller=False) in child["metadata"]["ownerReferences"]
