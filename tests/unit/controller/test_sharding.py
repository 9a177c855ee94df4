"""Sharding: every namespace served by exactly one live replica; a lost replica's shards
taken over after the lease duration; given back when it returns (no cluster: an
in-memory lease store with resourceVersion semantics and a clock the test moves)."""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field

import pytest

from agentworkers.controller.infra.sharding import Shards, assignment, holder_identity, shard_of
from agentworkers.errors import ApiError
from agentworkers.kube.leases import Lease


@dataclass
class MemoryLeases:
    leases: dict[str, Lease] = field(default_factory=dict)
    writes: int = 0
    renewals: int = 0

    def read(self, name: str) -> Lease | None:
        return self.leases.get(name)

    def hold(self, name: str, holder: str, duration: int, seen: Lease | None) -> Lease | None:
        current = self.leases.get(name)
        if (current.version if current else None) != (seen.version if seen else None):
            return None  # 409: somebody wrote in between
        self.writes += 1
        self.renewals += 1
        lease = Lease(name, holder, f"t{self.renewals}", duration, str(self.writes))
        self.leases[name] = lease
        return lease

    def release(self, lease: Lease) -> bool:
        current = self.leases.get(lease.name)
        if current is None or current.version != lease.version:
            return False
        self.writes += 1
        self.leases[lease.name] = Lease(lease.name, "", "", lease.duration, str(self.writes))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NAMESPACES = [f"team-{i}" for i in range(40)]


def replicas(count: int, store: MemoryLeases, clock: Clock) -> list[Shards]:
    return [
        Shards(count, i, store, on_gained=lambda _: None, clock=clock, identity=f"r{i}")
        for i in range(count)
    ]


def rounds(shards: list[Shards], clock: Clock, n: int, seconds: float = 5.0) -> None:
    for _ in range(n):
        for replica in shards:
            replica.step()
        clock.now += seconds


def owners(shards: list[Shards]) -> Counter[str]:
    """How many live replicas own each namespace."""
    return Counter({ns: sum(r.owns(ns) for r in shards) for ns in NAMESPACES})


def test_the_shard_of_a_namespace_is_stable_and_spread() -> None:
    assert shard_of("team-a", 3) == shard_of("team-a", 3)
    assert set(Counter(shard_of(ns, 3) for ns in NAMESPACES)) == {0, 1, 2}


@pytest.mark.parametrize(
    ("count", "live", "expected"),
    [
        (3, {0, 1, 2}, {0: 0, 1: 1, 2: 2}),
        (3, {0, 2}, {0: 0, 1: 2, 2: 2}),
        (3, {1}, {0: 1, 1: 1, 2: 1}),
        (3, {0}, {0: 0, 1: 0, 2: 0}),
        (2, set(), {}),
    ],
)
def test_a_shard_falls_to_itself_else_the_next_live_replica(
    count: int, live: set[int], expected: dict[int, int]
) -> None:
    assert assignment(count, live) == expected


def test_each_namespace_is_served_by_exactly_one_replica() -> None:
    store, clock = MemoryLeases(), Clock()
    shards = replicas(3, store, clock)
    rounds(shards, clock, 2)
    assert set(owners(shards).values()) == {1}
    assert [r.held() for r in shards] == [{0}, {1}, {2}]


def test_a_lost_replicas_shard_is_taken_over_then_given_back() -> None:
    store, clock = MemoryLeases(), Clock()
    first, second = replicas(2, store, clock)
    rounds([first, second], clock, 2)
    gained: list[set[int]] = []
    second.on_gained = gained.append

    # The first replica dies: its shard is unserved until its leases expire, never doubly.
    elapsed = 0.0
    while 0 not in second.held():
        rounds([second], clock, 1)
        elapsed += 5
        assert elapsed <= 30, "not taken over within 30 s"
    assert elapsed <= first.duration + 2 * first.period
    assert gained == [{0}]
    assert set(owners([second]).values()) == {1}

    # It comes back (a new process, a new identity): the shard is handed back to it.
    back = Shards(2, 0, store, on_gained=lambda _: None, clock=clock, identity="r0-again")
    rounds([back, second], clock, 6)
    assert back.held() == {0} and second.held() == {1}
    assert set(owners([back, second]).values()) == {1}


class Unreachable:
    """The lease store of a replica cut off from the API server: every call fails."""

    def read(self, name: str) -> Lease | None:
        raise ApiError("cannot reach the API server: timed out")

    hold = release = read  # type: ignore[assignment]


def test_a_replica_that_cannot_renew_stops_serving_before_another_may_start() -> None:
    store, clock = MemoryLeases(), Clock()
    first, second = replicas(2, store, clock)
    rounds([first, second], clock, 2)
    first.leases = Unreachable()
    served_twice, unserved = [], 0
    for _ in range(40):
        with contextlib.suppress(ApiError):
            first.step()
        second.step()
        served_twice += [ns for ns in NAMESPACES if first.owns(ns) and second.owns(ns)]
        unserved += not all(first.owns(ns) or second.owns(ns) for ns in NAMESPACES)
        clock.now += 1
    assert not served_twice
    assert first.held() == set() and second.held() == {0, 1}
    # The gap: from the cut-off replica's last renewal to the other's claim.
    assert unserved <= first.duration + first.margin + 1


# --- active/standby: one shard, several replicas of index 0 --------------------------------


