"""Kueue for the e2e tests, as a platform team runs it: its manager (built from its Go
module by hack/build-kueue.sh) against the local control plane, a process on loopback with
a Configuration file: the pod integration on for the namespaces a label selects, its own
certificate management off (a serving certificate of ours), and its webhooks registered
by URL on loopback, the way the operator's are (hack/localcluster.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from agentworkers.controller.admission.tls import self_signed
from tests.e2e.support import Cluster, built, free_port, readyz, stop, wait_until

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
# The webhooks of the kinds the tests use (Kueue's own and the pod integration's); the
# other frameworks' are left out, their CRDs absent here.
KEPT_WEBHOOKS = ("kueue-x-k8s-io", "--v1-pod")
METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def configuration(
    webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path, label: dict[str, str]
) -> dict[str, Any]:
    """Kueue's Configuration: everything on loopback, pods managed in labelled namespaces."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": label},
        "integrations": {"frameworks": ["pod"]},
        # Its on-demand visibility API is an aggregated API server of its own: not needed.
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhooks(
    manifests: str, name: str, port: int, ca: bytes, label: dict[str, str]
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, dialled by URL on loopback; the pod webhook only for
    the namespaces Kueue manages (a pod elsewhere never waits on it)."""
    found = []
    for config in yaml.safe_load_all(manifests):
        if not config:
            continue
        kept = []
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if not any(p in path for p in KEPT_WEBHOOKS):
                continue
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
            if path.endswith("--v1-pod"):
                hook["namespaceSelector"] = {"matchLabels": label}
            kept.append(hook)
        config["metadata"] = {"name": f"{name}-{config['kind'].lower()}"}
        config["webhooks"] = kept
        found.append(config)
    return found


@dataclass
class Kueue:
    """Kueue's manager, running; its log under `workdir`."""

    process: subprocess.Popen[bytes]
    log: Path
    health: int

    @classmethod
    @contextlib.contextmanager
    def start(cls, cluster: Cluster, workdir: Path, label: dict[str, str]) -> Iterator[Kueue]:
        """Kueue, managing the pods of the namespaces that carry `label`."""
        bin_dir = built("build-kueue.sh")
        cluster.kubectl("apply", "--server-side", "-f", str(bin_dir / "crds.yaml"))
        extensions = kubernetes.client.ApiextensionsV1Api(cluster.api)
        for crd in ("workloads", "clusterqueues", "localqueues", "resourceflavors"):
            wait_until(
                f"{crd}.{GROUP} established",
                lambda name=crd: any(
                    c.type == "Established" and c.status == "True"
                    for c in extensions.read_custom_resource_definition(
                        f"{name}.{GROUP}"
                    ).status.conditions
                    or []
                ),
            )
        core = kubernetes.client.CoreV1Api(cluster.api)
        with contextlib.suppress(kubernetes.client.exceptions.ApiException):
            core.create_namespace({"metadata": {"name": "kueue-system"}})
        cert, key = self_signed(workdir / "certs", ["127.0.0.1"])
        # With its own certificate management off, Kueue reads its metrics server's pair
        # from this fixed path (where its chart mounts a Secret) and will not start without.
        METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(cert, METRICS_CERTS / "tls.crt")
        shutil.copy(key, METRICS_CERTS / "tls.key")
        port, health = free_port(), free_port()
        config = workdir / "kueue-config.yaml"
        config.write_text(
            json.dumps(configuration(port, health, free_port(), workdir / "certs", label))
        )
        name = f"kueue-{workdir.name}".lower()[:50]
        hooks = webhooks(
            (bin_dir / "webhooks.yaml").read_text(), name, port, cert.read_bytes(), label
        )
        log = workdir / "kueue.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [str(bin_dir / "kueue"), f"--config={config}", "--zap-log-level=2"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=cluster.env,
            )
        kueue = cls(process, log, health)
        try:
            wait_until("Kueue to be ready", kueue.ready, timeout=120)
            cluster.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(h) for h in hooks))
            yield kueue
        finally:
            for hook in hooks:
                cluster.kubectl(
                    "delete", hook["kind"].lower(), hook["metadata"]["name"], "--ignore-not-found"
                )
            stop(process)

    def ready(self) -> bool:
        return readyz(self.health, [(self.process, self.log)])

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
