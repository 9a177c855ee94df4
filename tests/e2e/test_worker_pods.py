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


@pytest.mark.usefixtures("operator")
def test_a_model_provider_defined_once_reaches_each_run_and_only_its_key_is_mounted(
    cluster: Cluster, namespace: str
) -> None:
    provider = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "ModelProvider",
        "metadata": {"name": "vllm"},
        "spec": {
            "api": "scripted",
            "endpoint": "http://vllm.models:8000/v1",
            "apiKeySecret": "vllm-key",
            "defaultModel": "llama-3-70b",
        },
    }
    config = copy.deepcopy(CONFIG)
    model = config["spec"]["model"]
    for inline in ("provider", "model"):
        model.pop(inline)
    # Named once: an inline endpoint beside the reference is refused at admission.
    both = copy.deepcopy(config)
    both["spec"]["model"].update(providerRef="vllm", baseURL="http://elsewhere/v1")
    refused = cluster.apply(namespace, both, check=False)
    assert refused.returncode != 0
    assert "spec.model: Value error, providerRef replaces baseURL" in refused.stderr
    model["providerRef"] = "vllm"
    cluster.apply(namespace, provider, config)
    first_revision(cluster, namespace)
    assert cluster.kubectl("get", "mp", "vllm", "-n", namespace).returncode == 0  # short name

    def effective(name: str) -> dict[str, object]:
        pod = cluster.kubectl_json("get", "pod", name, "-n", namespace)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        secrets = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
        return {**json.loads(env["AGENTWORKERS_EFFECTIVE_CONFIG"]), "mounted": secrets}

    def pod_of(name: str) -> bool:
        return cluster.kubectl("get", "pod", name, "-n", namespace, check=False).returncode == 0

    cluster.apply(namespace, worker("first", initialMessage="hello"))
    wait_until("first's pod", lambda: pod_of("first"), timeout=60)
    seen = effective("first")
    assert (seen["provider"], seen["baseURL"], seen["model"]) == (
        "scripted",
        "http://vllm.models:8000/v1",
        "llama-3-70b",
    )
    assert seen["mounted"] == ["vllm-key"]

    # The endpoint moves: one edit of the provider; the next run talks to the new one.
    provider["spec"]["endpoint"] = "http://vllm.gpu:8000/v1"
    cluster.apply(namespace, provider)
    cluster.apply(namespace, worker("second", initialMessage="hello"))
    wait_until("second's pod", lambda: pod_of("second"), timeout=60)
    assert effective("second")["baseURL"] == "http://vllm.gpu:8000/v1"
    # Before a run starts, explain works it out the same way.
    cluster.apply(namespace, worker("held", initialMessage="hello", suspend=True))
    explained = Client(cluster.api, namespace).explain("held")
    assert "with ModelProvider/vllm" in explained.config
    fields = {f.field: f.value for f in explained.fields}
    assert (fields["model"], fields["baseURL"]) == ("llama-3-70b", "http://vllm.gpu:8000/v1")
