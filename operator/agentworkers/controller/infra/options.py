"""How the operator is run: what `agentworkers operator` parses into."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworkers.api.workerpod import WorkerPod
from agentworkers.controller.admission.admission_server import Check, ThreadedWebhookServer
from agentworkers.controller.admission.tls import self_signed
from agentworkers.core.revisions import DEFAULT_SETTLE_SECONDS


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    # Worker pod knobs of the install, under each AgentConfig's own spec.worker.
    worker_defaults: WorkerPod = field(default_factory=WorkerPod)
    kubeconfig: str | None = None
    # Admission webhook: None disables it (the handlers still refuse bad input).
    webhook_port: int | None = 9443
    webhook_addr: str = "127.0.0.1"
    # The ValidatingWebhookConfiguration the operator keeps up to date.
    webhook_name: str = "agentworkers.io"
    # The name the API server dials; defaults to webhook_addr.
    webhook_host: str | None = None
    tls_dir: Path = field(default_factory=lambda: Path("/tmp/agentworkers-webhook"))
    metrics_port: int | None = 8080
    metrics_addr: str = "127.0.0.1"
    liveness: str | None = "http://127.0.0.1:8081/healthz"
    # Threads that run Worker passes (and API connections kept for them). A pass waits on
    # the API server, not the CPU: a run's start sends four writes in turn (pod, Role,
    # RoleBinding, status), so at 10 spawns/s with writes of 300-600 ms (a busy API
    # server) 16 threads were all waiting and a new Worker's pass queued for seconds
    # before its pod (docs/scaling.md, "Where a cold Worker's pod waits").
    workers: int = 64
    watch_timeout: int = 270
    # Seconds any one API call may take (a webhook on the way may take 30 by itself).
    request_timeout: float = 60
    # Controller replicas that split the namespaces (1: no sharding), this one's index,
    # whether replicas of one shard take turns on its Lease (active/standby), and the
    # Leases' namespace and name prefix.
    shards: int = 1
    shard_index: int = 0
    leader_elect: bool = False
    lease_namespace: str = "default"
    lease_name: str = "agentworkers"
    # How long an agent's inputs keep still before a change is cut (core.revisions.SettleWindow).
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    # The operator's spans of each spawn (controller.infra.tracing): an OTLP/HTTP endpoint, or off.
    otlp_endpoint: str | None = None
    trace_sample_ratio: float = 1.0

    def webhook_server(
        self, checks: Mapping[str, Check], ready: Callable[[], bool] = lambda: True
    ) -> ThreadedWebhookServer:
        host = self.webhook_host or self.webhook_addr
        # The certificate names what the API server dials, not the address listened on.
        cert, key = self_signed(self.tls_dir, [host])
        server_class = ServiceWebhookServer if host.endswith(".svc") else ThreadedWebhookServer
        return server_class(
            checks=checks,
            ready=ready,
            addr=self.webhook_addr,
            port=self.webhook_port,
            host=host,
            certfile=str(cert),
            pkeyfile=str(key),
            cafile=str(cert),
        )


class ServiceWebhookServer(ThreadedWebhookServer):
    """Registers the webhook by Service reference (`<name>.<namespace>.svc`), not by URL.

    In a cluster, API servers reach webhooks through the Service proxy; most cannot
    resolve `.svc` names themselves, so a URL would not do.
    """

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        name, namespace = str(self.host).split(".")[:2]
        async for config in super().__call__(fn):
            path = urllib.parse.urlparse(config["url"]).path
            yield {
                "caBundle": config.get("caBundle"),
                "service": {"name": name, "namespace": namespace, "port": self.port, "path": path},
            }
