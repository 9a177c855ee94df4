"""The warm pool against the in-memory repository: a pass fills, rolls and counts the
pool; a run's pass claims a ready warm pod (one write, the run's Role bound to the pod's
own account) or starts cold at once; a claim a crash kept from the run's status is found
again, never made twice."""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import Any

import kopf
import pytest

from agentworkers.api.names import CLAIM_ANNOTATION, CLAIMED_LABEL, POOL_LABEL, WORKER_LABEL
from agentworkers.controller.passes import configs, pools, workers
from agentworkers.controller.passes.requeue import Later
from agentworkers.core import pools as core_pools
from agentworkers.core.pools import Claim
from agentworkers.errors import ApiError
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import CONFIG, PROFILES, worker

POOL = {"warmPool": {"size": 2, "idleSeconds": 600}}


@pytest.fixture(autouse=True)
def no_recent_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's pool starts with no claim this process remembers (they wait a refill)."""
    monkeypatch.setattr(pools, "_last_claim", {})
    monkeypatch.setattr(pools, "_short_since", {})
    # Each pass writes the pool's counts (a burst's are spaced out: its own test).
    monkeypatch.setattr(pools, "_counts_written", {})
    monkeypatch.setattr(core_pools, "COUNTS_SECONDS", 0.0)


def refill_now() -> None:
    """Claims paused long enough ago: the next pass refills."""
    pools._last_claim.clear()


@pytest.fixture
def memory() -> Memory:
    memory = Memory()
    memory.put("agentconfigs", {**CONFIG, "spec": {**CONFIG["spec"], "worker": POOL}})
    for profile in PROFILES:
        memory.put("virtualagentprofiles", profile)
    configs.reconcile(memory, "ns", "planner")
    return memory


def pool_pass(memory: Memory) -> None:
    with contextlib.suppress(kopf.TemporaryError):  # the idle clock's next pass
        pools.reconcile(memory, "ns", "planner")


