"""The Helm chart: lints clean, renders every documented value set, and what it renders is
what a platform team expects (least-privilege RBAC, restricted pods, probes, TLS, leases).

Pure checks on `helm template` output; tests/e2e/test_chart.py applies it to a real API server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentworkers.api.names import WORKER_LABEL
from agentworkers.cli import main as cli
from agentworkers.controller.admission.tls import RENEW_BEFORE
from tests.unit.chart.helm import (
    CHART,
    REPO,
    VALUE_SETS,
    find,
    helm,
    one,
    render,
    require_helm,
    value_args,
)

# A cold helm build takes minutes on two cores; later runs find it cached.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

FULLNAME = "agentworkers"
NAMESPACE = "agentworkers-system"
RBAC_KINDS = ("Role", "ClusterRole")


@pytest.fixture(scope="module", autouse=True)
def _helm() -> None:
    require_helm()


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(name) for name in VALUE_SETS}


def deployment(objects: list[dict[str, Any]], component: str = "operator") -> dict[str, Any]:
    """The controller's Deployment (a StatefulSet when sharded), or the admission one."""
    workloads = find(objects, "Deployment") + find(objects, "StatefulSet")
    found = [
        d
        for d in workloads
        if d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
    ]
    assert len(found) == 1, [d["metadata"]["name"] for d in workloads]
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    containers = deployment(objects)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return dict(containers[0])


def args_of(objects: list[dict[str, Any]]) -> list[str]:
    return list(container(objects)["args"])


def rules_of(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return list(one(objects, "ClusterRole", name)["rules"])


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        and not r.get("resourceNames")
        for r in rules
    )


# --- every value set ----------------------------------------------------------------


