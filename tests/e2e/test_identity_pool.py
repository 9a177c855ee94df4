"""Pooled identities on a real API server (docs/scaling.md, "Pooled identities"): the pool
fills; a cold run runs as a pooled account, with its own Role bound to it and no account
of its own made, and spawns only children of its own; no account serves two live runs,
and one is given again only once the pod that ran as it is gone, and its quarantine
after; an operator SIGKILLed while runs take accounts gives none to two live runs and
loses no run."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.api.names import IDENTITY_LABEL, IDENTITY_POOL_LABEL
from agentworkers.client import Client
from agentworkers.core.identities import QUARANTINE_SECONDS
from tests.e2e.support import (
    CONFIG,
    Cluster,
    Operator,
    first_revision,
    pod_watch,
    settled,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("operator", "podrunner")


def agent(cluster: Cluster, namespace: str, size: int) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["skills"] = []
    config["spec"]["model"]["script"] = [{"reply": "pooled hello"}]
    config["spec"]["worker"] = {**config["spec"].get("worker", {}), "identityPool": size}
    cluster.apply(namespace, config)
    first_revision(cluster, namespace)


def accounts(cluster: Cluster, namespace: str) -> set[str]:
    found = cluster.kubectl_json(
        "get", "serviceaccounts", "-n", namespace, "-l", f"{IDENTITY_POOL_LABEL}=planner"
    )
    return {a["metadata"]["name"] for a in found["items"]}


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


@dataclass
class Accounts:
    """What a watch of a namespace's pods saw of its pooled accounts."""

    # Every moment two live pods ran as one account (as "account: pod, pod").
    shared: list[str] = field(default_factory=list)
    # Each time a pod came as an account whose earlier pods had all gone: the account,
    # and the seconds since the last of them went.
    reused: list[tuple[str, float]] = field(default_factory=list)


@pytest.fixture
def seen(cluster: Cluster, namespace: str) -> Iterator[Accounts]:
    found = Accounts()
    live: dict[str, set[str]] = {}
    gone_at: dict[str, float] = {}  # account -> when its last live pod went

    def saw(kind: str, pod: Any) -> None:
        account = (pod.metadata.labels or {}).get(IDENTITY_LABEL)
        if not account:
            return
        pods = live.setdefault(account, set())
        if kind == "DELETED":
            pods.discard(pod.metadata.name)
            if not pods:
                gone_at[account] = time.monotonic()
        elif pod.metadata.name not in pods:
            if not pods and account in gone_at:
                found.reused.append((account, time.monotonic() - gone_at[account]))
            pods.add(pod.metadata.name)
            if len(pods) > 1:
                found.shared.append(f"{account}: {', '.join(sorted(pods))}")

    with pod_watch(cluster, namespace, saw):
        yield found


def run_as(cluster: Cluster, namespace: str, pod: str) -> str:
    return str(
        cluster.kubectl_json("get", "pod", pod, "-n", namespace)["spec"]["serviceAccountName"]
    )


def test_a_cold_run_runs_as_a_pooled_account_with_its_own_role(
    cluster: Cluster, namespace: str, client: Client, seen: Accounts
) -> None:
    agent(cluster, namespace, 2)
    wait_until("the pool to fill", lambda: len(accounts(cluster, namespace)) == 2)
    client.spawn("a", WorkerSpec(agent="planner", initial_message="hi"))
    info = settled(client, "a")
    # It ran, so its runtime read and wrote its own Worker through the pooled account.
    assert (info.status.phase, info.status.output) == ("Done", "pooled hello")
    account = run_as(cluster, namespace, info.status.pod)
    assert account.startswith("id-planner-")
    binding = cluster.kubectl_json("get", "rolebinding", "worker-a", "-n", namespace)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ]
    assert binding["metadata"]["labels"][IDENTITY_LABEL] == account
    # No account of its own was made, and the pool refilled off its path.
    assert not cluster.kubectl(
        "get", "serviceaccount", "worker-a", "-n", namespace, "--ignore-not-found", "-o", "name"
    ).stdout.strip()
    wait_until(
        "the pool to refill",
        lambda: len(accounts(cluster, namespace)) == 3,
    )
    # The account's rights are the run's: it may read its Worker, and no other.
    can = cluster.kubectl(
        "auth", "can-i", "get", "workers/a", "-n", namespace,
        f"--as=system:serviceaccount:{namespace}:{account}", check=False,
    )  # fmt: skip
    assert can.stdout.strip() == "yes"
    assert not seen.shared