def warm_pods(memory: Memory, **labels: str) -> list[dict[str, Any]]:
    return [
        b
        for (plural, _, _), b in memory.objects.items()
        if plural == "pods"
        and all((b["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
    ]


def running(memory: Memory) -> None:
    for pod in warm_pods(memory):
        pod["status"] = {"phase": "Running"}


def reconcile(memory: Memory, name: str) -> None:
    workers.reconcile(memory, "ns", name)


def test_a_pass_fills_the_pool_each_pod_with_an_account_of_its_own(memory: Memory) -> None:
    pool_pass(memory)
    pods = warm_pods(memory, **{POOL_LABEL: "planner"})
    assert len(pods) == 2
    for pod in pods:
        name = pod["metadata"]["name"]
        account = memory.find("ServiceAccount", name)
        assert account is not None and pod["spec"]["serviceAccountName"] == name
        # The account goes with its pod; it has no Role of its own.
        assert account["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert not [k for k in memory.objects if k[0] in ("Role", "RoleBinding")]
    status = memory.find("agentconfigs", "planner")["status"]["warmPool"]
    assert status == {"ready": 0, "starting": 2, "claimed": 0}
    running(memory)
    pool_pass(memory)
    status = memory.find("agentconfigs", "planner")["status"]["warmPool"]
    assert status == {"ready": 2, "starting": 0, "claimed": 0}


def test_a_burst_writes_the_pool_s_counts_at_most_once_a_second(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every claim of a burst changed the counts and each pass wrote them: 0.7 writes of
    the AgentConfig's status a run (25 runs at 25/s), each an event to every watcher."""
    monkeypatch.setattr(core_pools, "COUNTS_SECONDS", 1.0)
    clock = [100.0]
    monkeypatch.setattr(pools.time, "monotonic", lambda: clock[0])

    def counts_written() -> list[str]:
        return [w[2] for w in memory.writes if w[:2] == ("PATCH", "agentconfigs/status")]

    pool_pass(memory)
    before = len(counts_written())
    running(memory)
    clock[0] += 0.25
    with pytest.raises(Later) as later:
        pools.reconcile(memory, "ns", "planner")
    assert later.value.delay == pytest.approx(0.75)
    assert len(counts_written()) == before  # changed, but written a moment ago
    status = memory.find("agentconfigs", "planner")["status"]["warmPool"]
    assert status == {"ready": 0, "starting": 2, "claimed": 0}
    clock[0] += 0.75
    pool_pass(memory)  # the pass it asked for
    assert len(counts_written()) == before + 1
    status = memory.find("agentconfigs", "planner")["status"]["warmPool"]
    assert status == {"ready": 2, "starting": 0, "claimed": 0}


def test_a_run_claims_a_warm_pod_and_its_role_binds_the_pod_s_account(memory: Memory) -> None:
    pool_pass(memory)
    running(memory)
    memory.put("workers", worker("w"))
    writes = len(memory.writes)
    reconcile(memory, "w")
    status = memory.find("workers", "w")["status"]
    claimed = memory.find("pods", status["pod"])
    assert claimed is not None and status["pod"] != "w"
    assert memory.find("pods", "w") is None  # no cold pod
    labels = claimed["metadata"]["labels"]
    assert labels[WORKER_LABEL] == "w" and labels[CLAIMED_LABEL] == "planner"
    assert POOL_LABEL not in labels
    assert [o["uid"] for o in claimed["metadata"]["ownerReferences"]] == ["uid-w"]
    claim = Claim.model_validate_json(claimed["metadata"]["annotations"][CLAIM_ANNOTATION])
    assert (claim.worker, claim.uid, claim.revision.name) == ("w", "uid-w", "planner-r1")
    binding = memory.find("RoleBinding", "worker-w")
    assert binding["subjects"][0]["name"] == status["pod"]
    # No ServiceAccount and no pod made on the run's path: the claim, the Role, its binding.
    made = [w for w in memory.writes[writes:] if not w[1].startswith("workers")]
    assert made == [("PATCH", "pods", status["pod"]), ("POST", "Role", "worker-w"),
                    ("POST", "RoleBinding", "worker-w")]  # fmt: skip
    # The pool refills once claims pause (REFILL_QUIET), not at once.
    pool_pass(memory)
    assert len(warm_pods(memory, **{POOL_LABEL: "planner"})) == 1
    refill_now()
    pool_pass(memory)
    assert len(warm_pods(memory, **{POOL_LABEL: "planner"})) == 2
    assert memory.find("agentconfigs", "planner")["status"]["warmPool"]["claimed"] == 1


def test_a_pool_of_two_serves_two_runs_warm_and_the_third_cold_at_once(memory: Memory) -> None:
    pool_pass(memory)
    running(memory)
    for name in ("a", "b", "c"):
        memory.put("workers", worker(name))
        reconcile(memory, name)
    pods = {n: memory.find("workers", n)["status"]["pod"] for n in ("a", "b", "c")}
    assert pods["c"] == "c" and memory.find("pods", "c") is not None
    assert len({pods["a"], pods["b"]}) == 2 and "a" not in pods.values()


@pytest.mark.parametrize(
    ("since", "warm"),
    [
        # Written since the store's copy, but nothing a claim depends on: still claimed.
        ({"metadata": {"finalizers": ["example.com/runner"]}}, True),
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
        # Claimed by another run, or being deleted: not claimable, so a cold start.
        (
            {"metadata": {"labels": {POOL_LABEL: None, CLAIMED_LABEL: "planner"}}},
            False,
        ),
        ({"metadata": {"deletionTimestamp": "2026-12-03T00:00:00Z"}}, False),
    ],
)
def test_a_claim_fails_only_on_what_it_depends_on(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, since: dict[str, Any], warm: bool
) -> None:
    pool_pass(memory)
    running(memory)
    # The store's copies, from before every warm pod was written again.
    seen = copy.deepcopy(warm_pods(memory, **{POOL_LABEL: "planner"}))
    monkeypatch.setattr(memory, "pods_labelled", lambda *_: copy.deepcopy(seen))
    for pod in seen:
        memory.patch_object("pods", "ns", pod["metadata"]["name"], since)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    pod = memory.find("workers", "w")["status"]["pod"]
    assert (pod != "w") == warm
    # The warm pods given to a run: at most the one w claimed.
    taken = warm_pods(memory, **{WORKER_LABEL: "w", CLAIMED_LABEL: "planner"})
    assert [p["metadata"]["name"] for p in taken] == ([pod] if warm else [])


def test_passes_claiming_at_once_do_not_try_the_same_pod(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst's passes run at once on one store: each tried the same oldest pods, and all
    but one lost every try and started cold (10 of 25 at 25/s in the bench)."""
    pool_pass(memory)
    running(memory)
    for name in ("a", "b"):
        memory.put("workers", worker(name))
    patch_json = memory.patch_json
    tried: list[tuple[str, str]] = []

    def claim(plural: str, namespace: str, name: str, ops: Any) -> dict[str, Any]:
        first = not tried
        try:
            if first:  # b's pass runs while a's claim is on its way
                tried.append((name, "a"))
                b = threading.Thread(target=reconcile, args=(memory, "b"))
                b.start()
                b.join(10)
                assert not b.is_alive()
            else:
                tried.append((name, "b"))
            return patch_json(plural, namespace, name, ops)
        except ApiError as e:
            tried.append((name, f"refused {e.status}"))
            raise

    monkeypatch.setattr(memory, "patch_json", claim)
    reconcile(memory, "a")
    pods = {n: memory.find("workers", n)["status"]["pod"] for n in ("a", "b")}
    assert "a" not in pods.values() and "b" not in pods.values()  # both warm
    assert len(set(pods.values())) == 2
    assert [who for _, who in tried] == ["a", "b"]  # one try each, none refused


def test_a_pass_does_not_try_a_pod_claimed_since_it_read_the_pool(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass reads the pool, then another pass's claim lands before it tries: it tried
    that pod, was refused, and with three tries so spent a run started cold (1 of 25 at
    25/s in the bench, with as many warm pods as runs)."""
    pool_pass(memory)
    running(memory)
    for name in ("a", "b"):
        memory.put("workers", worker(name))
    pods_labelled, patch_json = memory.pods_labelled, memory.patch_json
    tried: list[str] = []

    def read_pool(namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        found = pods_labelled(namespace, label, value)
        if label == POOL_LABEL and not tried:  # b has the pool; a claims before b tries
            tried.append("b read")
            reconcile(memory, "a")
        return found

    def claim(plural: str, namespace: str, name: str, ops: Any) -> dict[str, Any]:
        try:
            found = patch_json(plural, namespace, name, ops)
        except ApiError as e:
            tried.append(f"refused {e.status}")
            raise
        tried.append("claimed")
        return found

    monkeypatch.setattr(memory, "pods_labelled", read_pool)
    monkeypatch.setattr(memory, "patch_json", claim)
    reconcile(memory, "b")
    pods = {n: memory.find("workers", n)["status"]["pod"] for n in ("a", "b")}
    assert len(set(pods.values())) == 2 and not {"a", "b"} & set(pods.values())  # both warm
    assert tried == ["b read", "claimed", "claimed"]  # none refused


def test_a_pod_not_running_yet_is_not_claimed(memory: Memory) -> None:
    pool_pass(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    assert memory.find("workers", "w")["status"]["pod"] == "w"


def test_a_claim_lost_before_the_run_recorded_it_is_found_again(memory: Memory) -> None:
    pool_pass(memory)
    running(memory)
    memory.put("workers", worker("w"))
    body = memory.find("workers", "w")
    # A pass claimed a pod and died before anything else: its status names no pod.
    pod = warm_pods(memory)[0]
    memory.patch_object(
        "pods",
        "ns",
        pod["metadata"]["name"],
        {"metadata": {"labels": {POOL_LABEL: None, CLAIMED_LABEL: "planner",
                                 WORKER_LABEL: "w"},
                      "ownerReferences": [{"uid": body["metadata"]["uid"], "name": "w"}]}},
    )  # fmt: skip
    reconcile(memory, "w")
    assert memory.find("workers", "w")["status"]["pod"] == pod["metadata"]["name"]
    assert memory.find("pods", "w") is None
    assert len(warm_pods(memory, **{WORKER_LABEL: "w"})) == 1
    # Its Role is made by the pass that records the pod, bound to the pod's account.
    assert memory.find("RoleBinding", "worker-w")["subjects"][0]["name"] == pod["metadata"]["name"]


def test_a_new_revision_replaces_the_warm_pods(memory: Memory) -> None:
    pool_pass(memory)
    before = {p["metadata"]["name"] for p in warm_pods(memory)}
    config = memory.objects[("agentconfigs", "ns", "planner")]
    config["spec"]["instructions"] = "be brief"
    configs.reconcile(memory, "ns", "planner")
    pool_pass(memory)
    after = warm_pods(memory, **{POOL_LABEL: "planner"})
    assert len(after) == 2 and not before & {p["metadata"]["name"] for p in after}
    assert {p["metadata"]["labels"]["agentworkers.io/revision"] for p in after} == {"planner-r2"}


def test_a_run_whose_pod_mounts_other_volumes_starts_cold(memory: Memory) -> None:
    pool_pass(memory)
    running(memory)
    memory.put("workers", worker("w", skills=["research"]))
    reconcile(memory, "w")
    assert memory.find("workers", "w")["status"]["pod"] == "w"


def test_no_pool_no_claim_and_no_status(memory: Memory) -> None:
    config = memory.objects[("agentconfigs", "ns", "planner")]
    config["spec"]["worker"] = {}
    configs.reconcile(memory, "ns", "planner")
    pool_pass(memory)
    assert warm_pods(memory) == []
    assert "warmPool" not in (memory.find("agentconfigs", "planner").get("status") or {})


def test_admission_knows_the_run_behind_a_warm_pod_s_account(memory: Memory) -> None:
    pool_pass(memory)
    running(memory)
    account = warm_pods(memory)[0]["metadata"]["name"]
    user = f"system:serviceaccount:ns:{account}"
    # Unclaimed: the account is no run's, so no spawn of it names a parent it may use.
    assert pools.spawner(memory, user, "ns") == ""
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    claimed = memory.find("workers", "w")["status"]["pod"]
    assert pools.spawner(memory, f"system:serviceaccount:ns:{claimed}", "ns") == "w"
    # Another namespace's account of that name, or an account that is no warm pod's: not ours.
    assert pools.spawner(memory, f"system:serviceaccount:other:{claimed}", "ns") is None
    assert pools.spawner(memory, "system:serviceaccount:ns:worker-w", "ns") is None
    # A pod of a warm pod's name that is not a warm pod (a Worker named so): no run.
    memory.put("workers", worker("warm-x"))
    reconcile(memory, "warm-x")
    assert pools.spawner(memory, "system:serviceaccount:ns:warm-x", "ns") == ""
