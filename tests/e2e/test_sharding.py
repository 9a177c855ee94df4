"""Controller replicas on Leases: sharded, and active/standby (one shard).

Sharded: its own namespaces (outside the session operator's pattern), two operator
processes with `--shards=2`, a burst of Workers across namespaces of both shards. Each
replica starts exactly the pods of its own shard (its `agentworkers_spawns_total`), every
Worker gets its pod once, and after one replica is SIGKILLed new Workers in its namespaces
get their pods within 30 s from the other.

Active/standby: two processes with `--leader-elect` (both index 0 of one shard, as a
Deployment's replicas): one reconciles, the other follows the same watches; after the
active one's SIGKILL the standby serves new Workers within the documented time, and when
the active one stops cleanly (SIGTERM) a standby takes over at its next round.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from agentworkers.controller.infra.sharding import shard_of
from tests.e2e.support import CONFIG, Cluster, Operator, wait_until, worker

PER_NAMESPACE = 6


def metric(operator: Operator, name: str) -> int:
    found = re.search(rf"^{name} (\S+)$", operator.metrics(), re.M)
    return int(float(found.group(1))) if found else 0


def spawns(operator: Operator) -> int:
    return metric(operator, "agentworkers_spawns_total")


def held(operator: Operator) -> int:
    return metric(operator, "agentworkers_shards_held")


@contextlib.contextmanager
def agents_in(cluster: Cluster, prefix: str, namespaces: list[str]) -> Iterator[None]:
    """`namespaces`, each with the agent CONFIG, and `prefix-leases` for the Leases; all
    deleted after."""
    core = kubernetes.client.CoreV1Api(cluster.api)
    made = [f"{prefix}-leases", *namespaces]
    for name in made:
        core.create_namespace({"metadata": {"name": name}})
    try:
        for name in namespaces:
            wait_until(
                f"{name}'s default service account",
                lambda n=name: core.list_namespaced_service_account(n).items,  # type: ignore[misc]
                timeout=30,
            )
            cluster.apply(name, copy.deepcopy(CONFIG))
        yield
    finally:
        for name in made:
            core.delete_namespace(name)


@pytest.fixture
def shard_namespaces(cluster: Cluster) -> Iterator[tuple[str, dict[int, list[str]]]]:
    """A prefix of our own and two namespaces in each of the two shards under it."""
    prefix = f"shard-{uuid.uuid4().hex[:6]}"
    by_shard: dict[int, list[str]] = {0: [], 1: []}
    for i in range(100):
        name = f"{prefix}-{i}"
        if len(by_shard[shard_of(name, 2)]) < 2:
            by_shard[shard_of(name, 2)].append(name)
    with agents_in(cluster, prefix, [*by_shard[0], *by_shard[1]]):
        yield prefix, by_shard


def replica(
    cluster: Cluster, workdir: Path, prefix: str, *lease: str
) -> contextlib.AbstractContextManager[Operator]:
    """An operator replica serving the namespaces `prefix-*`, its Leases in `prefix-leases`;
    `lease`: how it takes turns (`--shards=2 --shard-index=i`, or `--leader-elect` and a
    Lease of its own name, as the replicas of an active/standby Deployment)."""
    workdir.mkdir()
    return Operator.start(
        cluster,
        workdir,
        f"--namespace={prefix}-*",
        "--no-webhook",
        *lease,
        f"--lease-namespace={prefix}-leases",
        "--log-format=json",
    )


def shard(
    cluster: Cluster, workdir: Path, prefix: str, index: int
) -> contextlib.AbstractContextManager[Operator]:
    return replica(cluster, workdir, prefix, "--shards=2", f"--shard-index={index}")


def standby(
    cluster: Cluster, workdir: Path, prefix: str
) -> contextlib.AbstractContextManager[Operator]:
    return replica(cluster, workdir, prefix, "--leader-elect", f"--lease-name={prefix}")


def spawn(cluster: Cluster, namespace: str, names: list[str]) -> None:
    cluster.apply(namespace, *(worker(n, initialMessage="hello") for n in names))


def pods_of(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Worker -> the uid of its pod, for the Workers whose pod exists; fails on a Worker
    with two."""
    found = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "agentworkers.io/worker")
    workers = Counter(p["metadata"]["labels"]["agentworkers.io/worker"] for p in found["items"])
    assert set(workers.values()) <= {1}, f"Workers with more than one pod: {workers}"
    return {
        p["metadata"]["labels"]["agentworkers.io/worker"]: p["metadata"]["uid"]
        for p in found["items"]
    }


