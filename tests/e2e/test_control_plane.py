"""The control plane the other tests stand on is a real one.

Each test checks a behaviour a mock API would not have: CEL validation in the API
server, garbage collection in the controller manager, scheduling and pod phases
(kube-scheduler and kwok), Pod Security admission, authentication and RBAC.
"""

from __future__ import annotations

import ipaddress
import json
import uuid

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from localcluster import node_manifest
from tests.e2e.support import Cluster, is_local, wait_until

PAUSE = "registry.k8s.io/pause:3.10"


def pod(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": PAUSE, **spec.pop("container", {})}],
            **spec,
        },
    }


def test_server_reports_a_stamped_version(cluster: Cluster) -> None:
    version = kubernetes.client.VersionApi(cluster.api).get_code()
    assert version.major == "1"
    assert version.git_version.startswith("v1."), version.git_version
    assert "master" not in version.git_version and not version.git_version.startswith("v0.0.0")


def test_cel_rule_refuses_a_violating_object(cluster: Cluster) -> None:
    group = f"cel{uuid.uuid4().hex[:6]}.test.agentworkers.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "replicas": {"type": "integer"},
                                        "maxReplicas": {"type": "integer"},
                                    },
                                    "x-kubernetes-validations": [
                                        {
                                            "rule": "self.replicas <= self.maxReplicas",
                                            "message": "replicas must not exceed maxReplicas",
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(crd))
    try:
        cluster.kubectl("wait", "--for=condition=Established", f"crd/widgets.{group}")

        def widget(name: str, replicas: int) -> str:
            return json.dumps(
                {
                    "apiVersion": f"{group}/v1",
                    "kind": "Widget",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"replicas": replicas, "maxReplicas": 3},
                }
            )

        cluster.kubectl("apply", "-f", "-", stdin=widget("fits", 3))
        refused = cluster.kubectl("apply", "-f", "-", stdin=widget("too-many", 4), check=False)
        assert refused.returncode != 0
        assert "replicas must not exceed maxReplicas" in refused.stderr
        assert "too-many" not in cluster.kubectl("get", f"widgets.{group}", "-n", "default").stdout
    finally:
        cluster.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


def test_pod_is_scheduled_to_a_kwok_node_and_runs_on_loopback(
    cluster: Cluster, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    core.create_namespaced_pod(namespace, pod("runner"))

    def running() -> kubernetes.client.V1Pod | None:
        p = core.read_namespaced_pod("runner", namespace)
        return p if p.status.phase == "Running" else None

    ran = wait_until("the pod to reach Running", running)
    node = core.read_node(ran.spec.node_name)
    assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
    # Network safety: every address the API server could dial is on loopback.
    addresses = [a.address for a in node.status.addresses if a.type == "InternalIP"]
    assert addresses and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    assert is_local(ran.status.pod_ip), ran.status.pod_ip


def test_a_fake_node_keeps_its_addresses_through_not_ready_spells(cluster: Cluster) -> None:
    """The node controller marks a node not Ready while the API server or etcd restarts
    (the fault suite), and kwok then runs its node-initialize stage again. A node registered
    without addresses lost them all on one such spell and got one back on the next: pod
    logs and the tests that read them failed in between."""
    core = kubernetes.client.CoreV1Api(cluster.api)
    body = node_manifest(90 + uuid.uuid4().int % 10)  # beside the cluster's own nodes
    name = body["metadata"]["name"]  # type: ignore[index]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))
    try:

        def ready() -> list[tuple[str, str]] | None:
            node = core.read_node(name)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            addresses = [(a.type, a.address) for a in node.status.addresses or []]
            return addresses if conditions.get("Ready") == "True" else None

        for _ in range(3):
            assert sorted(wait_until("the node to be Ready", ready)) == [
                ("Hostname", name),
                ("InternalIP", "127.0.0.1"),
            ]
            # As the node controller marks it; kwok makes it Ready again (next round).
            core.patch_node_status(
                name,
                {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "T"}]}},
            )
    finally:
        core.delete_node(name)


def test_garbage_collector_removes_a_pod_whose_owner_is_deleted(
    cluster: Cluster, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    owned = pod("owned")
    owned["metadata"] = {
        "name": "owned",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
        ],
    }
    core.create_namespaced_pod(namespace, owned)
    core.delete_namespaced_config_map("owner", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("owned", namespace)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until("the garbage collector to delete the owned pod", gone)


def test_pod_security_restricted_refuses_a_privileged_pod(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    privileged = pod("privileged", container={"securityContext": {"privileged": True}})
    refused = cluster.apply(namespace, privileged, check=False)
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted' in refused.stderr
    assert "privileged" in refused.stderr


def test_rbac_refuses_a_service_account_its_role_does_not_cover(
    cluster: Cluster, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(cluster.api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmap-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    subject = f"system:serviceaccount:{namespace}:reader"
    assert (
        cluster.kubectl(
            "auth", "can-i", "list", "configmaps", "-n", namespace, "--as", subject
        ).stdout.strip()
        == "yes"
    )
    denied = cluster.kubectl(
        "auth", "can-i", "list", "secrets", "-n", namespace, "--as", subject, check=False
    )
    assert denied.stdout.strip() == "no"

    # And for real: the account's own token, issued by the API server, is refused.
    token = cluster.kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
    config = kubernetes.client.Configuration()
    base = cluster.api.configuration
    config.host, config.ssl_ca_cert = base.host, base.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token}"}
    with kubernetes.client.ApiClient(config) as as_reader:
        reader = kubernetes.client.CoreV1Api(as_reader)
        assert reader.list_namespaced_config_map(namespace).items is not None
        with pytest.raises(ApiException) as refused:
            reader.list_namespaced_secret(namespace)
        assert refused.value.status == 403
        message = json.loads(refused.value.body)["message"]
        assert f'User "{subject}" cannot list resource "secrets"' in message
