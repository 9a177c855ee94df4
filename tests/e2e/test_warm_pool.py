"""Warm pools on a real API server: the pool fills; a spawn claims a warm pod and runs in
it, a profiled child too, bound and checked like a cold one; a burst larger than the pool
takes its pods first, then starts cold; a new revision replaces the warm pods; an operator
SIGKILLed after a claim gives no pod twice and loses no run; and a warm pod's token, bound
to its pod, is refused once the pod is gone (the reason a warm pod's own account may hold
a run's rights: docs/scaling.md, "Warm pool")."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kubernetes
import pytest

from agentworkers.api import WorkerSpec
from agentworkers.api.names import CLAIM_ANNOTATION, CLAIMED_LABEL, POOL_LABEL, WORKER_LABEL
from agentworkers.client import Client
from agentworkers.core.pools import Claim
from tests.e2e.support import (
    CONFIG,
    Cluster,
    Operator,
    first_revision,
    pod_watch,
    settled,
    wait_until,
)
from tests.model_servers import ModelServer, Turn

pytestmark = pytest.mark.usefixtures("operator", "podrunner")

SCRIPT = [{"match": "brief", "reply": "brief answer"}, {"reply": "warm hello"}]


def agent(cluster: Cluster, namespace: str, size: int) -> dict[str, Any]:
    """An agent with a warm pool of `size`, no skills (so a profiled child's pod has the
    same settings as a plain run's) and a profile that narrows only numbers and words."""
    config = copy.deepcopy(CONFIG)
    spec = config["spec"]
    spec["skills"] = []
    spec["model"]["script"] = SCRIPT
    spec["worker"] = {**spec.get("worker", {}), "warmPool": {"size": size, "idleSeconds": 600}}
    spec["virtualAgents"] = {
        "profiles": [
            {
                "key": "brief",
                "label": "Brief",
                "overlay": {"maxTokens": 512, "maxSteps": 5, "instructions": "Be brief."},
            }
        ]
    }
    cluster.apply(namespace, config)
    return first_revision(cluster, namespace)


def pool_status(cluster: Cluster, namespace: str) -> dict[str, int]:
    config = cluster.kubectl_json("get", "agentconfig", "planner", "-n", namespace)
    return dict((config.get("status") or {}).get("warmPool") or {})


def ready(cluster: Cluster, namespace: str, count: int) -> dict[str, int]:
    return wait_until(
        f"{count} warm pods ready",
        lambda: (s := pool_status(cluster, namespace)).get("ready") == count and s,
        timeout=60,
    )


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"])


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def test_a_pool_fills_and_a_spawn_runs_in_a_warm_pod(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    revision = agent(cluster, namespace, 2)
    ready(cluster, namespace, 2)
    warm = pods(cluster, namespace, f"{POOL_LABEL}=planner")
    assert {p["metadata"]["labels"]["agentworkers.io/revision"] for p in warm} == {revision["name"]}
    # What `kubectl get agentconfigs` shows.
    table = cluster.kubectl("get", "agentconfigs", "-n", namespace).stdout
    assert "WARM" in table.splitlines()[0] and table.splitlines()[1].split()[4] == "2"

    client.spawn("solo", WorkerSpec(agent="planner", initial_message="say hello"))
    info = settled(client, "solo")
    assert (info.status.phase, info.status.output) == ("Done", "warm hello")
    assert info.status.pod in {p["metadata"]["name"] for p in warm}
    claimed = cluster.kubectl_json("get", "pod", info.status.pod, "-n", namespace)
    claim = Claim.model_validate_json(claimed["metadata"]["annotations"][CLAIM_ANNOTATION])
    assert (claim.worker, claim.revision.name) == ("solo", revision["name"])
    assert [o["name"] for o in claimed["metadata"]["ownerReferences"]] == ["solo"]
    # The run froze the revision its pod was warmed at; the pool refilled.
    assert info.status.revision == revision["name"]
    wait_until(
        "the pool to refill",
        lambda: pool_status(cluster, namespace) == {"ready": 2, "starting": 0, "claimed": 0},
    )


def test_a_warm_pod_runs_its_claim_through_the_vendor_s_sdk_it_readied_while_waiting(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    """An agent on a vendor's endpoint (OpenAI's wire protocol, on loopback), its key in a
    Secret: its warm pod imports the SDK and builds its client before any claim, and the
    run that claims it talks to the endpoint with its key and its model."""
    with ModelServer(lambda _: Turn(text="readied hello", usage=(9, 3))) as server:
        cluster.kubectl(
            "create", "secret", "generic", "model-key", "-n", namespace,
            "--from-literal=apiKey=sk-warm-123",
        )  # fmt: skip
        config = copy.deepcopy(CONFIG)
        config["spec"]["skills"] = []
        config["spec"]["model"].update(
            provider="openai", baseURL=server.openai_url, apiKeySecret="model-key"
        )
        config["spec"]["worker"] = {"warmPool": {"size": 1, "idleSeconds": 600}}
        cluster.apply(namespace, config)
        first_revision(cluster, namespace)
        ready(cluster, namespace, 1)
        (warm,) = pods(cluster, namespace, f"{POOL_LABEL}=planner")
        client.spawn("vendor", WorkerSpec(agent="planner", initial_message="say hello"))
        info = settled(client, "vendor")
        (call,) = server.seen
    assert (info.status.phase, info.status.output) == ("Done", "readied hello")
    assert info.status.pod == warm["metadata"]["name"]
    assert "sk-warm-123" in call.headers.get("authorization", "")
    assert call.body["model"] == "demo-large" and call.body["stream"] is True


def test_a_profiled_child_in_a_warm_pod_is_bound_and_checked_like_a_cold_one(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    agent(cluster, namespace, 3)
    ready(cluster, namespace, 3)
    planner_script = [
        {"tool": "spawn_worker", "args": {"name": "kid", "message": "brief", "profile": "brief"}},
        {"reply": "spawned"},
    ]
    client.spawn("boss", WorkerSpec(agent="planner", initial_message="go", script=planner_script))
    # The parent ran in a warm pod and spawned with its account: admission let it.
    boss = settled(client, "boss", 90)
    assert (boss.status.output, boss.status.pod[:5]) == ("spawned", "warm-")
    kid = settled(client, "kid")
    assert kid.status.output == "brief answer"
    assert kid.status.pod.startswith("warm-")
    bound = next(c for c in kid.status.conditions if c.type == "ProfileBound")
    assert (bound.status, bound.reason) == ("True", "Bound")
    # The child ran under its profile: the pod's claim carries the narrowed config.
    pod = cluster.kubectl_json("get", "pod", kid.status.pod, "-n", namespace)
    claim = Claim.model_validate_json(pod["metadata"]["annotations"][CLAIM_ANNOTATION])
    assert json.loads(claim.effective)["maxTokens"] == 512


def test_a_pool_of_two_under_a_burst_of_ten_serves_two_warm_and_eight_cold(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    agent(cluster, namespace, 2)
    ready(cluster, namespace, 2)
    first = {p["metadata"]["name"] for p in pods(cluster, namespace, f"{POOL_LABEL}=planner")}
    names = [f"b{i}" for i in range(10)]
    # All at once, as a planner's fan-out arrives.
    with ThreadPoolExecutor(10) as pool:
        list(
            pool.map(
                lambda n: client.spawn(n, WorkerSpec(agent="planner", initial_message="hi")), names
            )
        )
    infos = [settled(client, n) for n in names]
    assert [i.status.phase for i in infos] == ["Done"] * 10
    warm = [i.status.pod for i in infos if i.status.pod != i.name]
    cold = [i.name for i in infos if i.status.pod == i.name]
    # The two pods ready before the burst served two of its runs, one each; the rest
    # started cold at once, none waited for a pod. (The pool refills meanwhile: a warm
    # pod ready before the burst's last pass serves a run too; it took at most one here.)
    assert first <= set(warm) and len(set(warm)) == len(warm)
    assert len(warm) + len(cold) == 10 and len(cold) >= 7, (warm, cold)


def test_a_revision_change_replaces_the_warm_pods(cluster: Cluster, namespace: str) -> None:
    first = agent(cluster, namespace, 2)
    ready(cluster, namespace, 2)
    before = {p["metadata"]["name"] for p in pods(cluster, namespace, f"{POOL_LABEL}=planner")}
    cluster.kubectl(
        "patch", "agentconfig", "planner", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"instructions": "A new revision."}}),
    )  # fmt: skip
    second = wait_until(
        "revision 2",
        lambda: (r := first_revision(cluster, namespace))["name"] != first["name"] and r,
    )

    def rolled() -> bool:
        warm = pods(cluster, namespace, f"{POOL_LABEL}=planner")
        live = [p for p in warm if not p["metadata"].get("deletionTimestamp")]
        revisions = {p["metadata"]["labels"]["agentworkers.io/revision"] for p in live}
        return (
            len(live) == 2
            and revisions == {second["name"]}
            and not before & {p["metadata"]["name"] for p in warm}
        )

    wait_until("the warm pods to be replaced", rolled)
    ready(cluster, namespace, 2)


@pytest.fixture
def claims(cluster: Cluster, namespace: str) -> Iterator[list[str]]:
    """The names of pods as they are claimed, from a watch of the namespace's pods."""
    seen: list[str] = []

    def saw(_: str, pod: Any) -> None:
        if (pod.metadata.labels or {}).get(CLAIMED_LABEL) and pod.metadata.name not in seen:
            seen.append(pod.metadata.name)

    with pod_watch(cluster, namespace, saw):
        yield seen


def test_an_operator_killed_after_a_claim_gives_no_pod_twice_and_loses_no_run(
    cluster: Cluster, namespace: str, client: Client, operator: Operator, claims: list[str]
) -> None:
    agent(cluster, namespace, 2)
    ready(cluster, namespace, 2)
    client.spawn("w", WorkerSpec(agent="planner", initial_message="hi"))
    # SIGKILL as soon as the claim is seen: before or while its Role, its status and its
    # runtime's start follow.
    try:
        wait_until("the claim", lambda: claims, interval=0.005)
    except AssertionError as e:
        found = {
            p["metadata"]["name"]: p["metadata"].get("labels")
            for p in cluster.kubectl_json("get", "pods", "-n", namespace)["items"]
        }
        status = cluster.kubectl_json("get", "worker", "w", "-n", namespace).get("status")
        raise AssertionError(f"{e}; pods: {found}; w's status: {status}") from None
    operator.crash(cluster)
    info = settled(client, "w")
    assert (info.status.phase, info.status.output) == ("Done", "warm hello")
    assert info.status.pod == claims[0]
    # One pod for the run, the one it claimed (none made cold after the restart).
    assert [p["metadata"]["name"] for p in pods(cluster, namespace, f"{WORKER_LABEL}=w")] == [
        claims[0]
    ]
    client.spawn("after", WorkerSpec(agent="planner", initial_message="hi"))
    after = settled(client, "after")
    assert after.status.phase == "Done" and after.status.pod != claims[0]


def test_a_warm_pod_s_token_is_refused_once_its_pod_is_gone(
    cluster: Cluster, namespace: str
) -> None:
    """Bound service-account tokens: the claim `kubernetes.io` names the pod, and the API
    server refuses the token once that pod is deleted (TokenReview), whichever account."""
    agent(cluster, namespace, 1)
    ready(cluster, namespace, 1)
    pod = pods(cluster, namespace, f"{POOL_LABEL}=planner")[0]
    meta = pod["metadata"]
    core = kubernetes.client.CoreV1Api(cluster.api)
    bound = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
    token = core.create_namespaced_service_account_token(
        pod["spec"]["serviceAccountName"],
        namespace,
        {"spec": {"expirationSeconds": 3600, "boundObjectRef": bound}},
    ).status.token
    auth = kubernetes.client.AuthenticationV1Api(cluster.api)

    def authenticated() -> bool:
        review = auth.create_token_review({"spec": {"token": token}})
        return bool(review.status.authenticated)

    assert authenticated()
    user = auth.create_token_review({"spec": {"token": token}}).status.user
    assert user.extra["authentication.kubernetes.io/pod-name"] == [meta["name"]]
    core.delete_namespaced_pod(meta["name"], namespace, grace_period_seconds=0)
    wait_until(
        "the pod to go",
        lambda: (
            not core.list_namespaced_pod(
                namespace, field_selector=f"metadata.name={meta['name']}"
            ).items
        ),
    )
    wait_until("the token to be refused", lambda: not authenticated(), timeout=30)
