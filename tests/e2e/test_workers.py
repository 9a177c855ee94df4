"""The worker lifecycle on a real API server: spawn, bind, pod, pin checks, kill, collect."""

from __future__ import annotations

import copy
import json
import signal
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import (
    Client,
    CollectTimeoutError,
    UnknownWorkerError,
    WorkerFinishedError,
    WorkerNameConflictError,
)
from agentworkers.virtualagent import Binding
from tests.e2e.support import CONFIG, PROFILES, Cluster, Operator, wait_until
from tests.e2e.support import worker as _worker

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def _status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.kubectl_json("get", "worker", name, "-n", namespace).get("status", {})


def _phase(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    return wait_until(
        f"worker {name} to be {phase}",
        lambda: (s := _status(cluster, namespace, name)).get("phase") == phase and s,
    )


def _pod(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def _events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", f"reason={reason}"
    )["items"]


def _wait_revision(cluster: Cluster, namespace: str, number: int) -> None:
    def active() -> int:
        status = cluster.kubectl_json("get", "ac", "planner", "-n", namespace).get("status", {})
        return int((status.get("activeRevision") or {}).get("revision", 0))

    wait_until(f"revision {number}", lambda: active() == number)


def _running_parent(cluster: Cluster, namespace: str, name: str = "parent") -> dict[str, Any]:
    cluster.apply(namespace, _worker(name, initialMessage="plan the work"))
    return _phase(cluster, namespace, name, "Running")


def test_a_top_level_worker_runs_in_one_hardened_pod_and_freezes_its_revision(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    status = _running_parent(cluster, namespace)
    assert status["frozenRevision"] == planner
    assert status["pod"] == "parent"
    pod = _pod(cluster, namespace, "parent")
    assert pod is not None
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Worker"
    container = pod["spec"]["containers"][0]
    assert container["workingDir"] == "/sandbox"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["serviceAccountName"] == "worker-parent"
    sandbox = next(v for v in pod["spec"]["volumes"] if v["name"] == "sandbox")
    assert sandbox["emptyDir"]["sizeLimit"] == "256Mi"
    assert pod["spec"]["activeDeadlineSeconds"] == 600
    table = cluster.kubectl("get", "workers", "-n", namespace).stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "PHASE", "AGENT", "PROFILE", "PARENT"]
    assert table[1].split()[:3] == ["parent", "Running", "planner"]


def test_a_profiled_child_is_bound_once_owned_by_its_parent_and_narrowed(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace)
    cluster.apply(
        namespace,
        _worker("child", parent="parent", profile="reviewer", initialMessage="review"),
    )
    status = _phase(cluster, namespace, "child", "Running")
    body = cluster.kubectl_json("get", "worker", "child", "-n", namespace)
    binding = Binding.model_validate_json(
        body["metadata"]["annotations"]["agentworkers.io/binding"]
    )
    revision = cluster.kubectl_json("get", "acr", planner["name"], "-n", namespace)["spec"]
    frozen_hash = next(
        p["hash"] for p in revision["profileMap"]["profiles"] if p["profile"]["key"] == "reviewer"
    )
    assert (binding.agent_id, binding.key, binding.parent) == ("planner", "reviewer", "planner")
    assert (binding.config_revision_id, binding.config_digest) == (
        str(planner["revision"]),
        planner["digest"],
    )
    assert binding.profile_hash == frozen_hash == status["binding"]["profileHash"]
    assert body["spec"]["agent"] == "planner"  # the child stays the top-level agent's run
    assert [o["name"] for o in body["metadata"]["ownerReferences"]] == ["parent"]

    pod = _pod(cluster, namespace, "child")
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    effective = json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"])
    assert effective["model"] == "demo-small"
    assert effective["temperature"] == 0.2 and effective["maxTokens"] == 1024
    assert effective["reasoningEffort"] == "high"
    assert effective["skills"] == ["code-review"]
    assert "write_file" not in effective["tools"] and "spawn_worker" not in effective["tools"]
    assert effective["mcpServers"] == []  # "search" is paused
    assert effective["maxSteps"] == 10 and effective["tokenBudget"] == 20000
    assert effective["blocks"] == [
        {
            "name": "virtual_agent.reviewer",
            "text": "Review the diff you are given. Report problems, not style.",
        }
    ]
    assert effective["sources"]["model"] == "profile"

    # Exactly once: a later edit of the Worker does not rewrite the binding.
    before = body["metadata"]["annotations"]["agentworkers.io/binding"]
    cluster.kubectl("annotate", "worker", "child", "-n", namespace, "note=hello")
    after = cluster.kubectl_json("get", "worker", "child", "-n", namespace)["metadata"][
        "annotations"
    ]
    assert after["agentworkers.io/binding"] == before


def _can(cluster: Cluster, namespace: str, account: str, *what: str) -> bool:
    subject = f"system:serviceaccount:{namespace}:{account}"
    result = cluster.kubectl("auth", "can-i", *what, "-n", namespace, "--as", subject, check=False)
    return result.stdout.strip() == "yes"


def test_a_runtime_may_touch_its_own_worker_and_its_children_and_nothing_else(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace)
    _running_parent(cluster, namespace, "stranger")
    can = lambda *what: _can(cluster, namespace, "worker-parent", *what)  # noqa: E731
    assert can("get", "workers/parent") and can("patch", "workers/parent", "--subresource=status")
    assert can("get", "agentconfigs/planner") and can("create", "workers")
    assert not can("get", "workers/stranger") and not can(
        "patch", "workers/stranger", "--subresource=status"
    )
    assert (
        not can("list", "pods")
        and not can("get", "secrets")
        and not can("delete", "agentconfigs/planner")
    )
    assert not can("patch", "workers/parent")  # its own spec (queries, kill) is not its to write

    cluster.apply(namespace, _worker("kid", parent="parent", profile="translator"))
    _phase(cluster, namespace, "kid", "Running")
    wait_until("the parent's runtime to be granted its child", lambda: can("get", "workers/kid"))
    assert can("delete", "workers/kid") and can("patch", "workers/kid")

    # A runtime's credentials spawn only its own children.
    token = cluster.kubectl("create", "token", "worker-parent", "-n", namespace).stdout.strip()
    as_parent = [
        "--token",
        token,
        "--kubeconfig",
        "/dev/null",
        "--server",
        cluster.api.configuration.host,
        "--certificate-authority",
        cluster.api.configuration.ssl_ca_cert,
    ]
    orphan = _worker("orphan", parent="stranger")
    refused = cluster.kubectl(
        "create", "-n", namespace, "-f", "-", *as_parent, stdin=json.dumps(orphan), check=False
    )
    assert refused.returncode != 0 and "NotYourChild" in refused.stderr, refused.stderr
    mine = _worker("mine", parent="parent")
    cluster.kubectl("create", "-n", namespace, "-f", "-", *as_parent, stdin=json.dumps(mine))


def _refused(cluster: Cluster, namespace: str, worker: dict[str, Any], reason: str) -> str:
    result = cluster.apply(namespace, worker, check=False)
    assert result.returncode != 0, f"{worker['metadata']['name']} was accepted"
    assert f"{reason}:" in result.stderr, result.stderr
    name = worker["metadata"]["name"]
    assert cluster.kubectl("get", "worker", name, "-n", namespace, check=False).returncode != 0
    assert _pod(cluster, namespace, name) is None
    return str(result.stderr)


def test_bad_spawns_are_refused_before_anything_persists(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace)
    message = _refused(
        cluster, namespace, _worker("c1", parent="parent", profile="nope"), "UnknownProfile"
    )
    assert "known: researcher, reviewer, translator" in message
    # A parent that does not exist is that, not a missing profile map.
    _refused(cluster, namespace, _worker("c2", parent="ghost", profile="reviewer"), "UnknownWorker")
    _refused(
        cluster, namespace, _worker("c3", allowedSecrets=["root-password"]), "SecretNotAllowed"
    )

    # A profiled child may not spawn a profiled grandchild.
    cluster.apply(namespace, _worker("child", parent="parent", profile="reviewer"))
    _phase(cluster, namespace, "child", "Running")
    _refused(
        cluster, namespace, _worker("c4", parent="child", profile="researcher"), "ProfileRecursion"
    )

    # A parent that has not started has frozen nothing.
    cluster.apply(namespace, _worker("held", suspend=True))
    _phase(cluster, namespace, "held", "Pending")
    _refused(cluster, namespace, _worker("c5", parent="held", profile="reviewer"), "NoProfileMap")

    # The live revision moved since the parent froze: stale.
    edited = copy.deepcopy(PROFILES[1])
    edited["spec"]["overlay"]["maxTokens"] = 1000
    cluster.apply(namespace, edited)
    _wait_revision(cluster, namespace, 2)
    _refused(
        cluster, namespace, _worker("c6", parent="parent", profile="reviewer"), "StaleProfilePin"
    )


def _suspended_child(cluster: Cluster, namespace: str, name: str, profile: str) -> None:
    cluster.apply(namespace, _worker(name, parent="parent", profile=profile, suspend=True))
    wait_until(
        f"{name} to be bound",
        lambda: (
            "agentworkers.io/binding"
            in (
                cluster.kubectl_json("get", "worker", name, "-n", namespace)["metadata"].get(
                    "annotations"
                )
                or {}
            )
        ),
    )


def _start_and_expect_failure(
    cluster: Cluster, namespace: str, name: str, reason: str
) -> dict[str, Any]:
    cluster.kubectl(
        "patch", "worker", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    status = _phase(cluster, namespace, name, "Failed")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == reason, ready
    assert _pod(cluster, namespace, name) is None
    events = [e for e in _events(cluster, namespace, reason) if e["involvedObject"]["name"] == name]
    assert len(events) == 1 and events[0]["type"] == "Warning"
    return status


def test_a_run_start_fails_loud_when_the_pin_no_longer_holds(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace)
    for name, profile in (
        ("tampered", "translator"),
        ("stale", "researcher"),
        ("missing", "translator"),
    ):
        _suspended_child(cluster, namespace, name, profile)

    # A hand-edited binding: same revision, another profile hash.
    body = cluster.kubectl_json("get", "worker", "tampered", "-n", namespace)
    binding = json.loads(body["metadata"]["annotations"]["agentworkers.io/binding"])
    binding["label"] = "Something else"
    # With the operator's credentials: admission refuses anyone else's (test_guarantees).
    cluster.as_operator(
        "annotate",
        "worker",
        "tampered",
        "-n",
        namespace,
        "--overwrite",
        f"agentworkers.io/binding={json.dumps(binding)}",
    )
    _start_and_expect_failure(cluster, namespace, "tampered", "TamperedBinding")

    # A profile edit moves the revision: stale.
    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 12
    cluster.apply(namespace, edited)
    _wait_revision(cluster, namespace, 2)
    _start_and_expect_failure(cluster, namespace, "stale", "StaleProfilePin")

    # The key is gone from the current map.
    cluster.kubectl("delete", "vap", "planner-translator", "-n", namespace)
    _wait_revision(cluster, namespace, 3)
    status = _start_and_expect_failure(cluster, namespace, "missing", "MissingProfile")
    assert "translator" in status["error"]


def test_a_pod_deleted_behind_the_operators_back_fails_the_worker(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace)
    cluster.kubectl("delete", "pod", "parent", "-n", namespace)
    status = _phase(cluster, namespace, "parent", "Failed")
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["reason"] == "PodLost"
    assert _pod(cluster, namespace, "parent") is None  # and no second pod


def test_kill_posts_an_event_with_the_reason_and_collect_returns_it(
    cluster: Cluster, namespace: str, planner: dict[str, Any], client: Client
) -> None:
    client.spawn("victim", WorkerSpec(agent="planner", initial_message="start"))
    _phase(cluster, namespace, "victim", "Running")
    client.kill("victim", reason="budget exceeded for this sprint", by="alice")
    _phase(cluster, namespace, "victim", "Killed")
    wait_until("the pod to go", lambda: _pod(cluster, namespace, "victim") is None)
    [event] = [
        e for e in _events(cluster, namespace, "Killed") if e["involvedObject"]["name"] == "victim"
    ]
    assert event["type"] == "Warning"
    assert event["message"] == "killed by alice: budget exceeded for this sprint"
    described = cluster.kubectl("describe", "worker", "victim", "-n", namespace).stdout
    assert "killed by alice: budget exceeded for this sprint" in described

    result = client.collect("victim", timeout=30)
    assert (result.phase, result.error) == ("Killed", "budget exceeded for this sprint")
    with pytest.raises(UnknownWorkerError):
        client.get("victim")
    # Deleting a collected worker is no second kill.
    assert (
        len(
            [
                e
                for e in _events(cluster, namespace, "Killed")
                if e["involvedObject"]["name"] == "victim"
            ]
        )
        == 1
    )


def test_deleting_a_running_worker_is_a_kill(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    _running_parent(cluster, namespace, "doomed")
    cluster.kubectl("delete", "worker", "doomed", "-n", namespace)
    event = wait_until(
        "the Killed Event",
        lambda: [
            e
            for e in _events(cluster, namespace, "Killed")
            if e["involvedObject"]["name"] == "doomed"
        ],
    )[0]
    assert "deleted while Running" in event["message"]
    wait_until(
        "the pod to be garbage-collected", lambda: _pod(cluster, namespace, "doomed") is None
    )


def test_collect_times_out_and_names_conflict(
    cluster: Cluster, namespace: str, planner: dict[str, Any], client: Client
) -> None:
    client.spawn("busy", WorkerSpec(agent="planner", initial_message="think for a long time"))
    _phase(cluster, namespace, "busy", "Running")
    with pytest.raises(CollectTimeoutError, match="still Running after 2s"):
        client.collect("busy", timeout=2)
    assert client.get("busy").status.phase == "Running"  # a timed-out collect removes nothing
    with pytest.raises(WorkerNameConflictError):
        client.spawn("busy", WorkerSpec(agent="planner"))
    with pytest.raises(UnknownWorkerError):
        client.collect("nobody", timeout=1)


def test_a_query_to_a_finished_worker_is_refused(
    cluster: Cluster, namespace: str, planner: dict[str, Any], client: Client
) -> None:
    client.spawn("short", WorkerSpec(agent="planner"))
    _phase(cluster, namespace, "short", "Running")
    client.query("short", "and one more thing")
    client.query("short", "and another")
    assert client.get("short").spec.queries == ("and one more thing", "and another")
    refused = cluster.kubectl(
        "patch",
        "worker",
        "short",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/queries/0","value":"rewritten"}]',
        check=False,
    )
    assert "spec.queries is append-only" in refused.stderr
    client.kill("short", reason="done with it")
    _phase(cluster, namespace, "short", "Killed")
    # Told by the reason the admission refusal carries, not by its words.
    with pytest.raises(WorkerFinishedError, match="the run is Killed") as refused:
        client.query("short", "too late")
    assert refused.value.field == "spec.queries"


def test_an_operator_restart_mid_spawn_leaves_one_pod_per_worker(
    cluster: Cluster, namespace: str, planner: dict[str, Any], operator: Operator
) -> None:
    names = [f"burst-{i}" for i in range(8)]
    cluster.apply(namespace, *(_worker(n, initialMessage="go") for n in names))
    operator.process.send_signal(signal.SIGKILL)  # no graceful stop: a crash mid-spawn
    operator.process.wait()
    operator.restart(cluster)
    for name in names:
        _phase(cluster, namespace, name, "Running")
    pods = cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "agentworkers.io/worker")[
        "items"
    ]
    assert sorted(p["metadata"]["labels"]["agentworkers.io/worker"] for p in pods) == names


def test_the_operator_logs_json_lines_naming_the_worker(
    cluster: Cluster, namespace: str, planner: dict[str, Any], operator: Operator
) -> None:
    _running_parent(cluster, namespace, "logged")
    cluster.kubectl("delete", "pod", "logged", "-n", namespace)
    _phase(cluster, namespace, "logged", "Failed")
    lines = [json.loads(line) for line in operator.log.read_text().splitlines() if line.strip()]
    about = [line for line in lines if (line.get("object") or {}).get("namespace") == namespace]
    assert any(line["object"].get("name") == "logged" for line in about), about[-5:]
    assert all({"message", "timestamp", "severity"} <= line.keys() for line in lines)


def test_a_revision_a_live_worker_pins_outlives_the_history_limit(
    cluster: Cluster, namespace: str
) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["revisionHistoryLimit"] = 1
    cluster.apply(namespace, *PROFILES, config)
    _wait_revision(cluster, namespace, 1)
    _running_parent(cluster, namespace)  # froze planner-r1: its children are checked against it

    def revisions() -> list[str]:
        found = cluster.kubectl_json("get", "acr", "-n", namespace)["items"]
        return sorted(r["metadata"]["name"] for r in found)

    edited = copy.deepcopy(PROFILES[1])
    for number, tokens in ((2, 1500), (3, 1400)):
        edited["spec"]["overlay"]["maxTokens"] = tokens
        cluster.apply(namespace, edited)
        _wait_revision(cluster, namespace, number)
    wait_until("r2 to be pruned", lambda: revisions() == ["planner-r1", "planner-r3"])

    cluster.kubectl(
        "patch",
        "worker",
        "parent",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"kill":{"reason":"done with r1"}}}',
    )
    _phase(cluster, namespace, "parent", "Killed")
    edited["spec"]["overlay"]["maxTokens"] = 1300
    cluster.apply(namespace, edited)
    _wait_revision(cluster, namespace, 4)
    wait_until("only the active revision to remain", lambda: revisions() == ["planner-r4"])