def test_a_run_of_a_pooled_account_spawns_its_own_children_only(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    """Admission knows the run behind a pooled account (the one live pod that runs as it):
    its runtime spawns a child of its own, and no other."""
    agent(cluster, namespace, 2)
    wait_until("the pool to fill", lambda: len(accounts(cluster, namespace)) == 2)
    script = [
        {"tool": "spawn_worker", "args": {"name": "kid", "message": "hi"}},
        {"reply": "spawned"},
    ]
    client.spawn("boss", WorkerSpec(agent="planner", initial_message="go", script=script))
    boss = settled(client, "boss", 90)
    assert boss.status.output == "spawned"
    account = run_as(cluster, namespace, boss.status.pod)
    assert account.startswith("id-planner-")
    kid = settled(client, "kid")
    assert (kid.status.phase, kid.spec.parent) == ("Done", "boss")
    # The same account may not create a Worker of another parent (dry run, as the account).
    orphan = (
        '{"apiVersion": "agentworkers.io/v1alpha1", "kind": "Worker", "metadata": '
        '{"name": "orphan"}, "spec": {"agent": "planner", "initialMessage": "hi"}}'
    )
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-",
        f"--as=system:serviceaccount:{namespace}:{account}", stdin=orphan, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "may only spawn workers whose parent is" in refused.stderr


def test_an_account_is_given_again_only_after_its_pod_is_gone_and_its_quarantine(
    cluster: Cluster, namespace: str, client: Client, seen: Accounts
) -> None:
    agent(cluster, namespace, 1)
    wait_until("the pool to fill", lambda: len(accounts(cluster, namespace)) == 1)
    client.spawn("first", WorkerSpec(agent="planner", initial_message="hi"))
    first = settled(client, "first")
    account = run_as(cluster, namespace, first.status.pod)
    # While its pod exists, later runs get other accounts.
    client.spawn("second", WorkerSpec(agent="planner", initial_message="hi"))
    second = settled(client, "second")
    assert run_as(cluster, namespace, second.status.pod) != account
    client.collect("first", timeout=30)
    # Runs taken one by one, each collected, until one runs as an account used before.
    # Which one is the pool's choice: accounts freed in one pass leave their quarantine
    # together, and a pool of one keeps one of them.
    for i in range(30):
        name = f"later{i}"
        client.spawn(name, WorkerSpec(agent="planner", initial_message="hi"))
        info = settled(client, name)
        assert info.status.phase == "Done"
        client.collect(name, timeout=30)
        if seen.reused:
            break
        time.sleep(3)
    else:
        pytest.fail(f"no account was given again within 30 runs: {seen}")
    # Given again only after its last pod was gone for the quarantine (less the watch's
    # delivery jitter: the operator counts from when it saw the pod gone, later still).
    assert all(gap >= QUARANTINE_SECONDS - 0.5 for _, gap in seen.reused), seen.reused
    assert not seen.shared


def test_an_operator_killed_while_runs_take_accounts_gives_none_twice_and_loses_no_run(
    cluster: Cluster, namespace: str, client: Client, operator: Operator, seen: Accounts
) -> None:
    agent(cluster, namespace, 4)
    wait_until("the pool to fill", lambda: len(accounts(cluster, namespace)) == 4)
    names = [f"r{i}" for i in range(4)]
    for name in names:
        client.spawn(name, WorkerSpec(agent="planner", initial_message="hi"))

    # SIGKILL as soon as a pod runs as a pooled account: the other runs' takes, pods,
    # Roles and status writes are before, during or after it.
    def pooled_pod() -> str:
        listed = cluster.kubectl("get", "pods", "-n", namespace, "-l", IDENTITY_LABEL, "-o", "name")
        return str(listed.stdout.strip())

    wait_until("a pod of a pooled account", pooled_pod, interval=0.005)
    operator.crash(cluster)
    more = [f"s{i}" for i in range(4)]
    for name in more:
        client.spawn(name, WorkerSpec(agent="planner", initial_message="hi"))
    for name in names + more:
        info = settled(client, name, 90)
        assert (info.status.phase, info.status.output) == ("Done", "pooled hello"), name
    # Each run has one pod, and no two live runs ran as one account.
    pods = cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(names + more)
    assert not seen.shared
