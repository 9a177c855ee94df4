"""The chart, installed with `helm install` and running: the operator as its Deployment's
pod (run by hack/podrunner.py as a local process with the pod's own service account, env,
args and volumes), the webhook reached by the API server through its Service. Then what a
user does first: profiles and a config applied, a spawn with a profile, a kill with its
Event, a widening profile refused.

Its own namespaces (outside the session operator's pattern): `<prefix>-system` for the
release, `<prefix>-team` for the agents, and a pod runner for both.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest

from agentworkers.api.worker import WorkerSpec
from agentworkers.client import Client
from tests.e2e.support import (
    CONFIG,
    PROFILES,
    Cluster,
    first_revision,
    pod_runner,
    wait_until,
    worker,
)
from tests.unit.chart.helm import CHART, HelmUnavailable, helm, helm_binary

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Install:
    cluster: Cluster
    release: str
    system: str  # the release's namespace
    team: str  # where the agents live

    @property
    def webhook(self) -> str:
        return f"{self.release}-agentworkers.agentworkers.io"

    def helm(self, *args: str, check: bool = True) -> str:
        result = helm(*args, f"--kubeconfig={self.cluster.kubeconfig}", check=check)
        return result.stdout + result.stderr

    def operator_pods(self) -> list[dict[str, object]]:
        found = self.cluster.kubectl_json(
            "get", "pods", "-n", self.system, "-l", "app.kubernetes.io/component=operator"
        )
        return list(found["items"])

    def answering(self) -> bool:
        """The operator registered its webhook (by Service, with its CA) and answers it."""
        found = self.cluster.kubectl(
            "get", "validatingwebhookconfiguration", self.webhook, "-o", "json", check=False
        )
        if found.returncode != 0:
            return False
        hooks = json.loads(found.stdout).get("webhooks") or []
        return bool(hooks) and all(
            h["clientConfig"].get("service", {}).get("namespace") == self.system
            and h["clientConfig"].get("caBundle")
            for h in hooks
        )


@pytest.fixture
def install(cluster: Cluster, tmp_path: Path) -> Iterator[Install]:
    try:
        helm_binary()
    except HelmUnavailable as e:
        pytest.skip(str(e))
    prefix = f"ic{uuid.uuid4().hex[:4]}"
    made = Install(cluster, prefix, f"{prefix}-system", f"{prefix}-team")
    core = kubernetes.client.CoreV1Api(cluster.api)
    for namespace in (made.system, made.team):
        core.create_namespace({"metadata": {"name": namespace}})
    wait_until(
        "the namespaces' default service accounts",
        lambda: all(
            core.list_namespaced_service_account(n).items for n in (made.system, made.team)
        ),
        timeout=30,
    )
    with pod_runner(cluster, prefix, tmp_path / "pods"):
        try:
            yield made
        finally:
            made.helm("uninstall", made.release, "-n", made.system, "--wait", check=False)
            for namespace in (made.team, made.system):
                with contextlib.suppress(kubernetes.client.ApiException):
                    core.delete_namespace(namespace)


def helm_install(install: Install, *extra: str) -> str:
    return install.helm(
        "install",
        install.release,
        str(CHART),
        "-n",
        install.system,
        "--values",
        str(CHART / "ci" / "local-values.yaml"),
        "--set",
        f"watchNamespaces={{{install.team}}}",
        *extra,
    )


def test_the_chart_runs_in_cluster_and_serves_a_user_s_first_steps(install: Install) -> None:
    cluster, team = install.cluster, install.team
    helm_install(install)
    wait_until("the operator's pod", install.operator_pods, timeout=60)
    wait_until("the operator to register and answer its webhook", install.answering, timeout=90)

    # Profiles and a config, as a platform team applies them: the first revision is cut.
    cluster.apply(team, *PROFILES, CONFIG)
    revision = first_revision(cluster, team)
    assert revision["revision"] == 1

    # A widening profile is refused by the webhook, reached through its Service.
    widening = {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "VirtualAgentProfile",
        "metadata": {"name": "wider"},
        "spec": {
            "agent": "planner",
            "key": "wider",
            "label": "Wider",
            "overlay": {"providers": ["openai"]},
        },
    }
    refused = cluster.apply(team, widening, check=False)
    assert refused.returncode != 0
    assert "spec.overlay.providers: unknown field" in refused.stderr, refused.stderr

    # A spawn with a profile: the parent's run, then its profiled child, each in its pod.
    client = Client(cluster.api, team)
    client.spawn("parent", WorkerSpec(agent="planner", initial_message="plan"))
    wait_until("the parent's pod", lambda: client.get("parent").status.pod, timeout=60)
    cluster.apply(team, worker("child", parent="parent", profile="reviewer"))
    wait_until("the child's pod", lambda: client.get("child").status.pod, timeout=60)
    binding = client.get("child").status.binding
    assert binding is not None and binding.key == "reviewer"

    # A kill, with its Event.
    client.kill("parent", reason="enough for today", by="alice")
    wait_until(
        "the parent to be killed", lambda: client.get("parent").status.phase == "Killed", timeout=60
    )
    events = cluster.kubectl_json(
        "get", "events", "-n", team, "--field-selector", "reason=Killed,involvedObject.name=parent"
    )["items"]
    assert [e["message"] for e in events] == ["killed by alice: enough for today"]