def test_a_kill_reaches_the_whole_tree(
    cluster: Cluster, namespace: str, planner: dict[str, Any], client: Client
) -> None:
    _running_parent(cluster, namespace, "root")
    cluster.apply(namespace, _worker("child", parent="root", initialMessage="help"))
    _phase(cluster, namespace, "child", "Running")
    cluster.apply(namespace, _worker("grandchild", parent="child", initialMessage="help more"))
    _phase(cluster, namespace, "grandchild", "Running")

    client.kill("root", reason="over budget", by="alice")
    for name, reason in (
        ("root", "over budget"),
        ("child", "parent killed: over budget"),
        ("grandchild", "parent killed: over budget"),
    ):
        status = _phase(cluster, namespace, name, "Killed")
        assert status["error"] == reason, name
        wait_until(f"{name}'s pod to go", lambda n=name: _pod(cluster, namespace, n) is None)  # type: ignore[misc]
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=Killed"
    )["items"]
    said = sorted((e["involvedObject"]["name"], e["message"]) for e in events)
    assert said == [
        ("child", "killed by root: parent killed: over budget"),
        ("grandchild", "killed by child: parent killed: over budget"),
        ("root", "killed by alice: over budget"),
    ]
    tree = client.tree("root")
    assert [(n.worker.name, n.worker.phase) for n in (tree, *tree.children)] == [
        ("root", "Killed"),
        ("child", "Killed"),
    ]
    assert [n.worker.name for n in tree.children[0].children] == ["grandchild"]
    collected = client.collect("root")
    assert (collected.phase, collected.error) == ("Killed", "over budget")
    assert collected.killed_children == ("child",)  # the grandchild is the child's


