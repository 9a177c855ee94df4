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
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from agentworkers.api.worker import WorkerSpec
from agentworkers.client import Client
from agentworkers.client.errors import WorkerNameConflictError
from agentworkers.controller.admission.tls import self_signed
from agentworkers.errors import ApiError
from tests.e2e.support import (
    CONFIG,
    PROFILES,
    Cluster,
    Operator,
    first_revision,
    install_crds,
    is_local,
    pod_runner,
    process_with,
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

    def dry_run(self, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """A server-side dry run of creating `body` in the team namespace: through admission,
        nothing stored."""
        return self.cluster.kubectl(
            "create", "--dry-run=server", "-n", self.team, "-f", "-",
            stdin=json.dumps(body), check=False,
        )  # fmt: skip

    def answering(self) -> bool:
        """The operator registered its webhook (by Service, with its CA) and answers it: a
        server-side dry run of a Worker goes through it (a rollout's new pod registers its
        own certificate's CA a moment after it starts)."""
        found = self.cluster.kubectl(
            "get", "validatingwebhookconfiguration", self.webhook, "-o", "json", check=False
        )
        if found.returncode != 0:
            return False
        hooks = json.loads(found.stdout).get("webhooks") or []
        registered = bool(hooks) and all(
            h["clientConfig"].get("service", {}).get("namespace") == self.system
            and h["clientConfig"].get("caBundle")
            for h in hooks
        )
        dry = self.dry_run(worker("probe", initialMessage="dry run"))
        # Refused for a reason of ours (no AgentConfig yet, say) is answered all the same;
        # "starting" (503: its store is still filling) is not.
        answered = "admission webhook" in dry.stderr and "is starting" not in dry.stderr
        return registered and (dry.returncode == 0 or answered)


@pytest.fixture
def install(cluster: Cluster, tmp_path: Path) -> Iterator[Install]:
    try:
        helm_binary()
    except HelmUnavailable as e:
        pytest.skip(str(e))
    # kwok's pod IPs must be this machine's (on lo, with CAP_NET_ADMIN) to be endpoints.
    if not is_local("198.18.0.2"):
        pytest.skip("no Service reaches a pod here: pod IPs are on loopback (no CAP_NET_ADMIN)")
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


def helm_install(install: Install, *extra: str, chart: Path = CHART) -> str:
    return install.helm(
        "install",
        install.release,
        str(chart),
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
    # Interactive: it waits, Idle, for the kill (the pod runner runs its runtime).
    client.spawn("parent", WorkerSpec(agent="planner", initial_message="plan", interactive=True))
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


def _pod_uid(cluster: Cluster, namespace: str, name: str) -> str | None:
    found = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout)["metadata"]["uid"] if found.returncode == 0 else None


def _revisions(cluster: Cluster, namespace: str) -> list[str]:
    found = cluster.kubectl_json("get", "agentconfigrevisions", "-n", namespace)
    return sorted(r["metadata"]["name"] for r in found["items"])


def _newer_chart(tmp: Path) -> Path:
    """The chart as its next release: version 0.1.1, and a Worker CRD that gained a field."""
    chart = tmp / "agentworkers"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.1.1"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    path = chart / "crds" / "agentworkers.io_workers.yaml"
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["note"] = {"type": "string", "description": "A note (0.1.1)."}
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def test_upgrade_uninstall_and_reinstall_keep_every_worker_and_revision(
    install: Install, tmp_path: Path, operator: Operator
) -> None:
    cluster, team = install.cluster, install.team
    helm_install(install)
    wait_until("the operator to register and answer its webhook", install.answering, timeout=90)
    cluster.apply(team, *PROFILES, CONFIG)
    first_revision(cluster, team)
    client = Client(cluster.api, team)
    client.spawn("keeper", WorkerSpec(agent="planner", initial_message="stay"))
    wait_until("keeper's pod", lambda: _pod_uid(cluster, team, "keeper"), timeout=60)
    pod, revisions = _pod_uid(cluster, team, "keeper"), _revisions(cluster, team)
    before = {p["metadata"]["uid"] for p in install.operator_pods()}  # type: ignore[index]

    # Upgrade as docs/install.md says: the CRDs first, then the chart. A changed worker
    # default rolls the operator (Recreate).
    newer = _newer_chart(tmp_path)
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(newer / "crds"))
        served = cluster.kubectl_json("get", "crd", "workers.agentworkers.io")
        schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert "note" in schema["properties"]["spec"]["properties"]
        install.helm(
            "upgrade",
            install.release,
            str(newer),
            "-n",
            install.system,
            "--reset-then-reuse-values",  # as the README says
            "--set",
            "workerDefaults.nodeSelector.kubernetes\\.io/os=linux",
        )
        wait_until(
            "a new operator pod",
            lambda: {p["metadata"]["uid"] for p in install.operator_pods()} - before,  # type: ignore[index]
            timeout=90,
        )
        wait_until("the new operator to answer", install.answering, timeout=90)
        # The rollout's new pod registers its own certificate a moment after it starts:
        # meanwhile writes fail closed, and a client tries again.
        spec = WorkerSpec(agent="planner", initial_message="new")
        wait_until("a spawn after the upgrade", lambda: _spawned(client, "after-upgrade", spec))
        wait_until("the new worker's pod", lambda: _pod_uid(cluster, team, "after-upgrade"))
        spawned = cluster.kubectl_json("get", "pod", "after-upgrade", "-n", team)
        assert spawned["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert _pod_uid(cluster, team, "keeper") == pod  # no second pod
        assert _revisions(cluster, team) == revisions  # no revision cut again

        # Uninstall: the operator and its webhook go, no webhook configuration of either
        # kind is left behind; the CRDs and every object stay.
        install.helm("uninstall", install.release, "-n", install.system, "--wait")
        wait_until("the operator's pod to go", lambda: not install.operator_pods(), timeout=60)
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            gone = cluster.kubectl("get", kind, install.webhook, check=False)
            assert gone.returncode != 0, f"{kind} {install.webhook} outlived the release"
        assert {w.name for w in client.list()} == {"keeper", "after-upgrade"}
        assert _revisions(cluster, team) == revisions
        # Meanwhile a spawn is stored, unchecked and not started: nothing serves it.
        client.spawn("while-away", WorkerSpec(agent="planner", initial_message="later"))

        # Reinstall (the chart last installed): the operator resumes what is there.
        helm_install(install, chart=newer)
        wait_until("the operator to answer again", install.answering, timeout=90)
        wait_until("while-away's pod", lambda: _pod_uid(cluster, team, "while-away"), timeout=90)
        assert _pod_uid(cluster, team, "keeper") == pod
        assert _revisions(cluster, team) == revisions
    finally:
        # The suite's own CRDs back (the field goes again). The suite's operator (the
        # `operator` fixture) runs on through both changes, unrestarted, for the tests after.
        install_crds(cluster)


def _spawned(client: Client, name: str, spec: WorkerSpec) -> bool:
    """Spawn, as a client does while a webhook replica is down: try again on a 5xx."""
    try:
        client.spawn(name, spec)
    except WorkerNameConflictError:
        return True  # an earlier try went through
    except ApiError as e:
        if e.status is None or e.status < 500:
            raise
        return False
    return True


def _active(cluster: Cluster, install: Install) -> str | None:
    """The controller replica that holds the Lease: its pod's name, the part of its
    holderIdentity before the process's own."""
    found = cluster.kubectl(
        "get", "lease", f"{install.release}-agentworkers-shard-0", "-n", install.system,
        "-o", "json", check=False,
    )  # fmt: skip
    if found.returncode != 0:
        return None
    holder = (json.loads(found.stdout).get("spec") or {}).get("holderIdentity") or ""
    live = {p["metadata"]["name"] for p in install.operator_pods()}  # type: ignore[index]
    pod = holder.rsplit("_", 1)[0]
    return pod if pod in live else None


@pytest.mark.parametrize("admission_replicas", [0, 2], ids=["admission-in-each", "admission-apart"])
def test_two_replicas_one_leader_a_killed_leader_is_replaced_and_admission_keeps_answering(
    install: Install, tmp_path: Path, admission_replicas: int
) -> None:
    """Both layouts: admission in a Deployment of its own (it keeps answering throughout),
    and each controller replica answering the webhook too (reviews the API server sends
    to the killed replica fail closed until it is back: a client retries them)."""
    cluster, team, system = install.cluster, install.team, install.system
    # One certificate for every replica that answers the webhook.
    host = f"{install.release}-agentworkers-webhook.{system}.svc"
    cert, key = self_signed(tmp_path / "tls", [host])
    cluster.kubectl(
        "create", "secret", "tls", "webhook-tls", "-n", system, f"--cert={cert}", f"--key={key}"
    )
    helm_install(
        install,
        "--set", "replicas=2",
        "--set", f"admission.replicas={admission_replicas}",
        "--set", "webhook.tls.secretName=webhook-tls",
    )  # fmt: skip
    wait_until("two controller pods", lambda: len(install.operator_pods()) == 2, timeout=60)
    # Every replica that answers: kwok marks a pod ready at once (no readiness probe runs
    # here), and the Service picks one per review.
    wait_until(
        "admission to answer from every replica",
        lambda: all(install.answering() for _ in range(6)),
        timeout=90,
    )
    cluster.apply(team, *PROFILES, CONFIG)
    first_revision(cluster, team)
    client = Client(cluster.api, team)
    for name in ("w1", "w2", "w3"):
        client.spawn(name, WorkerSpec(agent="planner", initial_message="before"))
    wait_until("their pods", lambda: all(_pod_uid(cluster, team, n) for n in ("w1", "w2", "w3")))
    pods = {n: _pod_uid(cluster, team, n) for n in ("w1", "w2", "w3")}
    leader = wait_until("one leader", lambda: _active(cluster, install), timeout=60)
    pid = process_with({"HOSTNAME": leader}, "operator")
    assert pid is not None, f"no process runs {leader}"

    # Admission, throughout: a dry-run spawn every 0.3 s must be answered, never fail.
    refused: list[str] = []
    probing = threading.Event()

    def probe() -> None:
        body = worker("probe", initialMessage="dry run")
        while not probing.is_set():
            dry = install.dry_run(body)
            if dry.returncode != 0:
                refused.append(dry.stderr)
            time.sleep(0.3)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        spawn = WorkerSpec(agent="planner", initial_message="after the kill")
        wait_until("a spawn after the kill", lambda: _spawned(client, "after", spawn), timeout=30)
        wait_until("a pod for a spawn after the kill", lambda: _pod_uid(cluster, team, "after"),
                   timeout=60)  # fmt: skip
        failover = time.monotonic() - killed
        time.sleep(2)
    finally:
        probing.set()
        prober.join()
    print(
        f"failover: a spawn's pod {failover:.1f} s after the leader's SIGKILL; "
        f"{len(refused)} dry-run spawns refused meanwhile"
    )
    assert failover < 30
    if admission_replicas:
        assert not refused, refused[:3]
    assert {n: _pod_uid(cluster, team, n) for n in pods} == pods  # no second pod


def test_with_no_webhook_endpoint_writes_fail_closed_and_nothing_invalid_persists(
    install: Install,
) -> None:
    """Its Service without endpoints (the operator scaled to 0): every agentworkers write is
    refused, valid or not; back up, the valid one goes through and the invalid one was
    never stored."""
    cluster, team = install.cluster, install.team
    helm_install(install)
    wait_until("the operator to answer", install.answering, timeout=90)
    cluster.apply(team, *PROFILES, CONFIG)
    first_revision(cluster, team)
    deployment = f"{install.release}-agentworkers"
    cluster.kubectl("scale", "deployment", deployment, "-n", install.system, "--replicas=0")
    wait_until("no operator pod", lambda: not install.operator_pods(), timeout=60)
    invalid = worker("bad", parent="ghost", profile="reviewer")
    valid = worker("good", initialMessage="hello")

    def closed() -> bool:
        # Once its endpoint is gone (the API server's view of it lags the pod's deletion).
        return "failed calling webhook" in install.dry_run(valid).stderr

    wait_until("writes to fail closed", closed, timeout=30)
    for body in (invalid, valid):
        refused = cluster.apply(team, body, check=False)
        assert refused.returncode != 0
        assert "failed calling webhook" in refused.stderr, refused.stderr

    cluster.kubectl("scale", "deployment", deployment, "-n", install.system, "--replicas=1")
    wait_until("the operator to answer again", install.answering, timeout=90)
    cluster.apply(team, valid)
    refused = cluster.apply(team, invalid, check=False)
    assert "UnknownWorker" in refused.stderr, refused.stderr
    names = {
        w["metadata"]["name"] for w in cluster.kubectl_json("get", "workers", "-n", team)["items"]
    }
    assert names == {"good"}
