"""Spawn tree limits (AgentConfig spec.tree): refused at admission with the limit, the count
and the root; exact under a burst of reviews answered before the store sees their Workers;
and exact at the start of runs that slipped past admission (or were created without it)."""

from __future__ import annotations

import threading
from typing import Any

import kopf
import pytest

from agentworkers.api.agentconfig import TreeLimits
from agentworkers.controller import admission, lineage
from agentworkers.core.tree import Shape, check_tree
from agentworkers.errors import TreeLimitError
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import planner, reconcile, started, worker


@pytest.mark.parametrize(
    ("shape", "reason", "words"),
    [
        (Shape("root", "p", 3, 0, 0), "TreeTooDeep", "depth 3 is deeper than maxDepth 2"),
        (Shape("root", "p", 1, 4, 4), "TooManyChildren", "'p' has 4 children, maxChildren 4"),
        (Shape("root", "p", 1, 0, 6), "TreeFull", "6 live runs below its root"),
    ],
)
def test_each_limit_refuses_with_its_reason_count_and_root(
    shape: Shape, reason: str, words: str
) -> None:
    limits = TreeLimits(max_depth=2, max_children=4, max_live_descendants=6)
    with pytest.raises(TreeLimitError) as refused:
        check_tree(limits, "planner", shape)
    assert refused.value.reason == reason and refused.value.field == "spec.parent"
    assert words in str(refused.value) and "tree of 'root'" in str(refused.value)
    assert "AgentConfig planner's spec.tree" in str(refused.value)


def test_within_every_limit_a_spawn_fits_and_the_defaults_hold_when_unset() -> None:
    check_tree(TreeLimits(max_depth=2, max_children=4), "planner", Shape("r", "p", 2, 3, 99))
    with pytest.raises(TreeLimitError, match="maxLiveDescendants 100"):
        check_tree(None, "planner", Shape("r", "p", 1, 0, 100))


def tree(**limits: int) -> Memory:
    memory = Memory()
    planner(memory, tree=limits)
    started(memory, "root")
    return memory


def review(memory: Memory, name: str, parent: str, admitted: lineage.Admitted) -> str | None:
    body = worker(name, parent=parent)
    body["metadata"]["namespace"] = "ns"
    try:
        admission.validate_worker(memory, body, None, [], "alice", "operator", admitted)
    except kopf.AdmissionError as e:
        return str(e)
    return None


def test_a_burst_of_reviews_never_admits_past_max_children() -> None:
    memory = tree(maxChildren=3)
    admitted = lineage.Admitted()
    answers: list[str | None] = []
    gate = threading.Barrier(12)

    def spawn(i: int) -> None:
        gate.wait()
        answers.append(review(memory, f"kid-{i}", "root", admitted))

    threads = [threading.Thread(target=spawn, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # None of the twelve is in the store yet (the API server has not answered).
    assert answers.count(None) == 3
    refusals = [a for a in answers if a]
    assert all(a.startswith("TooManyChildren") for a in refusals), refusals
    assert "'root' has 3 children, maxChildren 3" in refusals[0]


def test_live_descendants_count_the_whole_tree_and_ended_runs_free_their_place() -> None:
    memory = tree(maxLiveDescendants=2)
    admitted = lineage.Admitted()
    for name, parent in (("a", "root"), ("b", "a")):
        assert review(memory, name, parent, admitted) is None
        memory.put("workers", worker(name, parent=parent))
    refusal = review(memory, "c", "b", admitted)
    assert refusal and refusal.startswith("TreeFull") and "2 live runs" in refusal
    memory.objects[("workers", "ns", "b")]["status"] = {"phase": "Done"}
    assert review(memory, "c", "a", admitted) is None


def test_depth_counts_from_the_root_at_zero() -> None:
    memory = tree(maxDepth=1)
    memory.put("workers", worker("a", parent="root"))
    refusal = review(memory, "b", "a", lineage.Admitted())
    assert refusal and refusal.startswith("TreeTooDeep") and "depth 2" in refusal


def test_a_dry_run_is_checked_and_holds_no_place() -> None:
    memory = tree(maxChildren=1)
    admitted = lineage.Admitted()
    body: dict[str, Any] = worker("kid", parent="root")
    body["metadata"]["namespace"] = "ns"
    admission.validate_worker(memory, body, None, [], "alice", "op", admitted, dry_run=True)
    assert review(memory, "kid-2", "root", admitted) is None


def test_runs_that_slipped_past_admission_fail_before_their_pod_and_the_rest_start() -> None:
    memory = tree(maxChildren=2)
    for i in range(5):  # created with admission off, all at once
        memory.put("workers", worker(f"kid-{i}", parent="root"))
    for i in range(5):
        reconcile(memory, f"kid-{i}")
    with_pods = [i for i in range(5) if memory.find("pods", f"kid-{i}")]
    assert len(with_pods) == 2
    for i in set(range(5)) - set(with_pods):
        status = memory.find("workers", f"kid-{i}")["status"]  # type: ignore[index]
        assert status["phase"] == "Failed"
        assert memory.reasons(f"kid-{i}") == ["TooManyChildren"]
    # A child that failed for the tree holds no place: collecting a started one frees one.
    memory.objects.pop(("workers", "ns", f"kid-{with_pods[0]}"))
    memory.put("workers", worker("late", parent="root"))
    reconcile(memory, "late")
    assert memory.find("pods", "late") is not None
