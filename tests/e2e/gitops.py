"""What the GitOps tests read and do alike, whether a commit lands by `kubectl apply`
(test_gitops.py) or through Flux from git (test_flux.py): objects and their conditions,
an agent's revisions, a child bound to a revision and then released."""

from __future__ import annotations

from typing import Any

from tests.e2e.support import Cluster, wait_until


def get(cluster: Cluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", kind, name, "-n", namespace))


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    """The object's condition of that type; {} when it has none."""
    return next((c for c in body.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def revisions(cluster: Cluster, namespace: str) -> dict[int, dict[str, Any]]:
    """The namespace's AgentConfigRevisions, by revision id."""
    items = cluster.kubectl_json("get", "acr", "-n", namespace)["items"]
    return {int(r["spec"]["revision"]): r for r in items}


def max_steps(revision: dict[str, Any]) -> dict[str, Any]:
    """Each profile's overlay maxSteps in the revision, by profile key."""
    return {
        p["profile"]["key"]: p["profile"]["overlay"].get("maxSteps")
        for p in revision["spec"]["profileMap"]["profiles"]
    }


def phase(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any]:
    """Wait for the worker to be in `phase`; its status then."""
    return wait_until(
        f"worker {name} to be {phase}",
        lambda: (
            (s := get(cluster, "worker", name, namespace).get("status", {})).get("phase") == phase
            and s
        ),
    )


def bound(cluster: Cluster, namespace: str, name: str, revision: int) -> None:
    """Wait for the (suspended) child to be bound to the agent's revision `revision`."""
    wait_until(
        f"{name} to be bound to revision {revision}",
        lambda: (
            (get(cluster, "worker", name, namespace).get("status", {}).get("binding") or {}).get(
                "revision"
            )
            == str(revision)
        ),
    )


def resume(cluster: Cluster, namespace: str, name: str) -> None:
    """Let a suspended worker's run start."""
    cluster.kubectl(
        "patch", "worker", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