def test_the_documented_value_sets_are_there() -> None:
    assert {"default", "namespaced", "certmanager", "standby", "networkpolicy", "kind"} <= set(
        VALUE_SETS
    )
    assert "servicemonitor" in VALUE_SETS


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lints_clean(value_set: str) -> None:
    result = helm("lint", "--strict", str(CHART), *value_args(value_set))
    assert "0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_no_wildcards_in_any_role(
    rendered: dict[str, list[dict[str, Any]]], value_set: str
) -> None:
    roles = [o for o in rendered[value_set] if o["kind"] in RBAC_KINDS]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
            assert not any("*" in r for r in rule.get("resources", [])), rule
            # No write access to secrets, ever; no escalation through RBAC verbs.
            assert "secrets" not in rule.get("resources", []), rule
            assert not {"escalate", "impersonate"} & set(rule["verbs"]), rule


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_operator_pod_passes_pod_security_restricted(
    rendered: dict[str, list[dict[str, Any]]], value_set: str
) -> None:
    pod = deployment(rendered[value_set])["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert not sc["capabilities"].get("add")
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not sc.get("privileged")
    for volume in pod["volumes"]:
        # "restricted" allows only these volume types.
        assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected"}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_probes_call_the_operators_own_endpoints(
    rendered: dict[str, list[dict[str, Any]]], value_set: str
) -> None:
    """Alive: kopf's liveness endpoint. Ready: a pod that answers admission once its store
    is filled (the admission server's /readyz), any other pod once kopf is up."""
    for made in find(rendered[value_set], "Deployment") + find(rendered[value_set], "StatefulSet"):
        [c] = made["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        liveness = next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--liveness="))
        assert liveness == f"http://0.0.0.0:{ports['health']}/healthz"
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        if "webhook" in ports:
            ready = {"path": "/readyz", "port": "webhook", "scheme": "HTTPS"}
        else:
            ready = {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == ready
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_operator_accepts_its_arguments(
    rendered: dict[str, list[dict[str, Any]]], value_set: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Deployment's arguments parse with the real CLI: no flag the operator lacks."""
    seen: list[argparse.Namespace] = []

    def fake_operator(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(cli, "_operator", fake_operator)
    for made in find(rendered[value_set], "Deployment"):
        [c] = made["spec"]["template"]["spec"]["containers"]
        assert c["image"] == "ghcr.io/agentworkers/agentworkers:0.1.0"
        assert cli.main(c["args"]) == 0
        parsed = seen[-1]
        if any(a.startswith("--webhook-port") for a in c["args"]):
            assert parsed.webhook_addr == "0.0.0.0"
            assert str(parsed.tls_dir) == next(
                m["mountPath"] for m in c["volumeMounts"] if m["name"] == "webhook-tls"
            )


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_objects_are_named_and_labelled(
    rendered: dict[str, list[dict[str, Any]]], value_set: str
) -> None:
    for obj in rendered[value_set]:
        meta = obj["metadata"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", meta["name"]), meta["name"]
        assert len(meta["name"]) <= 63, meta["name"]
        assert meta["labels"]["app.kubernetes.io/instance"] == "agentworkers"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_selectors_match(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    selector = deployment(objects)["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    for service in find(objects, "Service"):
        assert service["spec"]["selector"].items() <= pod_labels.items()
        container_ports = {p["name"] for p in container(objects)["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports


# --- RBAC ---------------------------------------------------------------------------

# What the operator does through the API (storage.py, kopf), resource by resource.
OPERATOR_NEEDS = [
    ("agentworkers.io", "agentconfigs", "get list watch patch update"),
    ("agentworkers.io", "virtualagentprofiles", "get list watch patch update"),
    ("agentworkers.io", "modelproviders", "get list watch"),
    ("agentworkers.io", "tokenquotas", "get list watch"),
    ("agentworkers.io", "tokenquotas/status", "get patch update"),
    ("agentworkers.io", "workers", "get list watch patch update"),
    ("agentworkers.io", "agentconfigs/status", "get patch update"),
    ("agentworkers.io", "workers/status", "get patch update"),
    # blockOwnerDeletion on what it owns (OwnerReferencesPermissionEnforcement).
    ("agentworkers.io", "workers/finalizers", "update"),
    ("agentworkers.io", "agentconfigs/finalizers", "update"),
    ("agentworkers.io", "agentconfigrevisions", "get list watch create delete"),
    ("", "pods", "get list watch create delete patch"),
    ("kueue.x-k8s.io", "workloads", "get list watch"),
    ("", "events", "create patch"),
    ("events.k8s.io", "events", "create patch"),
    # patch: a warm pod's account is handed to its pod (ownerReferences); list: an agent's
    # pooled accounts, and whether a RoleBinding still names one.
    ("", "serviceaccounts", "get list create delete patch"),
    ("rbac.authorization.k8s.io", "roles", "get create patch delete"),
    ("rbac.authorization.k8s.io", "rolebindings", "get list create delete"),
]
OPERATOR_CLUSTER_NEEDS = [
    ("", "namespaces", "list watch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list watch"),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get list watch create patch",
    ),
]


def test_operator_rbac_covers_what_it_does(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    namespaced = rules_of(objects, f"{FULLNAME}-namespaced")
    cluster = rules_of(objects, FULLNAME)
    for group, resource, verbs in OPERATOR_NEEDS:
        for verb in verbs.split():
            assert allows(namespaced, group, resource, verb), (group, resource, verb)
    for group, resource, verbs in OPERATOR_CLUSTER_NEEDS:
        for verb in verbs.split():
            assert allows(cluster, group, resource, verb), (group, resource, verb)
    # Nothing it does not need.
    assert not any(
        allows(namespaced + cluster, "", r, v)
        for r in ("secrets", "configmaps", "nodes")
        for v in ("get", "list", "create", "delete")
    )
    assert not allows(namespaced + cluster, "", "namespaces", "delete")
    assert not allows(namespaced + cluster, "", "namespaces", "get")


def test_operator_can_grant_a_worker_its_role(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """RBAC lets no one grant what it does not hold: the worker Role must be within the
    operator's own namespaced permissions (the e2e test proves it on a real API server)."""
    namespaced = rules_of(rendered["default"], f"{FULLNAME}-namespaced")
    role = one(worker_role_objects(), "Role")
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert allows(namespaced, group, resource, verb), (resource, verb)


def test_cluster_wide_binding_by_default(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    assert not find(objects, "RoleBinding")
    bindings = {b["roleRef"]["name"]: b for b in find(objects, "ClusterRoleBinding")}
    assert set(bindings) == {FULLNAME, f"{FULLNAME}-namespaced"}
    for binding in bindings.values():
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
        ]
    assert not any(a.startswith("--namespace") for a in args_of(objects))


def test_namespaced_binds_per_namespace(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["namespaced"]
    bindings = find(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert {b["roleRef"]["name"] for b in bindings} == {f"{FULLNAME}-namespaced"}
    assert [b["roleRef"]["name"] for b in find(objects, "ClusterRoleBinding")] == [FULLNAME]
    assert [a for a in args_of(objects) if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]


def test_globs_bind_cluster_wide(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["globs"]
    assert not find(objects, "RoleBinding")
    assert len(find(objects, "ClusterRoleBinding")) == 2
    assert "--namespace=team-*" in args_of(objects)


def worker_role_objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((CHART / "files" / "worker-role.yaml").read_text()) if d]


def test_the_worker_role_in_the_chart_is_what_the_operator_makes() -> None:
    access = pytest.importorskip("agentworkers.core.access")
    shown = worker_role_objects()
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "planner-1", "namespace": "team-a", "uid": "<the Worker's uid>"},
    }
    made = access.access_objects(body, "planner", [])
    made[1]["rules"] = access.role_rules(
        "planner-1", "planner", ["planner-1-child-a", "planner-1-child-b"]
    )
    assert json.loads(json.dumps(made)) == shown, (
        "charts/agentworkers/files/worker-role.yaml drifted from agentworkers.core.access"
    )
    rules = one(shown, "Role")["rules"]
    # No pods, no secrets, nothing cluster-wide.
    assert {r for rule in rules for r in rule["resources"]} <= {
        "workers",
        "workers/status",
        "agentconfigs",
        "agentconfigrevisions",
    }
    own = [r for r in rules if r["resources"] == ["workers/status"]]
    assert own and all(r["resourceNames"] == ["planner-1"] for r in own)


# --- webhook and TLS ----------------------------------------------------------------


def test_webhook_with_the_operators_own_certificate(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["default"]
    args = args_of(objects)
    service = one(objects, "Service", f"{FULLNAME}-webhook")
    assert f"--webhook-host={FULLNAME}-webhook.{NAMESPACE}.svc" in args
    assert "--webhook-addr=0.0.0.0" in args
    assert "--webhook-name=agentworkers.io" in args
    assert service["spec"]["ports"][0]["port"] == 9443
    assert "--webhook-port=9443" in args
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    tls = next(v for v in volumes if v["name"] == "webhook-tls")
    assert "emptyDir" in tls
    assert deployment(objects)["spec"]["strategy"]["type"] == "Recreate"
    assert not find(objects, "Certificate")


def test_kind_uses_the_loaded_image_and_the_service_reference(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["kind"]
    assert container(objects)["imagePullPolicy"] == "Never"
    assert f"--webhook-host={FULLNAME}-webhook.{NAMESPACE}.svc" in args_of(objects)


def test_webhook_by_a_pinned_cluster_ip() -> None:
    """An API server that must dial an address itself gets a pinned ClusterIP."""
    pinned = {"webhook.service.clusterIP": "10.96.200.200"}
    objects = render(None, pinned)
    service = one(objects, "Service", f"{FULLNAME}-webhook")
    assert service["spec"]["clusterIP"] == "10.96.200.200"
    assert "--webhook-host=10.96.200.200" in args_of(objects)
    cert = one(render(None, {**pinned, "webhook.certManager.enabled": "true"}), "Certificate")
    assert cert["spec"]["ipAddresses"] == ["0.0.0.0", "10.96.200.200"]
    assert "10.96.200.200" not in cert["spec"]["dnsNames"]


def test_webhook_configuration_name_is_per_release() -> None:
    objects = render(release="other")
    assert "--webhook-name=other-agentworkers.agentworkers.io" in args_of(objects)
    # The release owns it (uninstall removes it); the operator fills in its webhooks.
    [config] = find(objects, "ValidatingWebhookConfiguration")
    assert config["metadata"]["name"] == "other-agentworkers.agentworkers.io"
    assert "webhooks" not in config


def test_admission_in_a_deployment_of_its_own(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["admission"]
    controller, admission = deployment(objects), deployment(objects, "admission")
    controller_args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    admission_args = admission["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--role=controller" in controller_args
    assert not any(a.startswith("--webhook") for a in controller_args)
    assert "--role=admission" in admission_args and "--webhook-port=9443" in admission_args
    assert not any(a.startswith("--lea") for a in admission_args)  # every replica answers
    assert admission["spec"]["replicas"] == 2
    assert admission["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # The webhook's Service reaches the admission pods; metrics reach both.
    webhook = one(objects, "Service", f"{FULLNAME}-webhook")
    assert webhook["spec"]["selector"]["app.kubernetes.io/component"] == "admission"
    metrics = one(objects, "Service", f"{FULLNAME}-metrics")
    assert "app.kubernetes.io/component" not in metrics["spec"]["selector"]
    [budget] = [
        p for p in find(objects, "PodDisruptionBudget") if "admission" in p["metadata"]["name"]
    ]
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "admission"


def test_two_admission_replicas_need_one_certificate() -> None:
    with pytest.raises(AssertionError, match="one certificate for every replica"):
        render(sets={"admission.replicas": "2"})


def _hours(duration: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"([0-9.]+)(h|m|s)", duration):
        total += float(amount) * {"h": 1, "m": 1 / 60, "s": 1 / 3600}[unit]
    return total


def test_cert_manager_certificate(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["certmanager"]
    cert = one(objects, "Certificate")
    issuer = one(objects, "Issuer")
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    host = f"{FULLNAME}-webhook.{NAMESPACE}.svc"
    assert host in cert["spec"]["dnsNames"]
    assert f"--webhook-host={host}" in args_of(objects)
    # The operator keeps a certificate only if it names --webhook-addr too and has more
    # than RENEW_BEFORE left; otherwise it would write its own into a read-only Secret.
    assert "0.0.0.0" in cert["spec"]["ipAddresses"]
    renew = dt.timedelta(hours=_hours(cert["spec"]["renewBefore"]))
    assert renew > RENEW_BEFORE
    assert _hours(cert["spec"]["duration"]) > _hours(cert["spec"]["renewBefore"])
    pod = deployment(objects)["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert tls["secret"]["secretName"] == cert["spec"]["secretName"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "webhook-tls")
    assert mount["readOnly"] is True


def test_cert_manager_with_an_existing_issuer() -> None:
    objects = render(
        "certmanager",
        {
            "webhook.certManager.issuerRef.kind": "ClusterIssuer",
            "webhook.certManager.issuerRef.name": "internal-ca",
        },
    )
    assert not find(objects, "Issuer")
    assert one(objects, "Certificate")["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer",
        "name": "internal-ca",
        "group": "cert-manager.io",
    }


def test_a_tls_secret_of_your_own() -> None:
    objects = render(sets={"webhook.tls.secretName": "my-webhook-tls"})
    pod = deployment(objects)["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert tls["secret"]["secretName"] == "my-webhook-tls"
    assert not find(objects, "Certificate")


def test_minimal_has_no_webhook_and_no_metrics(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["minimal"]
    args = args_of(objects)
    assert "--no-webhook" in args and "--metrics-port=0" in args
    assert not any(a.startswith("--webhook") for a in args)
    assert not find(objects, "Service")
    assert not find(objects, "ValidatingWebhookConfiguration")
    cluster = rules_of(objects, FULLNAME)
    assert not any("admissionregistration.k8s.io" in r["apiGroups"] for r in cluster)


# --- replicas: active/standby on a Lease ----------------------------------------------

LEASE_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "patch"],
    }
]


def lease_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The Role on Leases (and its binding to the operator), in the release's namespace."""
    role = one(objects, "Role", f"{FULLNAME}-leases")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == LEASE_RULES
    binding = one(objects, "RoleBinding", f"{FULLNAME}-leases")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == FULLNAME
    return role


def test_replicas_take_turns_on_a_lease(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["standby"]
    d = deployment(objects)
    assert d["spec"]["replicas"] == 3
    assert d["spec"]["strategy"]["type"] == "RollingUpdate"
    args = args_of(objects)
    assert "--leader-elect" in args and not any(a.startswith("--shard") for a in args)
    assert f"--lease-namespace={NAMESPACE}" in args and f"--lease-name={FULLNAME}" in args
    # Its identity on the Lease: the pod's name (its hostname) and uid.
    env = {e["name"]: e for e in container(objects)["env"]}
    assert env["AGENTWORKERS_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    lease_role(objects)
    # kopf's peering is gone: none of its CRDs, objects or rights.
    assert not find(objects, "CustomResourceDefinition")
    assert not any("kopf.dev" in str(o) for o in objects)
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_namespaced_standby_keeps_its_lease_in_the_release_namespace() -> None:
    objects = render("standby", {"watchNamespaces": "{team-a,team-*}"})  # globs work too
    lease_role(objects)
    assert not allows(rules_of(objects, f"{FULLNAME}-namespaced"), "coordination.k8s.io",
                      "leases", "get")  # fmt: skip


def test_admission_apart_only_the_controller_takes_turns() -> None:
    objects = render("standby", {"admission.replicas": "2"})
    controller, admission = deployment(objects), deployment(objects, "admission")
    assert "--leader-elect" in controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" not in admission["spec"]["template"]["spec"]["containers"][0]["args"]


def test_one_replica_takes_no_lease(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    assert not any(a.startswith(("--leader-elect", "--lease")) for a in args_of(objects))
    assert not find(objects, "Role") and not find(objects, "PodDisruptionBudget")
    assert deployment(objects)["spec"]["strategy"]["type"] == "Recreate"


def test_shards_are_a_statefulset_of_active_replicas() -> None:
    objects = render(sets={"shards": "3", "webhook.tls.secretName": "my-webhook-tls"})
    assert not find(objects, "Deployment")
    [sharded] = find(objects, "StatefulSet")
    assert sharded["spec"]["replicas"] == 3
    assert sharded["spec"]["podManagementPolicy"] == "Parallel"
    # Its governing Service is headless and selects its pods.
    headless = one(objects, "Service", sharded["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    labels = sharded["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    args = sharded["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--shards=3" in args and f"--lease-namespace={NAMESPACE}" in args
    assert f"--lease-name={FULLNAME}" in args
    # The shard index comes from the pod's ordinal; every replica is active.
    assert not any(a.startswith(("--shard-index", "--leader-elect")) for a in args)
    lease_role(objects)
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"replicas": "2"}, "one certificate for every replica"),
        ({"shards": "2"}, "one certificate for every replica"),
        (
            {"replicas": "2", "shards": "2", "webhook.tls.secretName": "x"},
            "exclude each other",
        ),
    ],
)
def test_combinations_that_cannot_work_fail_with_a_reason(
    sets: dict[str, str], message: str
) -> None:
    result = helm("template", "agentworkers", str(CHART), *value_args(None, sets), check=False)
    assert result.returncode != 0
    assert message in result.stderr


# --- metrics, dashboard, network policy ----------------------------------------------


def test_metrics_service_and_service_monitor(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not find(rendered["default"], "ServiceMonitor")
    objects = rendered["servicemonitor"]
    monitor = one(objects, "ServiceMonitor")
    service = one(objects, "Service", f"{FULLNAME}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "--metrics-port=8080" in args_of(objects)
    # The webhook Service must not match the ServiceMonitor.
    webhook = one(objects, "Service", f"{FULLNAME}-webhook")
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= webhook["metadata"]["labels"].items()
    )


def test_the_operator_traces_to_the_collector_the_values_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not any(a.startswith("--otlp-endpoint") for a in args_of(render()))  # off by default
    sets = {"tracing.endpoint": "http://otel.observability:4318", "tracing.sampleRatio": "0.25"}
    args = args_of(render(sets=sets))
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(cli, "_operator", lambda parsed: seen.append(parsed) or 0)
    assert cli.main(args) == 0
    assert (seen[0].otlp_endpoint, seen[0].trace_sample_ratio) == (
        "http://otel.observability:4318",
        0.25,
    )
    refused = helm("template", "x", str(CHART), "--set", "tracing.endpoint=otel:4318", check=False)
    assert refused.returncode != 0 and "/tracing/endpoint" in refused.stderr


def test_dashboard_config_map_carries_the_dashboard(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    cm = one(rendered["servicemonitor"], "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "agentworkers.json").read_text())
    assert json.loads(cm["data"]["agentworkers.json"]) == shipped


def test_network_policy_for_worker_pods(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not find(rendered["default"], "NetworkPolicy")
    policy = one(rendered["networkpolicy"], "NetworkPolicy")
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert spec["podSelector"] == {
        "matchExpressions": [{"key": WORKER_LABEL, "operator": "Exists"}]
    }
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    assert spec["ingress"] == []
    dns, api, *endpoints = spec["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert api["to"] == [{"ipBlock": {"cidr": "172.18.0.2/32"}}]
    assert len(endpoints) == 3
    assert endpoints[0]["to"][0]["ipBlock"]["except"][0] == "10.0.0.0/8"
    assert endpoints[1]["to"][0]["podSelector"] == {"matchLabels": {"app": "vllm"}}
    assert all(rule["ports"] for rule in spec["egress"])


def test_network_policy_goes_where_the_workers_are() -> None:
    objects = render("networkpolicy", {"watchNamespaces": "{team-a,team-*}"})
    assert [p["metadata"]["namespace"] for p in find(objects, "NetworkPolicy")] == ["team-a"]
    objects = render("networkpolicy", {"networkPolicy.namespaces": "{x,y}"})
    assert [p["metadata"]["namespace"] for p in find(objects, "NetworkPolicy")] == ["x", "y"]


# --- values.schema.json -------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ("replicas: 0", "replicas"),
        ("replica: 2", "replica"),
        ("image: {repository: x, pullPolicy: Sometimes}", "pullPolicy"),
        ("webhook: {port: 443}", "port"),
        ("watchNamespaces: [Team_A]", "watchNamespaces"),
        (
            "securityContext: {allowPrivilegeEscalation: true, capabilities: {drop: [ALL]}}",
            "allowPrivilegeEscalation",
        ),
        ("podSecurityContext: {runAsNonRoot: false}", "runAsNonRoot"),
        (
            "networkPolicy: {enabled: true, endpoints: [{name: nowhere, ports: [{port: 443}]}]}",
            "endpoints",
        ),
        ("networkPolicy: {apiServer: {cidrs: [10.0.0.1]}}", "cidrs"),
        ("metrics: {serviceMonitor: {interval: soon}}", "interval"),
        ("webhook: {certManager: {issuerRef: {kind: Issuer}}}", "issuerRef"),
    ],
)
def test_bad_values_fail_at_install(values: str, field: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(values + "\n")
    result = helm("template", "agentworkers", str(CHART), "--values", str(bad), check=False)
    assert result.returncode != 0, f"accepted: {values}"
    assert "schema" in result.stderr and field in result.stderr, result.stderr


def test_every_value_is_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if not isinstance(value, dict) or "properties" not in node:
            return
        for key, child in value.items():
            if node.get("additionalProperties") is False:
                assert key in node["properties"], f"{path}{key} is not in values.schema.json"
            if key in node["properties"]:
                walk(child, node["properties"][key], f"{path}{key}.")

    walk(values, schema, "")


# --- CRDs ---------------------------------------------------------------------------


def test_chart_crds_are_the_generated_crds() -> None:
    top = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert sorted(chart) == sorted(top), "cp crds/*.yaml charts/agentworkers/crds/"
    for name, text in top.items():
        assert chart[name] == text, f"charts/agentworkers/crds/{name} differs from crds/{name}"


def test_chart_version_follows_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = (REPO / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    assert version and chart["appVersion"] == version.group(1)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_install_notes(value_set: str, tmp_path: Path) -> None:
    """`helm install --dry-run=client` (no cluster) renders the NOTES a user reads."""
    # Helm 3 wants a kubeconfig to read even when it contacts no cluster.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "none", "user": {}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    result = helm(
        "install",
        "agentworkers",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--dry-run=client",
        "--kubeconfig",
        str(kubeconfig),
        *value_args(value_set),
        check=False,
    )
    if "cluster unreachable" in result.stderr:
        pytest.skip("this helm asks a cluster even for --dry-run=client (helm 3)")
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "kubectl apply --server-side -f crds/" in notes
    assert "Watching:" in notes
    if value_set == "namespaced":
        assert "Watching:  team-a, team-b" in notes
    if value_set == "minimal":
        assert "Webhook:   off" in notes and "Metrics:" not in notes


# --- worker pods follow the install -------------------------------------------------


def worker_defaults(objects: list[dict[str, Any]]) -> Any:
    """The install's worker pod knobs, as the operator reads them (--worker-defaults)."""
    from agentworkers.cli.main import _worker_defaults  # noqa: PLC0415

    cm = one(objects, "ConfigMap", f"{FULLNAME}-worker-defaults")
    c = container(objects)
    flag = next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--worker-defaults="))
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "worker-defaults"]
    assert Path(flag).parent == Path(mount["mountPath"])
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "worker-defaults", "configMap": {"name": cm["metadata"]["name"]}} in volumes
    path = Path("/tmp") / f"worker-defaults-{uuid.uuid4().hex}.yaml"
    try:
        path.write_text(cm["data"][Path(flag).name])
        return _worker_defaults(path)
    finally:
        path.unlink()


def test_worker_pods_use_the_chart_s_image_from_a_private_registry() -> None:
    """The operator ran from a private registry while every worker pod still named the
    public image (AgentConfig spec.worker.image defaulted to it): workers failed to pull."""
    from agentworkers.api import AgentConfigSpec  # noqa: PLC0415
    from agentworkers.api.worker import WorkerSpec  # noqa: PLC0415
    from agentworkers.core.effective import resolve  # noqa: PLC0415
    from agentworkers.core.pods import build_pod  # noqa: PLC0415

    objects = render(None, {"image.repository": "registry.example.com/agentworkers"})
    assert container(objects)["image"] == "registry.example.com/agentworkers:0.1.0"
    defaults = worker_defaults(objects)
    assert defaults.image == "registry.example.com/agentworkers:0.1.0"
    # An AgentConfig that names no image (the API server fills nothing in any more).
    config = AgentConfigSpec.model_validate({"model": {"provider": "scripted", "model": "m"}})
    config = config.model_copy(update={"worker": config.worker.over(defaults)})
    body = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "Worker",
        "metadata": {"name": "w", "namespace": "team-a", "uid": "u"},
    }
    spec = WorkerSpec(agent="planner")
    pod = build_pod(body, spec, config, resolve(config, spec, None))
    assert pod["spec"]["containers"][0]["image"] == "registry.example.com/agentworkers:0.1.0"

    digest = "sha256:" + "a" * 64
    pinned = render(None, {"image.repository": "registry.example.com/aw", "image.digest": digest})
    assert worker_defaults(pinned).image == f"registry.example.com/aw@{digest}"


def test_worker_defaults_reach_the_operator_and_roll_its_pods() -> None:
    sets = {
        "workerDefaults.runtimeClassName": "gvisor",
        "workerDefaults.priorityClassName": "agents",
        "workerDefaults.imagePullSecrets[0]": "regcred",
        "workerDefaults.nodeSelector.pool": "agents",
        "workerDefaults.image": "mirror.example.com/aw:1",
    }
    objects = render(None, sets)
    defaults = worker_defaults(objects)
    assert defaults.runtime_class_name == "gvisor"
    assert defaults.priority_class_name == "agents"
    assert defaults.image_pull_secrets == ("regcred",)
    assert defaults.node_selector == {"pool": "agents"}
    assert defaults.image == "mirror.example.com/aw:1"  # its own image wins over the chart's
    annotation = "agentworkers.io/worker-defaults"
    rolled = deployment(objects)["spec"]["template"]["metadata"]["annotations"][annotation]
    plain = deployment(render(None))["spec"]["template"]["metadata"]["annotations"][annotation]
    assert rolled != plain


def test_a_misspelt_worker_default_fails_the_install() -> None:
    result = helm(
        "template",
        "agentworkers",
        str(CHART),
        *value_args(None, {"workerDefaults.nodeSelecter.pool": "x"}),
        check=False,
    )
    assert result.returncode != 0
    assert "nodeSelecter" in result.stderr


def test_the_values_schema_of_worker_defaults_is_the_model_s() -> None:
    """values.schema.json's workerDefaults is generated from agentworkers' WorkerPod."""
    from agentworkers.api.crdgen import openapi_schema, strict_json_schema  # noqa: PLC0415
    from agentworkers.api.workerpod import WorkerPod  # noqa: PLC0415

    shipped = json.loads((CHART / "values.schema.json").read_text())["properties"]
    expected = strict_json_schema(openapi_schema(WorkerPod))
    got = {k: v for k, v in shipped["workerDefaults"].items() if k != "description"}
    assert got == {k: v for k, v in expected.items() if k != "description"}, (
        "regenerate workerDefaults in charts/agentworkers/values.schema.json from WorkerPod"
    )
