"""End-to-end fixtures: one real API server per session, a fresh namespace per test.

By default the session brings up the local control plane (hack/localcluster.py),
reusing one that is already running and leaving it running if it was. With
AGENTWORKERS_CLUSTER=existing the tests use the cluster KUBECONFIG points at
(a kind cluster, say) instead.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.e2e.support import (
    CONFIG,
    PROFILES,
    REPO,
    Cluster,
    Operator,
    apply_example_skills,
    first_revision,
    install_crds,
    log_excerpt,
    pod_runner,
    wait_until,
)

# Namespaces of this session share a prefix: its operator watches only those, so two
# test sessions against one cluster (a developer's and a helper's) keep out of each other's way.
SESSION = f"t{uuid.uuid4().hex[:4]}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed end-to-end test reports what the operator logged about its namespace."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or "tests/e2e" not in str(item.fspath):
        return
    namespace = getattr(item, "funcargs", {}).get("namespace")
    for log in Operator.started:
        if log.exists():
            report.sections.append((f"operator log {log}", log_excerpt(log, namespace)))
    for running in Operator.running:
        report.sections.append((f"operator state {running.log}", running.state()))


def _localcluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "hack" / "localcluster.py"), *args],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if os.environ.get("AGENTWORKERS_CLUSTER") == "existing":
        kubeconfig = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        cluster = Cluster(kubeconfig=kubeconfig, bin_dir=None, api=api)
        started = False
    else:
        started = _localcluster("status").returncode != 0
        up = _localcluster("up", "--json")
        if up.returncode != 0:
            pytest.fail("the local control plane did not come up (its output is above)")
        cluster = Cluster.from_info(json.loads(up.stdout.strip().splitlines()[-1]))
    install_crds(cluster)
    try:
        yield cluster
    finally:
        cluster.api.close()
        if started and not os.environ.get("AGENTWORKERS_KEEP_CLUSTER"):
            _localcluster("down")


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (the namespace controller empties
    it in the background; nothing waits for that)."""
    stem = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"{SESSION}-{stem}"[:56].rstrip("-") + f"-{uuid.uuid4().hex[:6]}"
    core = kubernetes.client.CoreV1Api(cluster.api)
    core.create_namespace({"metadata": {"name": name, "labels": {"agentworkers.io/test": "e2e"}}})
    # Namespaces get their default service account from the controller manager.
    wait_until(
        "the namespace's default service account",
        lambda: core.list_namespaced_service_account(name).items,
        timeout=30,
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def operator(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """The operator, cluster-wide, with its admission webhook, for the whole session."""
    with Operator.start(
        cluster,
        tmp_path_factory.mktemp("operator"),
        f"--namespace={SESSION}-*",
        f"--webhook-name=agentworkers-{SESSION}.io",
        "--log-format=json",
    ) as running:
        yield running


@pytest.fixture
def podrunner(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """hack/podrunner.py, running this test's worker pods as local processes (only this
    test's: elsewhere pods stay as kwok leaves them, running nothing). Yields the log dir."""
    with pod_runner(cluster, namespace, tmp_path / "pods"):
        yield tmp_path / "pods"


@pytest.fixture
def planner(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """The example agent with its profiles and skills, at revision 1."""
    config = copy.deepcopy(CONFIG)
    config["spec"]["allowedSecrets"] = ["model-key"]
    apply_example_skills(cluster, namespace)
    cluster.apply(namespace, *PROFILES, config)
    return first_revision(cluster, namespace)