def test_a_killed_tree_with_a_ttl_is_deleted_after_it(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    # The operator writes these ends itself (the kill, the cascade below it): the pass
    # after each, not a report of the runtime's, starts its TTL clock. The child is
    # suspended, so it has no pod whose deletion would bring a pass either.
    cluster.apply(namespace, _worker("doomed", initialMessage="plan", ttlSecondsAfterFinished=8))
    _phase(cluster, namespace, "doomed", "Running")
    cluster.apply(
        namespace,
        _worker(
            "helper",
            parent="doomed",
            initialMessage="help",
            suspend=True,
            ttlSecondsAfterFinished=1,
        ),
    )
    _phase(cluster, namespace, "helper", "Pending")
    Client(cluster.api, namespace).kill("doomed", reason="done with it", by="alice")

    def gone(name: str) -> bool:
        found = cluster.kubectl("get", "worker", name, "-n", namespace, check=False)
        return found.returncode != 0

    # The child first, by its own clock (not the garbage collector's, after its parent).
    wait_until("helper to be deleted after its TTL", lambda: gone("helper"), timeout=30)
    assert not gone("doomed")
    wait_until("doomed to be deleted after its TTL", lambda: gone("doomed"), timeout=60)
    expired = sorted(e["involvedObject"]["name"] for e in _events(cluster, namespace, "TTLExpired"))
    assert expired == ["doomed", "helper"]
