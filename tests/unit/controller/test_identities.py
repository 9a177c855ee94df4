"""Pooled identities against the in-memory repository: a pass fills the pool; a cold run
takes a free account with no write of an account on its way to its pod, its Role bound to
it; an account a run holds, or whose pod or RoleBinding is left, is never given again,
and one whose run is gone only after its quarantine; a process that starts again
quarantines what it cannot vouch for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import kopf
import pytest

from agentworkers.api import AgentConfigSpec
from agentworkers.api.names import IDENTITY_LABEL, IDENTITY_POOL_LABEL
from agentworkers.controller.passes import configs, identities, pools, workers
from agentworkers.core.identities import QUARANTINE_SECONDS, RESERVED_SECONDS
from agentworkers.core.pools import REFILL_QUIET
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import CONFIG, PROFILES, worker


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """A clock of the test's own, and no pool this process remembers."""
    clock = Clock()
    monkeypatch.setattr(identities.time, "monotonic", clock)
    monkeypatch.setattr(identities, "_pools", {})
    monkeypatch.setattr(identities, "_reserved", {})
    monkeypatch.setattr(identities, "_last_take", {})
    monkeypatch.setattr(identities, "_short_since", {})
    yield clock


@pytest.fixture
def memory() -> Memory:
    memory = Memory()
    memory.put(
        "agentconfigs", {**CONFIG, "spec": {**CONFIG["spec"], "worker": {"identityPool": 2}}}
    )
    for profile in PROFILES:
        memory.put("virtualagentprofiles", profile)
    configs.reconcile(memory, "ns", "planner")
    return memory


def pool_pass(memory: Memory) -> None:
    with contextlib.suppress(kopf.TemporaryError):  # the next pass, PASS_SECONDS on
        pools.reconcile(memory, "ns", "planner")


def reconcile(memory: Memory, name: str) -> None:
    with contextlib.suppress(kopf.TemporaryError):
        workers.reconcile(memory, "ns", name)


def pooled(memory: Memory) -> set[str]:
    return {
        b["metadata"]["name"]
        for (kind, _, _), b in memory.objects.items()
        if kind == "ServiceAccount"
        and (b["metadata"].get("labels") or {}).get(IDENTITY_POOL_LABEL) == "planner"
    }


def test_a_cold_run_takes_a_pooled_account_and_makes_none(memory: Memory, clock: Clock) -> None:
    pool_pass(memory)
    made = pooled(memory)
    assert len(made) == 2
    memory.put("workers", worker("w"))
    writes = len(memory.writes)
    reconcile(memory, "w")
    pod = memory.find("pods", "w")
    account = pod["spec"]["serviceAccountName"]
    assert account in made and pod["metadata"]["labels"][IDENTITY_LABEL] == account
    binding = memory.find("RoleBinding", "worker-w")
    assert binding["subjects"][0]["name"] == account
    assert binding["metadata"]["labels"][IDENTITY_LABEL] == account
    # The pod, the Role, its binding: no ServiceAccount on the run's way.
    ours = [w for w in memory.writes[writes:] if not w[1].startswith("workers")]
    assert ours == [("POST", "pods", "w"), ("POST", "Role", "worker-w"),
                    ("POST", "RoleBinding", "worker-w")]  # fmt: skip
    assert memory.find("ServiceAccount", "worker-w") is None
    # The pool refills once takes pause; the account the run holds is not free.
    pool_pass(memory)
    assert len(pooled(memory)) == 2
    clock.now += REFILL_QUIET
    pool_pass(memory)
    assert len(pooled(memory)) == 3
    assert account not in identities._pools[("ns", "planner")].free


def test_an_empty_pool_means_an_account_of_the_run_s_own_at_once(memory: Memory) -> None:
    memory.put("workers", worker("before"))  # no pass over the pool yet
    reconcile(memory, "before")
    assert memory.find("pods", "before")["spec"]["serviceAccountName"] == "worker-before"
    pool_pass(memory)
    for name in ("a", "b", "c"):
        memory.put("workers", worker(name))
        reconcile(memory, name)
    accounts = [memory.find("pods", n)["spec"]["serviceAccountName"] for n in ("a", "b", "c")]
    assert len(set(accounts[:2]) & pooled(memory)) == 2 and accounts[2] == "worker-c"


def test_an_account_is_free_again_only_when_pod_and_binding_are_gone_and_rested(
    memory: Memory, clock: Clock
) -> None:
    pool_pass(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    account = memory.find("pods", "w")["spec"]["serviceAccountName"]
    free = lambda: identities._pools[("ns", "planner")].free  # noqa: E731
    pool_pass(memory)  # sees the pod: the account is its run's by the pod now
    # Its run's pod goes (the Worker collected), its RoleBinding a moment later.
    del memory.objects[("pods", "ns", "w")]
    clock.now += 1
    pool_pass(memory)
    assert account not in free()
    del memory.objects[("RoleBinding", "ns", "worker-w")]
    clock.now += 1
    pool_pass(memory)
    assert account not in free()  # quarantined
    clock.now += QUARANTINE_SECONDS
    pool_pass(memory)
    assert account in free()


def test_an_account_taken_by_a_run_whose_pod_never_came_is_held_then_rested(
    memory: Memory, clock: Clock
) -> None:
    pool_pass(memory)
    body = memory.put("workers", worker("w"))
    config = AgentConfigSpec.model_validate(memory.find("agentconfigs", "planner")["spec"])
    taken = identities.take(memory, body, config)
    assert taken is not None and identities.take(memory, body, config) == taken  # the same run
    clock.now += RESERVED_SECONDS - 1
    pool_pass(memory)
    assert taken not in identities._pools[("ns", "planner")].free
    clock.now += 2
    pool_pass(memory)  # no pod: confirmed in the API, then quarantined
    clock.now += QUARANTINE_SECONDS
    pool_pass(memory)
    assert taken in identities._pools[("ns", "planner")].free


def test_a_process_started_again_rests_every_account_before_it_gives_one(
    memory: Memory, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool_pass(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    account = memory.find("pods", "w")["spec"]["serviceAccountName"]
    for state in ("_pools", "_reserved", "_last_take", "_short_since"):
        monkeypatch.setattr(identities, state, {})
    pool_pass(memory)
    # The run's account is in use (its pod); the other was never used, but this process
    # cannot tell: it rests too, and the pool is refilled meanwhile.
    pool = identities._pools[("ns", "planner")]
    (other,) = pooled(memory) - {account} - set(pool.free)
    assert other in pool.free_since and len(pool.free) == 1 and len(pooled(memory)) == 3
    assert account not in pool.free
