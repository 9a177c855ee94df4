"""Spawn trees under their AgentConfig's limits (spec.tree), on a real API server: bursts of
concurrent spawns never pass maxChildren or maxLiveDescendants, and a spawn too deep is
refused before it persists, saying which limit, how many and whose tree."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client, TreeLimitError
from tests.e2e.support import CONFIG, PROFILES, Cluster, first_revision, wait_until
from tests.e2e.support import worker as _worker

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def _agent(cluster: Cluster, namespace: str, **tree: int) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["tree"] = tree
    cluster.apply(namespace, *PROFILES, config)
    first_revision(cluster, namespace)


def _burst(client: Client, spawns: list[tuple[str, str]]) -> dict[str, str | None]:
    """Spawn every (name, parent) at once; each name's refusal reason, or None."""

    def spawn(name: str, parent: str) -> str | None:
        try:
            client.spawn(name, WorkerSpec(agent="planner", parent=parent, initial_message="go"))
        except TreeLimitError as e:
            return f"{e.reason}: {e}"
        return None

    with ThreadPoolExecutor(len(spawns)) as pool:
        answers = pool.map(lambda s: spawn(*s), spawns)
        return dict(zip([name for name, _ in spawns], answers, strict=True))


def _children(cluster: Cluster, namespace: str, parent: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "workers", "-n", namespace)["items"]
    return [w for w in items if w["spec"].get("parent") == parent]


def test_a_burst_of_spawns_never_passes_max_children(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, maxChildren=4)
    client.spawn("root", WorkerSpec(agent="planner", initial_message="fan out"))
    answers = _burst(client, [(f"kid-{i}", "root") for i in range(16)])
    admitted = sorted(name for name, refusal in answers.items() if refusal is None)
    assert len(admitted) == 4, answers
    refusals = [r for r in answers.values() if r]
    assert all(
        r.startswith("TooManyChildren: spec.parent: worker 'root' has 4 children") for r in refusals
    ), refusals
    assert "maxChildren 4 in the tree of 'root' (AgentConfig planner's spec.tree)" in refusals[0]
    assert sorted(w["metadata"]["name"] for w in _children(cluster, namespace, "root")) == admitted
    for name in admitted:  # and the ones admitted run
        wait_until(
            f"{name}'s pod",
            lambda n=name: (
                cluster.kubectl("get", "pod", n, "-n", namespace, check=False).returncode == 0
            ),  # type: ignore[misc]
        )


def test_a_burst_across_a_tree_never_passes_max_live_descendants(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, maxLiveDescendants=5)
    client.spawn("root", WorkerSpec(agent="planner", initial_message="plan"))
    for name in ("left", "right"):
        client.spawn(name, WorkerSpec(agent="planner", parent="root", initial_message="split"))
    spawns = [(f"{side}-{i}", side) for side in ("left", "right") for i in range(8)]
    answers = _burst(client, spawns)
    assert sum(refusal is None for refusal in answers.values()) == 3, answers
    refusals = [r for r in answers.values() if r]
    assert all(
        r.startswith("TreeFull: spec.parent: the tree of 'root' has 5 live runs") for r in refusals
    ), refusals
    below = [
        w
        for w in cluster.kubectl_json("get", "workers", "-n", namespace)["items"]
        if w["spec"].get("parent")
    ]
    assert len(below) == 5


def test_a_spawn_too_deep_is_refused_before_it_persists(cluster: Cluster, namespace: str) -> None:
    _agent(cluster, namespace, maxDepth=1)
    cluster.apply(namespace, _worker("root"), _worker("child", parent="root"))
    refused = cluster.apply(namespace, _worker("grandchild", parent="child"), check=False)
    assert refused.returncode != 0
    assert (
        "TreeTooDeep: spec.parent: a run at depth 2 is deeper than maxDepth 1 of the tree of "
        "'root' (AgentConfig planner's spec.tree)"
    ) in refused.stderr
    missing = cluster.kubectl("get", "worker", "grandchild", "-n", namespace, check=False)
    assert missing.returncode != 0  # nothing persisted


def test_a_child_s_deadline_never_outlives_its_parent_s(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace)
    client.spawn("root", WorkerSpec(agent="planner", initial_message="x", deadline_seconds=120))
    wait_until("root's pod", lambda: client.get("root").status.pod)
    client.spawn(
        "kid",
        WorkerSpec(agent="planner", parent="root", initial_message="y", deadline_seconds=3600),
    )
    wait_until("kid's pod", lambda: client.get("kid").status.pod)
    pod = cluster.kubectl_json("get", "pod", "kid", "-n", namespace)
    assert 100 <= pod["spec"]["activeDeadlineSeconds"] <= 120
    root, kid = client.get("root").status, client.get("kid").status
    assert kid.deadline_at is not None and root.deadline_at is not None
    assert kid.deadline_at <= root.deadline_at
