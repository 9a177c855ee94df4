"""A typed Python client for the worker lifecycle, and for the config a user reads beside it.

    from agentworkers.client import Client
    with Client.from_kubeconfig(namespace="team-a") as client:
        client.spawn("w1", WorkerSpec(agent="planner", initial_message="hello"), wait={"Running"})
        for event in client.events("w1", timeout=60):
            print(event.index, event.kind, event.summary)
        result = client.collect("w1", timeout=60)

Lifecycle (the seed's verbs): spawn, query, list, inspect, collect, kill, plus events (the
multiplexed event stream) and explain (the effective config and the layer behind each field).
Config: agents, revisions, profiles, profile, diff_revisions (`agentworkers.client.config`).
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Callable, Collection, Generator, Iterator
from typing import Any

from agentworkers import kube
from agentworkers.api import WorkerSpec
from agentworkers.api.common import API_VERSION
from agentworkers.api.names import COLLECTED_ANNOTATION
from agentworkers.api.worker import SETTLED_PHASES, TERMINAL_PHASES
from agentworkers.client.config import ConfigReads
from agentworkers.client.errors import (
    ApiError,
    CollectTimeoutError,
    UnknownWorkerError,
    WaitTimeoutError,
    WorkerFinishedError,
    WorkerNameConflictError,
    translate,
)
from agentworkers.client.results import (
    Body,
    CollectResult,
    EventCursor,
    EventRecord,
    Inspection,
    TreeNode,
    WorkerInfo,
    inspection,
    spawn_tree,
)
from agentworkers.kube.api import JSON_PATCH, MERGE
from agentworkers.kube.watch import Change, observe

PLURAL = "workers"
DEFAULT_COLLECT_TIMEOUT = 300.0

Progress = Callable[[WorkerInfo], None]


class Client(ConfigReads):
    """Synchronous: every call blocks until the API server answered (or a wait ended)."""

    def __init__(
        self, api: kube.Api | kube.ApiClient, namespace: str, *, owns_api: bool = False
    ) -> None:
        self.api = api if isinstance(api, kube.Api) else kube.Api(api)
        self.namespace = namespace
        self._owns_api = owns_api

    @classmethod
    def from_kubeconfig(cls, namespace: str | None = None, kubeconfig: str | None = None) -> Client:
        """From the kubeconfig given, else KUBECONFIG, else (in a pod) its service account,
        else ~/.kube/config. The namespace defaults to the context's (the pod's)."""
        connection = kube.connect(kubeconfig)
        return cls(connection.api, namespace or connection.namespace, owns_api=True)

    def close(self) -> None:
        if self._owns_api:
            self.api.client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _patch(self, name: str, patch: Any, content_type: str = MERGE) -> Body:
        try:
            return self.api.patch(PLURAL, self.namespace, name, patch, content_type)
        except ApiError as e:
            raise translate(e, self._unknown(name)) from e

    def _observe(
        self, name: str | None, deadline: float | None
    ) -> Iterator[tuple[Change, Body | None]]:
        try:
            yield from observe(self.api, PLURAL, self.namespace, name=name, deadline=deadline)
        except ApiError as e:
            raise translate(e) from e

    def spawn(
        self,
        name: str,
        spec: WorkerSpec,
        labels: dict[str, str] | None = None,
        *,
        wait: Collection[str] | None = None,
        timeout: float = DEFAULT_COLLECT_TIMEOUT,
        progress: Progress | None = None,
    ) -> WorkerInfo:
        """Create the worker; with `wait`, return once it is in one of those phases (or ended)."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "Worker",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec.wire(),
        }
        try:
            created = self.api.create(PLURAL, self.namespace, body)
        except ApiError as e:
            if e.status == 409:
                raise WorkerNameConflictError(f"worker name {name!r} already in use") from e
            raise translate(e) from e
        info = WorkerInfo.from_body(created)
        if wait:
            info = self.wait(name, frozenset(wait), timeout, progress)
        return info

    def get(self, name: str) -> WorkerInfo:
        return WorkerInfo.from_body(self._get(name))

    def list(self) -> builtins.list[WorkerInfo]:
        """Every worker, oldest first (start time, then name): a stable order to page through."""
        infos = [WorkerInfo.from_body(b) for b in self._items(PLURAL)]
        return sorted(infos, key=lambda w: (w.started, w.name))

    def tree(self, name: str) -> TreeNode:
        """The worker and every worker below it (spec.parent), from one listing."""
        found = spawn_tree(self.list(), name)
        if found is None:
            raise self._unknown(name)
        return found

    def query(self, name: str, message: str) -> WorkerInfo:
        """Append a message to spec.queries; the operator refuses one to a finished worker."""
        for _ in range(5):
            body = self._get(name)
            if (body.get("spec") or {}).get("queries"):
                # A JSON patch `add` at the end: concurrent queries all land.
                patch: Any = [{"op": "add", "path": "/spec/queries/-", "value": message}]
                return WorkerInfo.from_body(self._patch(name, patch, content_type=JSON_PATCH))
            # The first query creates the list: guard it, or a concurrent first query is lost.
            patch = {
                "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                "spec": {"queries": [message]},
            }
            try:
                return WorkerInfo.from_body(self._patch(name, patch))
            except ApiError as e:
                if e.status != 409:
                    raise
        raise ApiError(f"worker {name!r} kept changing; the query was not sent", 409)

    def inspect(self, name: str, since: int = 0) -> Inspection:
        """The worker and its recent events with index > since (from the status's ring)."""
        return inspection(self.get(name), since)

    def kill(self, name: str, reason: str = "", by: str = "") -> WorkerInfo:
        """Ask the operator to stop the run; the reason comes back on collect.

        Idempotent: a run already asked to stop is returned as it is (the first reason
        stands). A run that ended on its own (Done, Failed) has nothing to kill:
        WorkerFinishedError.
        """
        info = self.get(name)
        if info.spec.kill is not None:
            return info
        if info.phase in TERMINAL_PHASES:
            raise WorkerFinishedError(
                f"worker {name!r} is {info.phase}; there is no run to kill", field="spec.kill"
            )
        kill = {"reason": reason.strip() or "killed", "by": by}
        return WorkerInfo.from_body(self._patch(name, {"spec": {"kill": kill}}))

    def wait(
        self,
        name: str,
        phases: frozenset[str],
        timeout: float,
        progress: Progress | None = None,
    ) -> WorkerInfo:
        """Wait, on a watch (not by polling), until the worker is in one of `phases`.

        A run that has ended is returned too: it will not reach any other phase. `progress`
        is called with the worker on every change and after every quiet spell.
        """
        info: WorkerInfo | None = None
        for kind, body in self._observe(name, time.monotonic() + timeout):
            if kind == "DELETED" or (kind == "SYNCED" and info is None):
                raise self._unknown(name)
            if body is not None:
                info = WorkerInfo.from_body(body)
            if info is None:
                continue
            if progress is not None:
                progress(info)
            if info.phase in phases or info.phase in TERMINAL_PHASES:
                return info
        phase = info.phase if info else "Pending"
        why = f": {info.waiting}" if info and info.waiting else ""
        raise WaitTimeoutError(f"worker {name!r} still {phase} after {timeout:g}s{why}")

    def collect(
        self,
        name: str,
        timeout: float = DEFAULT_COLLECT_TIMEOUT,
        progress: Progress | None = None,
        *,
        keep: bool = False,
    ) -> CollectResult:
        """Wait for idle/done/failed/killed, return output, phase and error, remove the worker.

        For a killed worker the error is the kill reason. The worker's pod, sandbox and
        children go with it (they are owned by it); `keep` leaves them (to read the pod's
        logs, say). A timeout removes nothing.
        """
        try:
            # A run asked to stop is not settled until it is Killed (or ended on its own).
            phases = TERMINAL_PHASES if self.get(name).spec.kill else SETTLED_PHASES
            info = self.wait(name, phases, timeout, progress)
        except WaitTimeoutError as e:
            raise CollectTimeoutError(str(e)) from None
        error = info.status.error or ""
        if info.phase == "Killed" and not error:
            error = info.spec.kill.reason if info.spec.kill else "killed"
        killed = self._killed_children(name) if info.phase == "Killed" else ()
        result = CollectResult(name, info.phase, info.status.output or "", error, not keep, killed)
        if keep:
            return result
        # Marked first, so the operator does not take the deletion for a kill.
        self._patch(name, {"metadata": {"annotations": {COLLECTED_ANNOTATION: "true"}}})
        # Someone else removed it already: collected all the same.
        try:
            self.api.delete(PLURAL, self.namespace, name, {"propagationPolicy": "Background"})
        except ApiError as e:
            with contextlib.suppress(UnknownWorkerError):
                raise translate(e, self._unknown(name)) from e
        return result

    def _killed_children(self, name: str) -> tuple[str, ...]:
        try:
            workers = self.list()
        except ApiError as e:
            if e.status == 403:  # a runtime's credentials read only its own children
                return ()
            raise
        return tuple(
            sorted(w.name for w in workers if w.spec.parent == name and w.phase == "Killed")
        )

    def events(
        self,
        name: str | None = None,
        *,
        follow: bool = True,
        since: int = 0,
        timeout: float | None = None,
    ) -> Generator[EventRecord, None, None]:
        """The events (index > since) of one worker or all, multiplexed from one watch.

        Each (worker, index) comes once, in index order per worker. Without `follow` it
        ends after what is there now; with it, when the one worker is deleted, or at the
        timeout (None: never).
        """
        cursor = EventCursor(since)
        deadline = None if timeout is None else time.monotonic() + timeout
        found = False
        for kind, body in self._observe(name, deadline):
            if kind == "SYNCED":
                if name and not found:
                    raise self._unknown(name)
                if not follow:
                    return
            elif kind == "DELETED" and body is not None:
                cursor.forget(body)
                if name:
                    return
            elif body is not None:
                found = True
                yield from cursor.advance(body)
