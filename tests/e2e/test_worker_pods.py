"""Worker pods follow the install: its image and pod knobs (the chart's workerDefaults,
the operator's --worker-defaults) under each AgentConfig's own spec.worker, on a real API
server that admits the pod (RuntimeClass and PriorityClass checked by its own admission).

Its own namespace (outside the session operator's pattern) and operator process.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agentworkers.client import Client
from tests.e2e.support import CONFIG, Cluster, Operator, first_revision, wait_until, worker


@pytest.fixture
def install(cluster: Cluster) -> Iterator[str]:
    """A namespace of our own, and the RuntimeClass and PriorityClass a platform team made."""
    prefix = f"wp{uuid.uuid4().hex[:4]}"
    namespace = f"{prefix}-a"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin="\n---\n".join(
            json.dumps(o)
            for o in (
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": f"{prefix}-gvisor"},
                    "handler": "runsc",
                },
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": f"{prefix}-agents"},
                    "value": 1000,
                },
            )
        ),
    )
    wait_until(
        "the namespace's default service account",
        lambda: (
            cluster.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0
        ),
    )
    try:
        yield prefix
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        cluster.kubectl("delete", "runtimeclass", f"{prefix}-gvisor", "--ignore-not-found")
        cluster.kubectl("delete", "priorityclass", f"{prefix}-agents", "--ignore-not-found")


def test_worker_pods_get_the_install_s_knobs_under_the_agent_s_own(
    cluster: Cluster, install: str, tmp_path: Path
) -> None:
    prefix = install
    namespace = f"{prefix}-a"
    defaults = tmp_path / "worker-defaults.yaml"
    defaults.write_text(
        yaml.safe_dump(
            {
                "image": "registry.example.com/agentworkers:0.1.0",
                "imagePullSecrets": ["regcred"],
                "runtimeClassName": f"{prefix}-gvisor",
                "priorityClassName": f"{prefix}-agents",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "256Mi"}},
                "serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "a@p.iam"},
            }
        )
    )
    config = copy.deepcopy(CONFIG)
    # The agent's own knob wins over the install's; it names no image (the install's).
    config["spec"]["worker"] = {
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [
                                {"key": "type", "operator": "In", "values": ["kwok"]}
                            ]
                        },
                    }
                ]
            }
        },
    }
    with Operator.start(
        cluster,
        tmp_path,
        f"--namespace={prefix}-*",
        "--no-webhook",
        f"--worker-defaults={defaults}",
    ):
        cluster.apply(namespace, config)
        first_revision(cluster, namespace)
        cluster.apply(namespace, worker("w1", initialMessage="hello"))
        wait_until(
            "the worker's pod",
            lambda: (
                cluster.kubectl("get", "pod", "w1", "-n", namespace, check=False).returncode == 0
            ),
            timeout=60,
        )
        pod = cluster.kubectl_json("get", "pod", "w1", "-n", namespace)
        spec = pod["spec"]
        [container] = spec["containers"]
        assert container["image"] == "registry.example.com/agentworkers:0.1.0"
        # (The API server fills in a memory request equal to its limit.)
        assert container["resources"]["requests"]["cpu"] == "100m"
        assert container["resources"]["limits"] == {"memory": "256Mi"}
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["runtimeClassName"] == f"{prefix}-gvisor"
        assert spec["priorityClassName"] == f"{prefix}-agents"
        assert spec["priority"] == 1000  # the API server resolved our PriorityClass
        assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
        assert {"key": "agents", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        assert spec["affinity"] == config["spec"]["worker"]["affinity"]
        account = cluster.kubectl_json("get", "sa", "worker-w1", "-n", namespace)
        assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "a@p.iam"}
        # The API server filled in no image: the agent follows the install's.
        stored = cluster.kubectl_json("get", "agentconfig", "planner", "-n", namespace)
        assert "image" not in stored["spec"]["worker"]
        # What explain shows a user: each knob, and who set it.
        wait_until(
            "the run to record its pod",
            lambda: Client(cluster.api, namespace).get("w1").status.pod is not None,
        )
        shown = {f.field: f for f in Client(cluster.api, namespace).explain("w1").pod}
        assert (shown["pod.image"].value, shown["pod.image"].layer) == (
            "registry.example.com/agentworkers:0.1.0",
            "install",
        )
        assert shown["pod.runtimeClassName"].layer == "install"
        assert (shown["pod.nodeSelector"].value, shown["pod.nodeSelector"].layer) == (
            {"kubernetes.io/arch": "amd64"},
            "AgentConfig/planner",
        )