def standby_set(n: int, store: MemoryLeases, clock: Clock) -> list[Shards]:
    """`n` replicas of a Deployment (--leader-elect): all index 0 of 1, told apart only
    by their identity."""
    return [
        Shards(1, 0, store, on_gained=lambda _: None, clock=clock, identity=f"pod-{i}")
        for i in range(n)
    ]


def test_one_shard_one_active_replica_and_no_member_leases() -> None:
    store, clock = MemoryLeases(), Clock()
    replicas_ = standby_set(3, store, clock)
    rounds(replicas_, clock, 4)
    assert [r.held() for r in replicas_] == [{0}, set(), set()]
    assert set(owners(replicas_).values()) == {1}
    # One lease, renewed by its holder alone: the standbys only read it.
    assert set(store.leases) == {"agentworkers-shard-0"}
    assert store.leases["agentworkers-shard-0"].holder == "pod-0"
    assert store.writes == 4


def test_a_standby_takes_over_a_lost_leader_never_both_at_once() -> None:
    store, clock = MemoryLeases(), Clock()
    leader, *standbys = standby_set(3, store, clock)
    rounds([leader, *standbys], clock, 2)
    gained: list[tuple[str, set[int]]] = []
    for s in standbys:
        s.on_gained = lambda k, s=s: gained.append((s.identity, k))  # type: ignore[misc]

    # The leader dies (SIGKILL): its lease is unrenewed; a standby claims it once it has
    # seen it so for `duration`, within duration + period of the last renewal.
    elapsed = 0.0
    while not any(s.held() for s in standbys):
        assert not any(s.owns("team-0") for s in standbys)
        rounds(standbys, clock, 1, seconds=1)
        elapsed += 1
        assert elapsed <= 30, "no standby took over within 30 s"
    assert elapsed <= leader.duration + leader.period
    assert len(gained) == 1 and gained[0][1] == {0}  # one standby, the whole store's pass
    assert set(owners(standbys).values()) == {1}


def test_a_leader_cut_off_stops_before_a_standby_starts() -> None:
    store, clock = MemoryLeases(), Clock()
    leader, standby = standby_set(2, store, clock)
    rounds([leader, standby], clock, 2)
    leader.leases = Unreachable()
    served_twice = 0
    for _ in range(40):
        with contextlib.suppress(ApiError):
            leader.step()
        standby.step()
        served_twice += leader.owns("team-0") and standby.owns("team-0")
        clock.now += 1
    assert not served_twice
    assert leader.held() == set() and standby.held() == {0}


def test_a_clean_exit_hands_the_lease_over_at_the_next_round() -> None:
    store, clock = MemoryLeases(), Clock()
    leader, standby = standby_set(2, store, clock)
    rounds([leader, standby], clock, 2)
    leader.resign()
    assert leader.held() == set() and not leader.owns("team-0")
    assert store.leases["agentworkers-shard-0"].holder == ""
    standby.step()
    assert standby.held() == {0}
    leader.step()  # a round after its exit (a thread still going) claims nothing
    assert leader.held() == set()
    assert store.leases["agentworkers-shard-0"].holder == standby.identity


def test_a_resigned_shard_replica_gives_its_member_lease_up_too() -> None:
    store, clock = MemoryLeases(), Clock()
    first, second = replicas(2, store, clock)
    rounds([first, second], clock, 2)
    first.resign()
    assert store.leases["agentworkers-member-0"].holder == ""
    rounds([second], clock, 1, seconds=0)
    assert second.held() == {0, 1}  # at once: nothing to wait out


def test_two_installs_in_one_namespace_keep_apart_by_prefix() -> None:
    store, clock = MemoryLeases(), Clock()
    a = Shards(1, 0, store, on_gained=lambda _: None, clock=clock, prefix="rel-a")
    b = Shards(1, 0, store, on_gained=lambda _: None, clock=clock, prefix="rel-b")
    rounds([a, b], clock, 1)
    assert a.held() == b.held() == {0}
    assert set(store.leases) == {"rel-a-shard-0", "rel-b-shard-0"}


def test_outside_a_pod_the_holder_is_unique_to_its_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two local processes on one machine (one hostname) are two holders."""
    monkeypatch.setenv("HOSTNAME", "laptop")
    monkeypatch.delenv("AGENTWORKERS_POD_UID", raising=False)
    first, second = holder_identity(), holder_identity()
    assert first.startswith("laptop_") and first != second


def test_a_container_restarted_in_its_pod_holds_its_lease_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The holder is the pod (its name and uid): a kubelet starts the new container only
    once the old one has exited, so it need not wait the lease out as a standby does."""
    monkeypatch.setenv("HOSTNAME", "agentworkers-7c9d8-x2b4q")
    monkeypatch.setenv("AGENTWORKERS_POD_UID", "0b5c6a1e-uid")
    store, clock = MemoryLeases(), Clock()
    crashed = Shards(1, 0, store, on_gained=lambda _: None, clock=clock)
    standby = Shards(1, 0, store, on_gained=lambda _: None, clock=clock, identity="other")
    rounds([crashed, standby], clock, 2)
    assert crashed.identity == "agentworkers-7c9d8-x2b4q_0b5c6a1e-uid"
    restarted = Shards(1, 0, store, on_gained=lambda _: None, clock=clock)
    restarted.step()
    standby.step()
    assert restarted.held() == {0} and standby.held() == set()
