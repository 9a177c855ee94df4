"""A typed Python client for the worker lifecycle: spawn, query, list, inspect, collect, kill.

    from agentworkers.client import Client
    client = Client.from_kubeconfig(namespace="team-a")
    client.spawn("w1", WorkerSpec(agent="planner", initial_message="hello"))
    result = client.collect("w1", timeout=60)

Errors are the seed's: UnknownWorker, WorkerNameConflict, CollectTimeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from agentworkers.api import GROUP, VERSION, WorkerSpec, WorkerStatus
from agentworkers.api.common import API_VERSION
from agentworkers.api.worker import SETTLED_PHASES
from agentworkers.controller.workers import COLLECTED_ANNOTATION

PLURAL = "workers"


class WorkerError(Exception):
    """Base of the lifecycle errors."""


class UnknownWorkerError(WorkerError, LookupError):
    """No worker by that name."""


class WorkerNameConflictError(WorkerError):
    """A live worker already has that name."""


class CollectTimeoutError(WorkerError, TimeoutError):
    """The worker did not settle (idle, done, failed, killed) within the timeout."""


@dataclass(frozen=True)
class CollectResult:
    name: str
    phase: str
    output: str
    error: str


@dataclass(frozen=True)
class WorkerInfo:
    name: str
    spec: WorkerSpec
    status: WorkerStatus
    created: str

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> WorkerInfo:
        return cls(
            name=body["metadata"]["name"],
            spec=WorkerSpec.model_validate(body["spec"]),
            status=WorkerStatus.model_validate(body.get("status") or {}),
            created=body["metadata"].get("creationTimestamp", ""),
        )


class Client:
    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = kubernetes.client.CustomObjectsApi(api)

    @classmethod
    def from_kubeconfig(cls, namespace: str | None = None, kubeconfig: str | None = None) -> Client:
        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        if namespace is None:
            _, context = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
            namespace = context.get("context", {}).get("namespace", "default")
        return cls(api, namespace)

    def _get(self, name: str) -> dict[str, Any]:
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name
            )
        except ApiException as e:
            if e.status == 404:
                raise UnknownWorkerError(f"unknown worker {name!r} in {self.namespace}") from e
            raise
        return cast(dict[str, Any], found)

    def _patch(
        self, name: str, patch: Any, content_type: str = "application/merge-patch+json"
    ) -> dict[str, Any]:
        try:
            found = self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, patch, _content_type=content_type
            )
        except ApiException as e:
            if e.status == 404:
                raise UnknownWorkerError(f"unknown worker {name!r} in {self.namespace}") from e
            raise
        return cast(dict[str, Any], found)

    def spawn(
        self, name: str, spec: WorkerSpec, labels: dict[str, str] | None = None
    ) -> WorkerInfo:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Worker",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec.wire(),
        }
        try:
            created = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, body
            )
        except ApiException as e:
            if e.status == 409:
                raise WorkerNameConflictError(f"worker name {name!r} already in use") from e
            raise
        return WorkerInfo.from_body(cast(dict[str, Any], created))

    def get(self, name: str) -> WorkerInfo:
        return WorkerInfo.from_body(self._get(name))

    def list(self) -> list[WorkerInfo]:
        """Every worker, oldest first (start time, then name): a stable order to page through."""
        found = cast(
            dict[str, Any],
            self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL),
        )
        infos = [WorkerInfo.from_body(b) for b in found.get("items", [])]
        return sorted(infos, key=lambda w: (w.status.started_at or w.created, w.name))

    def query(self, name: str, message: str) -> None:
        """Append a message to spec.queries. A JSON patch `add`, so concurrent queries all land;
        the operator refuses one to a finished worker."""
        queries = (self._get(name).get("spec") or {}).get("queries")
        patch = (
            [{"op": "add", "path": "/spec/queries/-", "value": message}]
            if queries
            else [{"op": "add", "path": "/spec/queries", "value": [message]}]
        )
        self._patch(name, patch, content_type="application/json-patch+json")

    def kill(self, name: str, reason: str, by: str = "") -> None:
        self._patch(name, {"spec": {"kill": {"reason": reason, "by": by}}})

    def wait(self, name: str, phases: frozenset[str], timeout: float) -> WorkerInfo:
        """Wait, on a watch (not by polling), until the worker is in one of `phases`."""
        deadline = time.monotonic() + timeout
        info = self.get(name)
        while info.status.phase not in phases:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CollectTimeoutError(
                    f"worker {name!r} still {info.status.phase or 'Pending'} after {timeout:g}s"
                )
            watch = kubernetes.watch.Watch()
            try:
                for event in watch.stream(
                    self.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    field_selector=f"metadata.name={name}",
                    resource_version=None,
                    timeout_seconds=max(1, int(remaining)),
                ):
                    if event["type"] == "DELETED":
                        raise UnknownWorkerError(f"worker {name!r} was deleted while waiting")
                    info = WorkerInfo.from_body(event["object"])
                    if info.status.phase in phases:
                        break
            finally:
                watch.stop()
        return info

    def collect(self, name: str, timeout: float = 300) -> CollectResult:
        """Wait for idle/done/failed/killed, return output, phase and error, remove the worker.

        The worker's pod, sandbox and children go with it (they are owned by it).
        """
        info = self.wait(name, SETTLED_PHASES, timeout)
        result = CollectResult(
            name=name,
            phase=str(info.status.phase),
            output=info.status.output or "",
            error=info.status.error or "",
        )
        self._patch(name, {"metadata": {"annotations": {COLLECTED_ANNOTATION: "true"}}})
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, propagation_policy="Background"
            )
        except ApiException as e:
            if e.status != 404:
                raise
        return result
