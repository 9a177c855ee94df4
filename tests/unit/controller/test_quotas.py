"""TokenQuotas in the controller: a burst of reviews admits exactly what fits, and the
usage the accountant writes on the quota's status outlives collected Workers and a
restarted operator (a new process: nothing in memory but what the status says)."""

from __future__ import annotations

import threading
from typing import Any

import kopf
from prometheus_client import REGISTRY

from agentworkers.controller.admission import admission
from agentworkers.controller.passes import quotas
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import planner, reconcile, worker


def team(tokens: int, budget: int = 100) -> Memory:
    memory = Memory()
    planner(memory, limits={"maxSteps": 50, "tokenBudget": budget})
    memory.put("tokenquotas", {"metadata": {"name": "team-a"}, "spec": {"tokens": tokens}})
    return memory


def review(memory: Memory, name: str, pending: quotas.Pending) -> str | None:
    body = worker(name)
    body["metadata"]["namespace"] = "ns"
    try:
        admission.validate_worker(
            memory, body, None, [], "alice", "operator", quota_pending=pending
        )
    except kopf.AdmissionError as e:
        return str(e)
    return None


def used(memory: Memory, name: str, tokens: int, phase: str = "Running") -> None:
    memory.put(
        "workers",
        {**worker(name), "status": {"phase": phase, "tokensUsed": {"prompt": tokens}}},
    )


def test_a_burst_of_sixteen_admits_exactly_what_fits() -> None:
    memory = team(1000)
    used(memory, "spent", 350, phase="Done")  # 650 left: six runs of 100
    pending = quotas.Pending()
    answers: list[str | None] = []
    gate = threading.Barrier(16)

    def spawn(i: int) -> None:
        gate.wait()
        answers.append(review(memory, f"w{i}", pending))

    threads = [threading.Thread(target=spawn, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # None of the sixteen is in the store yet: the pending budgets are what count.
    assert answers.count(None) == 6
    refusals = [a for a in answers if a]
    assert all(
        a.startswith("TokenQuotaExceeded: spec.agent: TokenQuota 'team-a'") for a in refusals
    )
    assert "has 50 of its 1000 tokens per day left (350 used, 600 held by live runs)" in refusals[0]


def test_usage_outlives_collected_workers_and_a_restarted_operator() -> None:
    memory = team(1000)
    used(memory, "w1", 300)
    used(memory, "w2", 200, phase="Done")
    quotas.account_all(memory, [("ns", "team-a")], lambda ns: True)
    status = memory.find("tokenquotas", "team-a")["status"]  # type: ignore[index]
    assert (status["used"], status["reserved"], status["remaining"]) == (500, 0, 500)
    assert status["counted"] == {"uid-w1": 300, "uid-w2": 200}
    assert status["resetsAt"].endswith("T00:00:00Z")
    sample = REGISTRY.get_sample_value(
        "agentworkers_token_quota_tokens",
        {"quota_namespace": "ns", "quota": "team-a", "kind": "used"},
    )
    assert sample == 500

    # Both collected; w1 had reported 50 more first. A new operator: a fresh Pending.
    used(memory, "w1", 350)
    quotas.account_all(memory, [("ns", "team-a")], lambda ns: True)
    memory.objects.pop(("workers", "ns", "w1"))
    memory.objects.pop(("workers", "ns", "w2"))
    quotas.account_all(memory, [("ns", "team-a")], lambda ns: True)
    status = memory.find("tokenquotas", "team-a")["status"]  # type: ignore[index]
    assert (status["used"], status["counted"]) == (550, {})
    fresh = quotas.Pending()
    for i in range(4):
        assert review(memory, f"n{i}", fresh) is None
    assert review(memory, "n4", fresh) is not None  # 450 left: four runs of 100, not five


def test_a_replica_accounts_only_the_namespaces_it_serves() -> None:
    memory = team(1000)
    used(memory, "w1", 10)
    quotas.account_all(memory, [("ns", "team-a")], lambda ns: False)
    assert "status" not in memory.find("tokenquotas", "team-a")  # type: ignore[operator]


def test_without_a_quota_nothing_is_checked_or_held() -> None:
    memory = Memory()
    planner(memory, limits={"maxSteps": 50})  # no budget, and no quota: admitted
    pending = quotas.Pending()
    assert review(memory, "w1", pending) is None


def test_runs_that_slipped_past_admission_fail_before_their_pod() -> None:
    memory = team(250)  # room for two runs of 100
    for name in ("s1", "s2", "s3"):
        memory.put("workers", worker(name))  # created with admission off
    for name in ("s1", "s2", "s3"):
        reconcile(memory, name)
    pods = [n for n in ("s1", "s2", "s3") if memory.find("pods", n)]
    assert pods == ["s1", "s2"]
    failed = memory.find("workers", "s3")
    assert failed is not None and failed["status"]["phase"] == "Failed"
    assert memory.reasons("s3") == ["TokenQuotaExceeded"]
    assert "TokenQuota 'team-a' has 50 of its 250 tokens per day left" in failed["status"]["error"]


class ArrivesMidReview(Memory):
    """The store gets an admitted spawn's Worker just after a review read the namespace."""

    arriving: str | None = None

    def in_namespace(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        found = super().in_namespace(plural, namespace)
        if plural == "workers" and self.arriving:
            self.put("workers", worker(self.arriving))
            self.arriving = None
        return found


def test_a_spawn_the_store_gets_while_a_review_counts_is_counted_once() -> None:
    memory = ArrivesMidReview()
    planner(memory, limits={"maxSteps": 50, "tokenBudget": 100})
    memory.put("tokenquotas", {"metadata": {"name": "team-a"}, "spec": {"tokens": 250}})
    pending = quotas.Pending()
    assert review(memory, "w1", pending) is None
    assert review(memory, "w2", pending) is None
    memory.arriving = "w2"  # in neither the walk nor (once it arrives) among the pending?
    refused = review(memory, "w3", pending)
    assert refused is not None and "(0 used, 200 held by live runs)" in refused