def test_two_replicas_split_the_work_and_take_over_a_lost_shard(
    cluster: Cluster, shard_namespaces: tuple[str, dict[int, list[str]]], tmp_path: Path
) -> None:
    prefix, by_shard = shard_namespaces
    with (
        shard(cluster, tmp_path / "r0", prefix, 0) as first,
        shard(cluster, tmp_path / "r1", prefix, 1) as second,
    ):
        # A replica alone serves every shard; once both run, each holds its own.
        wait_until(
            "each replica to hold one shard",
            lambda: (held(first), held(second)) == (1, 1),
            timeout=60,
        )
        names = [f"w{i}" for i in range(PER_NAMESPACE)]
        for namespace in by_shard[0] + by_shard[1]:
            spawn(cluster, namespace, names)
        for namespace in by_shard[0] + by_shard[1]:
            wait_until(
                f"every pod in {namespace}",
                lambda n=namespace: len(pods_of(cluster, n)) == PER_NAMESPACE,  # type: ignore[misc]
                timeout=120,
            )
        # Each replica started exactly its own shard's pods: none twice, none by the other.
        mine = 2 * PER_NAMESPACE
        assert (spawns(first), spawns(second)) == (mine, mine), (first.tail(), second.tail())
        before = {n: pods_of(cluster, n) for n in by_shard[0]}

        first.process.kill()  # SIGKILL: no goodbye, its leases simply stop being renewed
        lost = time.monotonic()
        late = [f"late{i}" for i in range(3)]
        for namespace in by_shard[0]:
            spawn(cluster, namespace, late)
        for namespace in by_shard[0]:
            wait_until(
                f"the late Workers' pods in {namespace}, from the other replica",
                lambda n=namespace: len(pods_of(cluster, n)) == PER_NAMESPACE + len(late),  # type: ignore[misc]
                timeout=45,
            )
        took = time.monotonic() - lost
        assert took <= 30, f"shard 0 was served again only after {took:.0f}s"
        assert spawns(second) == mine + len(late) * len(by_shard[0])
        # The takeover passed over the Workers it inherited without making them anew.
        for namespace, pods in before.items():
            now = pods_of(cluster, namespace)
            assert {n: now[n] for n in pods} == pods, namespace
        print(json.dumps({"takeover_seconds": round(took, 1)}))


# --- active/standby: two replicas of one shard -----------------------------------------------

# The documented bound (docs/scaling.md): the lease's duration (15 s), seen unrenewed on
# the standby's own clock, plus one renewal period (5 s).
FAILOVER_SECONDS = 20


@pytest.fixture
def standby_namespaces(cluster: Cluster) -> Iterator[tuple[str, list[str]]]:
    """A prefix of our own, its Leases' namespace and two namespaces of agents."""
    prefix = f"standby-{uuid.uuid4().hex[:6]}"
    teams = [f"{prefix}-a", f"{prefix}-b"]
    with agents_in(cluster, prefix, teams):
        yield prefix, teams


def test_two_replicas_take_turns_on_one_lease_and_a_standby_takes_over(
    cluster: Cluster, standby_namespaces: tuple[str, list[str]], tmp_path: Path
) -> None:
    prefix, teams = standby_namespaces
    names = [f"w{i}" for i in range(PER_NAMESPACE)]
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(standby(cluster, tmp_path / "r0", prefix))
        second = stack.enter_context(standby(cluster, tmp_path / "r1", prefix))
        wait_until(
            "one replica to hold the Lease, the other to stand by",
            lambda: held(first) + held(second) == 1,
            timeout=30,
        )
        leader, waiting = (first, second) if held(first) else (second, first)
        lease = cluster.kubectl_json("get", "lease", f"{prefix}-shard-0", "-n", f"{prefix}-leases")
        assert lease["spec"]["leaseDurationSeconds"] == 15
        # One shard has no member Leases: nothing else to hand over to.
        leases = cluster.kubectl_json("get", "leases", "-n", f"{prefix}-leases")
        assert [item["metadata"]["name"] for item in leases["items"]] == [f"{prefix}-shard-0"]

        for team in teams:
            spawn(cluster, team, names)
        for team in teams:
            wait_until(
                f"every pod in {team}",
                lambda n=team: len(pods_of(cluster, n)) == PER_NAMESPACE,  # type: ignore[misc]
                timeout=120,
            )
        # Only the holder reconciled; the standby's store followed the same watches.
        total = PER_NAMESPACE * len(teams)
        assert (spawns(leader), spawns(waiting)) == (total, 0), (leader.tail(), waiting.tail())
        wait_until(
            "the standby's store to hold every Worker",
            lambda: waiting.sample("agentworkers_store_objects", kind="workers") == total,
            timeout=30,
        )
        before = {team: pods_of(cluster, team) for team in teams}

        leader.process.kill()  # SIGKILL: no goodbye, its Lease simply stops being renewed
        lost = time.monotonic()
        late = [f"late{i}" for i in range(3)]
        for team in teams:
            spawn(cluster, team, late)
        wait_until("the standby to take the Lease", lambda: held(waiting) == 1, timeout=45)
        took = time.monotonic() - lost
        for team in teams:
            wait_until(
                f"the late Workers' pods in {team}, from the standby",
                lambda n=team: len(pods_of(cluster, n)) == PER_NAMESPACE + len(late),  # type: ignore[misc]
                timeout=30,
            )
        served = time.monotonic() - lost
        assert took <= FAILOVER_SECONDS + 2, f"the standby took over only after {took:.1f}s"
        assert spawns(waiting) == len(late) * len(teams)
        # The takeover passed over the Workers it inherited without making them anew.
        for team, pods in before.items():
            now = pods_of(cluster, team)
            assert {n: now[n] for n in pods} == pods, team

        # A clean exit (a rolling update, a drained node) hands the Lease over at once.
        third = stack.enter_context(standby(cluster, tmp_path / "r2", prefix))
        assert held(third) == 0 and held(waiting) == 1
        waiting.stop()  # SIGTERM
        stopped = time.monotonic()
        wait_until("the new replica to take the Lease", lambda: held(third) == 1, timeout=30)
        handed = time.monotonic() - stopped
        for team in teams:
            spawn(cluster, team, ["after-handover"])
        for team in teams:
            wait_until(
                f"the handed-over replica's pod in {team}",
                lambda n=team: "after-handover" in pods_of(cluster, n),  # type: ignore[misc]
                timeout=30,
            )
        assert handed <= 10, f"a clean exit's Lease was taken only after {handed:.1f}s"
        assert spawns(third) == len(teams)
        print(json.dumps({
            "failover_seconds": round(took, 1),
            "failover_to_pods_seconds": round(served, 1),
            "handover_seconds": round(handed, 1),
        }))  # fmt: skip
