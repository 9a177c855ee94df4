"""The operator process itself: what it serves from the moment it starts."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import kubernetes
import pytest

from agentworkers.api import GROUP, VERSION
from tests.e2e.support import Cluster, Operator, wait_until

# Bounds on the namespace burst (each namespace costs the namespace controller a sweep
# later): the gap opens within about 50 ms of the burst's start.
BURST_SECONDS = 0.5
BURST_MAX = 120


def test_namespaces_created_while_the_operator_starts_are_served(
    cluster: Cluster, tmp_path: Path
) -> None:
    """kopf, given namespace patterns, used to lose a namespace created in the ~20 ms
    between its first listing of namespaces and the start of its namespace watch (see
    agentworkers.controller.kopf.kopf_fixes). Create namespaces back to back through that
    moment, then an AgentConfig in each: every one must get its revision."""
    prefix = f"s{uuid.uuid4().hex[:4]}"
    core = kubernetes.client.CoreV1Api(cluster.api)
    log = tmp_path / "operator.log"
    created: list[str] = []

    def burst() -> None:
        # The gap opens once kopf has logged in; start then, so the burst stays short.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "login_via_client" not in _read(log):
            time.sleep(0.005)
        end = time.monotonic() + BURST_SECONDS
        while time.monotonic() < end and len(created) < BURST_MAX:
            name = f"{prefix}-{len(created):03d}"
            labels = {"agentworkers.io/test": "e2e"}
            core.create_namespace({"metadata": {"name": name, "labels": labels}})
            created.append(name)

    creator = threading.Thread(target=burst)
    creator.start()
    try:
        with Operator.start(cluster, tmp_path, f"--namespace={prefix}-*", "--no-webhook"):
            creator.join()
            assert created, "no namespace was created during the operator's start"
            custom = kubernetes.client.CustomObjectsApi(cluster.api)
            config = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AgentConfig",
                "metadata": {"name": "probe"},
                "spec": {"model": {"provider": "scripted", "model": "m"}},
            }
            for name in created:
                custom.create_namespaced_custom_object(GROUP, VERSION, name, "agentconfigs", config)

            def unserved() -> list[str]:
                return [
                    name
                    for name in created
                    if not (
                        custom.get_namespaced_custom_object(
                            GROUP, VERSION, name, "agentconfigs", "probe"
                        ).get("status")
                        or {}
                    ).get("activeRevision")
                ]

            try:
                wait_until("every namespace to be served", lambda: not unserved(), timeout=90)
            except AssertionError:
                pytest.fail(f"never served: {unserved()} of {len(created)} namespaces")
    finally:
        creator.join()
        for name in created:
            core.delete_namespace(name)


def test_admission_is_ready_before_any_namespace_it_serves_exists(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Admission answers from the store once kopf has indexed what it serves, even when
    that is nothing yet: given patterns that match no namespace, /readyz says ready (the
    fixture waits for it), and a namespace created after is admitted into at once. Its
    webhook configuration is a validating one, alone."""
    prefix = f"r{uuid.uuid4().hex[:4]}"
    core = kubernetes.client.CoreV1Api(cluster.api)
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    name = f"{prefix}-a"
    with Operator.start(
        cluster, tmp_path, f"--namespace={prefix}-*", f"--webhook-name=aw-{prefix}.io"
    ) as operator:
        assert operator.admits()
        # Its webhooks are validating ones: no MutatingWebhookConfiguration beside them
        # (kopf made an empty one, which nothing owned and each uninstall left behind).
        hooks = {
            kind: cluster.kubectl("get", kind, operator.webhook_name, check=False).returncode
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
        }
        assert hooks == {"validatingwebhookconfiguration": 0, "mutatingwebhookconfiguration": 1}
        core.create_namespace(
            {"metadata": {"name": name, "labels": {"agentworkers.io/test": "e2e"}}}
        )
        try:
            config = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "AgentConfig",
                "metadata": {"name": "probe"},
                "spec": {"model": {"provider": "scripted", "model": "m"}},
            }
            # No retry: a 503 (not ready) here fails the test.
            custom.create_namespaced_custom_object(GROUP, VERSION, name, "agentconfigs", config)
        finally:
            core.delete_namespace(name)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""
