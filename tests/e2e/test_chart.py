"""The Helm chart on a real API server: its manifests are accepted (server-side dry-run,
then for real), and RBAC lets the operator do its job and a worker nothing but its own.

The operator's Deployment does not run a container here (kwok plays the nodes); every
other object must be accepted and behave. Cluster-scoped objects get names of this test's
own (fullnameOverride) and are deleted at the end. Kinds whose API the cluster does not
serve (cert-manager's, prometheus-operator's ServiceMonitor) are left out of the apply;
the unit tests check them as rendered.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.support import Cluster, Operator, wait_until
from tests.unit.chart.helm import (
    CHART,
    GITOPS_DIR,
    helm,
    require_helm,
    value_args,
)
from tests.unit.chart.test_dashboard import DASHBOARD, PROCESS, SUFFIXES, expressions, metric_names

pytestmark = pytest.mark.timeout(1800)  # a cold helm build takes minutes


@pytest.fixture(scope="module", autouse=True)
def _helm() -> None:
    require_helm()


class Release:
    """The chart rendered for one test namespace, applied with kubectl as a GitOps tool would."""

    def __init__(self, cluster: Cluster, namespace: str, *value_files: str, **sets: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        # Unique per run, short enough for every suffix the chart adds.
        self.fullname = f"aw-{namespace.split('-', maxsplit=1)[0]}-{namespace[-6:]}"
        args = ["template", self.fullname, str(CHART), "--namespace", namespace]
        for name in value_files:
            args += value_args(name)
        args += value_args(None, {"fullnameOverride": self.fullname, **sets})
        rendered = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
        served = set(cluster.kubectl("api-versions").stdout.split())
        self.skipped = [d for d in rendered if d["apiVersion"] not in served]
        self.objects = [d for d in rendered if d not in self.skipped]

    @property
    def operator_account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    def kinds(self) -> list[str]:
        return sorted(o["kind"] for o in self.objects)

    def _apply(self, objects: list[dict[str, Any]], *extra: str) -> str:
        """kubectl apply; returns what it printed on stderr (warnings)."""
        if not objects:
            return ""
        return self.cluster.kubectl(
            "apply",
            "--server-side",
            "--field-manager=agentworkers-chart-e2e",
            *extra,
            "-f",
            "-",
            stdin="\n---\n".join(json.dumps(o) for o in objects),
        ).stderr

    def apply(self) -> str:
        """Everything: server-side dry-run, then for real."""
        warnings = self._apply(self.objects, "--dry-run=server")
        return warnings + self._apply(self.objects)

    def cleanup(self) -> None:
        """Cluster-scoped objects go; the namespace fixture takes the rest."""
        for obj in self.objects:
            meta = obj["metadata"]
            if "namespace" in meta:
                continue
            self.cluster.kubectl(
                "delete",
                obj["kind"].lower() + "." + obj["apiVersion"].split("/")[0]
                if "/" in obj["apiVersion"]
                else obj["kind"].lower(),
                meta["name"],
                "--ignore-not-found",
                "--wait=false",
                check=False,
            )

    def can(self, who: str, *args: str) -> bool:
        result = self.cluster.kubectl("auth", "can-i", *args, f"--as={who}", check=False)
        answer = result.stdout.strip()
        assert answer in ("yes", "no"), result.stderr
        return answer == "yes"


@pytest.fixture
def release_factory(cluster: Cluster) -> Iterator[Any]:
    made: list[Release] = []

    def make(namespace: str, *value_files: str, **sets: str) -> Release:
        release = Release(cluster, namespace, *value_files, **sets)
        made.append(release)
        return release

    yield make
    for release in made:
        release.cleanup()


def test_default_install_is_accepted_and_least_privilege(
    cluster: Cluster, namespace: str, release_factory: Any
) -> None:
    # Pod Security "restricted", enforced: the operator's pods must pass it to exist at all.
    cluster.kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )
    release = release_factory(namespace)
    warnings = release.apply()
    assert "PodSecurity" not in warnings, warnings
    assert not release.skipped
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"} <= set(
        release.kinds()
    )
    deployment = cluster.kubectl_json("get", "deployment", release.fullname, "-n", namespace)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == release.fullname
    # The ReplicaSet controller made the pod, so admission (Pod Security included) let it in.
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    pods = wait_until(
        "the operator's pod to be admitted",
        lambda: cluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"],
        timeout=60,
    )
    assert pods[0]["spec"]["securityContext"]["runAsNonRoot"] is True

    op = release.operator_account
    other = "default"
    # Its job, in any namespace (cluster-wide install).
    for ns in (namespace, other):
        assert release.can(op, "create", "pods", "-n", ns)
        assert release.can(op, "delete", "pods", "-n", ns)
        assert release.can(op, "patch", "workers.agentworkers.io", "--subresource=status", "-n", ns)
        assert release.can(op, "create", "agentconfigrevisions.agentworkers.io", "-n", ns)
        assert release.can(op, "watch", "agentconfigs.agentworkers.io", "-n", ns)
        assert release.can(op, "create", "events", "-n", ns)
        assert release.can(op, "create", "serviceaccounts", "-n", ns)
    assert release.can(op, "patch", "validatingwebhookconfigurations.admissionregistration.k8s.io")
    assert release.can(op, "list", "customresourcedefinitions.apiextensions.k8s.io")
    # Nothing else.
    assert not release.can(op, "get", "secrets", "--all-namespaces")
    assert not release.can(op, "list", "secrets", "-n", namespace)
    assert not release.can(op, "delete", "namespaces")
    # No mutating webhook, so no configuration for one (each uninstall left it behind).
    assert not release.can(
        op, "create", "mutatingwebhookconfigurations.admissionregistration.k8s.io"
    )
    assert not release.can(op, "get", "configmaps", "-n", namespace)
    assert not release.can(op, "patch", "agentconfigrevisions.agentworkers.io", "-n", namespace)
    assert not release.can(op, "create", "clusterroles.rbac.authorization.k8s.io")
    assert not release.can(op, "create", "pods", "--subresource=exec", "-n", namespace)


def test_the_operator_grants_a_worker_only_its_own_worker(
    cluster: Cluster, namespace: str, release_factory: Any
) -> None:
    """The operator's account creates a worker's ServiceAccount, Role and RoleBinding (RBAC
    refuses to let anyone grant what it does not hold), and that account can do nothing
    but read and report on its own Worker and spawn and manage its children."""
    access = pytest.importorskip("agentworkers.core.access")
    release = release_factory(namespace)
    release.apply()
    worker = f"planner-{uuid.uuid4().hex[:4]}"
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": worker, "namespace": namespace, "uid": str(uuid.uuid4())},
    }
    objects = access.access_objects(body, "planner", [])
    for obj in objects:
        # No real Worker owns them here: the garbage collector would remove them at once.
        obj["metadata"].pop("ownerReferences", None)
    created = cluster.kubectl(
        "create",
        f"--as={release.operator_account}",
        "-f",
        "-",
        stdin="\n---\n".join(json.dumps(o) for o in objects),
        check=False,
    )
    assert created.returncode == 0, created.stderr
    # ... and keeps its Role in step with its children, as it binds them.
    rules = access.role_rules(worker, "planner", [f"{worker}-child"])
    cluster.kubectl(
        "patch",
        "role",
        access.account_name(worker),
        "-n",
        namespace,
        "--type=merge",
        f"--as={release.operator_account}",
        "-p",
        json.dumps({"rules": rules}),
    )

    me = f"system:serviceaccount:{namespace}:{access.account_name(worker)}"
    wait_until(
        "the worker's Role to be in force",
        lambda: release.can(me, "get", f"workers.agentworkers.io/{worker}", "-n", namespace),
        timeout=30,
    )
    assert release.can(me, "watch", f"workers.agentworkers.io/{worker}", "-n", namespace)
    assert release.can(
        me, "patch", f"workers.agentworkers.io/{worker}", "--subresource=status", "-n", namespace
    )
    assert release.can(me, "create", "workers.agentworkers.io", "-n", namespace)
    assert release.can(me, "delete", f"workers.agentworkers.io/{worker}-child", "-n", namespace)
    assert release.can(me, "get", "agentconfigs.agentworkers.io/planner", "-n", namespace)
    # Not anyone else's Worker, not its status, not the namespace's pods or secrets.
    assert not release.can(me, "get", "workers.agentworkers.io/someone-else", "-n", namespace)
    assert not release.can(
        me, "patch", "workers.agentworkers.io/someone-else", "--subresource=status", "-n", namespace
    )
    assert not release.can(
        me,
        "patch",
        f"workers.agentworkers.io/{worker}-child",
        "--subresource=status",
        "-n",
        namespace,
    )
    assert not release.can(me, "list", "workers.agentworkers.io", "-n", namespace)
    assert not release.can(me, "delete", "workers.agentworkers.io", "-n", namespace)
    assert not release.can(me, "list", "pods", "-n", namespace)
    assert not release.can(me, "get", "secrets", "-n", namespace)
    assert not release.can(me, "get", "agentconfigs.agentworkers.io/other-agent", "-n", namespace)
    assert not release.can(me, "create", "pods", "-n", namespace)
    assert not release.can(me, "get", f"workers.agentworkers.io/{worker}", "-n", "default")


def test_namespaced_install_is_confined_to_its_namespaces(
    cluster: Cluster, namespace: str, release_factory: Any
) -> None:
    release = release_factory(namespace, watchNamespaces=f"{{{namespace}}}")
    release.apply()
    assert release.kinds().count("RoleBinding") == 1
    deployment = cluster.kubectl_json("get", "deployment", release.fullname, "-n", namespace)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={namespace}" in args
    op = release.operator_account
    assert release.can(op, "create", "pods", "-n", namespace)
    assert release.can(
        op, "patch", "workers.agentworkers.io", "--subresource=status", "-n", namespace
    )
    assert not release.can(op, "create", "pods", "-n", "default")
    assert not release.can(op, "list", "workers.agentworkers.io", "--all-namespaces")
    assert not release.can(op, "get", "secrets", "-n", namespace)


def test_everything_on_is_accepted(cluster: Cluster, namespace: str, release_factory: Any) -> None:
    """Active/standby (3 replicas), admission in its own Deployment (2 replicas), cert-manager, the
    workers' NetworkPolicy, ServiceMonitor and dashboard, namespaced: what the cluster serves
    is applied, the rest is named."""
    release = release_factory(
        namespace,
        "standby",
        "admission",
        "networkpolicy",
        "servicemonitor",
        watchNamespaces=f"{{{namespace}}}",
    )
    release.apply()
    kinds = release.kinds()
    assert {"Role", "NetworkPolicy", "PodDisruptionBudget", "ConfigMap"} <= set(kinds)
    skipped = {o["kind"] for o in release.skipped}
    assert skipped <= {"Certificate", "Issuer", "ServiceMonitor"}
    # The replicas take turns on a Lease of the release's name, in its namespace only.
    op = release.operator_account
    lease = f"leases.coordination.k8s.io/{release.fullname}-shard-0"
    for verb in ("get", "create", "patch"):
        assert release.can(op, verb, lease, "-n", namespace)
    assert not release.can(op, "patch", lease, "-n", "default")
    policy = cluster.kubectl_json(
        "get", "networkpolicy", f"{release.fullname}-workers", "-n", namespace
    )
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["key"] == "agentworkers.io/worker"
    deployment = cluster.kubectl_json("get", "deployment", release.fullname, "-n", namespace)
    assert deployment["spec"]["replicas"] == 3
    admission = cluster.kubectl_json(
        "get", "deployment", f"{release.fullname}-admission", "-n", namespace
    )
    assert admission["spec"]["replicas"] == 2
    webhook = cluster.kubectl_json("get", "service", f"{release.fullname}-webhook", "-n", namespace)
    assert webhook["spec"]["selector"]["app.kubernetes.io/component"] == "admission"


def test_gitops_overlays_are_accepted(cluster: Cluster, namespace: str) -> None:
    """What examples/gitops renders passes the CRDs' schemas (server-side dry-run, in this
    test's namespace instead of the overlay's)."""
    for overlay in ("staging", "production"):
        rendered = cluster.kubectl("kustomize", str(GITOPS_DIR / "overlays" / overlay)).stdout
        objects = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "Namespace"]
        assert objects
        for obj in objects:
            obj["metadata"]["namespace"] = namespace
        cluster.kubectl(
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            "-",
            stdin="\n---\n".join(json.dumps(o) for o in objects),
        )


def test_dashboard_queries_what_the_running_operator_exports(operator: Operator) -> None:
    """Scrape the operator's metrics endpoint: every metric the dashboard asks for is there."""
    text = operator.metrics()
    exported: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, type_ = line.split(maxsplit=3)
            exported |= {name + s for s in SUFFIXES.get(type_, ("",))}
            exported.add(name)
        elif line and not line.startswith("#"):
            exported.add(line.split("{")[0].split()[0])
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = {n for e in expressions(dashboard) for n in metric_names(e)}
    assert wanted, "no metrics on the dashboard"
    missing = sorted(wanted - exported)
    assert not missing, f"the dashboard asks for metrics the operator does not export: {missing}"
    assert exported >= PROCESS


def test_a_sharded_install_is_accepted(
    cluster: Cluster, namespace: str, release_factory: Any
) -> None:
    """shards=3: a StatefulSet of three active controllers, allowed Leases in their own
    namespace and nothing more on them."""
    release = release_factory(namespace, "shards", watchNamespaces=f"{{{namespace}}}")
    release.apply()
    sharded = cluster.kubectl_json("get", "statefulset", release.fullname, "-n", namespace)
    assert sharded["spec"]["replicas"] == 3
    headless = cluster.kubectl_json(
        "get", "service", sharded["spec"]["serviceName"], "-n", namespace
    )
    assert headless["spec"]["clusterIP"] == "None"
    op = release.operator_account
    for verb in ("get", "create", "patch"):
        assert release.can(op, verb, "leases.coordination.k8s.io", "-n", namespace)
    assert not release.can(op, "delete", "leases.coordination.k8s.io", "-n", namespace)
    assert not release.can(op, "create", "leases.coordination.k8s.io", "-n", "default")
