"""Spawn tree limits (AgentConfig spec.tree): refused at admission with the limit, the count
and the root; exact under a burst of reviews answered before the store sees their Workers;
and exact at the start of runs that slipped past admission (or were created without it)."""

from __future__ import annotations

import threading
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from agentworkers.api.agentconfig import TreeLimits
from agentworkers.controller.admission import admission
from agentworkers.controller.infra import metrics
from agentworkers.controller.passes import lineage
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


class ArrivesMidReview(Memory):
    """The store gets an admitted spawn's watch event right after the review has read its
    parent's children for the `reads`-th time: once, right after the walk of the tree,
    it was in neither count (seen in CI: one spawn past maxLiveDescendants)."""

    arriving: dict[str, Any] | None = None
    reads = 1

    def children(self, namespace: str, parent: str) -> list[str]:
        found = super().children(namespace, parent)
        if self.arriving is not None and self.arriving["spec"]["parent"] == parent:
            self.reads -= 1
            if self.reads == 0:
                self.put("workers", self.arriving)
                self.arriving = None
        return found


@pytest.mark.parametrize("reads", [1, 2, 3])
def test_a_spawn_the_store_gets_while_a_review_counts_is_counted_once(reads: int) -> None:
    memory = ArrivesMidReview()
    memory.reads = reads
    planner(memory, tree={"maxLiveDescendants": 2})
    started(memory, "root")
    admitted = lineage.Admitted()
    assert review(memory, "a", "root", admitted) is None
    assert review(memory, "b", "root", admitted) is None
    memory.arriving = worker("a", parent="root")  # a's event lands mid-walk
    refusal = review(memory, "c", "root", admitted)
    assert refusal and refusal.startswith("TreeFull") and "2 live runs" in refusal


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


def _used(memory: Memory, name: str, prompt: int, completion: int) -> None:
    """What the run's runtime reports of its model calls."""
    status = memory.objects[("workers", "ns", name)].setdefault("status", {})
    status["tokensUsed"] = {"prompt": prompt, "completion": completion}


def test_a_spawn_is_refused_when_the_tree_has_less_left_than_the_child_s_budget() -> None:
    memory = tree(tokenBudget=250000)  # the example agent's runs have tokenBudget 200000
    _used(memory, "root", 40000, 10000)  # 200000 left: just enough
    assert review(memory, "kid", "root", lineage.Admitted()) is None
    _used(memory, "root", 40000, 10001)
    refusal = review(memory, "kid", "root", lineage.Admitted())
    assert refusal == (
        "TreeBudget: spec.parent: the tree of 'root' has 199999 of its tokenBudget 250000 "
        "tokens left, less than the child's own tokenBudget 200000 (AgentConfig planner's "
        "spec.tree)"
    )


def test_a_tree_past_its_budget_has_every_live_run_below_killed_and_its_root_told() -> None:
    memory = tree(tokenBudget=1000)
    for name, parent in (("a", "root"), ("b", "root"), ("a1", "a")):
        started(memory, name, parent=parent)
    memory.objects[("workers", "ns", "b")]["status"]["phase"] = "Done"
    _used(memory, "root", 300, 100)
    _used(memory, "a1", 100, 100)
    reconcile(memory, "root")
    summed = memory.find("workers", "root")["status"]["tree"]  # type: ignore[index]
    assert (summed["runs"], summed["live"], summed["tokensUsed"]) == (3, 2, 600)
    assert not summed["budgetExhausted"]

    _used(memory, "a", 250, 150)  # 1000 of 1000, a moment after the last sum: no waiting
    reconcile(memory, "root")
    summed = memory.find("workers", "root")["status"]["tree"]  # type: ignore[index]
    assert summed["budgetExhausted"] and summed["tokensUsed"] == 1000
    assert memory.reasons("root") == ["TreeBudgetExhausted"]
    assert memory.find("pods", "a") is not None  # each run below stops itself, in its pass
    for name in ("a", "a1", "b"):
        reconcile(memory, name)
    for name in ("a", "a1"):
        status = memory.find("workers", name)["status"]  # type: ignore[index]
        assert status["phase"] == "Killed", name
        assert status["error"] == "TreeBudgetExhausted: the tree used 1000 of its 1000 tokens"
        assert memory.reasons(name) == ["TreeBudgetExhausted"]  # one Event each
        assert memory.find("pods", name) is None
    assert memory.find("workers", "b")["status"]["phase"] == "Done"  # type: ignore[index]
    memory.objects[("workers", "ns", "root")]["status"]["tree"]["summedAt"] = "2026-01-01T00:00:00Z"
    reconcile(memory, "root")  # summed again (its last sum is old), and told once
    summed = memory.find("workers", "root")["status"]["tree"]  # type: ignore[index]
    assert summed["budgetExhausted"] and summed["live"] == 0
    assert memory.reasons("root") == ["TreeBudgetExhausted"]


def test_tokens_used_by_agent_and_profile_follow_each_run_s_last_report() -> None:
    def value(kind: str) -> float:
        labels = {"agent": "metered", "profile": "reviewer", "kind": kind}
        return REGISTRY.get_sample_value("agentworkers_tokens_used", labels) or 0.0

    metrics.TOKENS.observe("uid-1", "metered", "reviewer", 100, 10)
    metrics.TOKENS.observe("uid-2", "metered", "reviewer", 50, 5)
    metrics.TOKENS.observe("uid-1", "metered", "reviewer", 300, 30)  # a later report
    assert (value("prompt"), value("completion")) == (350, 35)
    metrics.TOKENS.forget("uid-1")  # collected
    metrics.TOKENS.forget("uid-2")
    assert (value("prompt"), value("completion")) == (0, 0)
