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
import dataclasses
import time
from collections.abc import Callable, Collection, Generator, Iterator
from typing import Any

from agentworkers import kube
from agentworkers.api import WorkerSpec
from agentworkers.api.common import API_VERSION
from agentworkers.api.names import COLLECTED_ANNOTATION
from agentworkers.api.worker import TERMINAL_PHASES
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
    KillResult,
    TreeNode,
    WorkerFilter,
    WorkerInfo,
    inspection,
    kill_outcome,
    spawn_forest,
    spawn_tree,
)
from agentworkers.client.selection import (
    GONE,
    PendingCollection,
    collect_phases,
    collect_result,
    kill_result,
    nothing_to_kill,
)
from agentworkers.core.tracing import run_traceparent, trace_hex_of
from agentworkers.kube.api import ALL_NAMESPACES, JSON_PATCH, MERGE
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

    def _patch(
        self, name: str, patch: Any, content_type: str = MERGE, namespace: str | None = None
    ) -> Body:
        namespace = namespace or self.namespace
        try:
            return self.api.patch(PLURAL, namespace, name, patch, content_type)
        except ApiError as e:
            raise translate(e, self._unknown(name, namespace)) from e

    def _observe(
        self,
        name: str | None,
        deadline: float | None,
        labels: str = "",
        all_namespaces: bool = False,
    ) -> Iterator[tuple[Change, Body | None]]:
        """One watch: on one worker, on the namespace's, or on the cluster's (`labels`
        narrows the last two on the server)."""
        namespace = ALL_NAMESPACES if all_namespaces else self.namespace
        try:
            yield from observe(
                self.api, PLURAL, namespace, name=name, labels=labels, deadline=deadline
            )
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
        spec = self._in_parent_trace(spec)
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

    def _in_parent_trace(self, spec: WorkerSpec) -> WorkerSpec:
        """A child spawned from here, of an agent that traces, goes into its parent's trace,
        under the parent's run span (core.tracing), as a runtime's spawn_worker puts it
        under its own span. Anything amiss (no such parent) is admission's to say."""
        if not spec.parent or spec.traceparent:
            return spec
        try:
            config = self.api.get("agentconfigs", self.namespace, spec.agent)
            tracing = ((config or {}).get("spec") or {}).get("tracing")
            parent = self.api.get(PLURAL, self.namespace, spec.parent) if tracing else None
        except ApiError:
            return spec
        if not tracing or parent is None:
            return spec
        header = run_traceparent(parent, float(tracing.get("sampleRatio", 1.0)))
        return spec.model_copy(update={"traceparent": header})

    def list(
        self, where: WorkerFilter | None = None, *, all_namespaces: bool = False
    ) -> builtins.list[WorkerInfo]:
        """The workers `where` selects (default: all) in the namespace, or in every one;
        oldest first (start time, then name; by namespace first across namespaces): a
        stable order to page through. One LIST, whatever the namespace count."""
        where = where or WorkerFilter()
        bodies = self._items(PLURAL, labels=where.labels, all_namespaces=all_namespaces)
        infos = [info for info in map(WorkerInfo.from_body, bodies) if where.matches(info)]
        return sorted(infos, key=lambda w: (w.namespace, w.started, w.name))

    def watch(
        self,
        where: WorkerFilter | None = None,
        *,
        all_namespaces: bool = False,
        timeout: float | None = None,
    ) -> Generator[tuple[Change, WorkerInfo], None, None]:
        """The selected workers as they are, then every change to them ("ADDED",
        "MODIFIED", "DELETED"), from one watch on the namespace or the whole cluster,
        until the timeout (None: never). A worker that stops matching (its phase moved on,
        with `phases`) comes once more, as it is now, then no longer."""
        where = where or WorkerFilter()
        deadline = None if timeout is None else time.monotonic() + timeout
        shown: set[str] = set()
        for kind, body in self._observe(None, deadline, where.labels, all_namespaces):
            if body is None or kind not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            info, uid = WorkerInfo.from_body(body), body["metadata"]["uid"]
            if where.matches(info) and kind != "DELETED":
                shown.add(uid)
            elif uid in shown:
                shown.discard(uid)
            else:
                continue
            yield kind, info

    def tree(self, name: str) -> TreeNode:
        """The worker and every worker below it (spec.parent), from one listing."""
        found = spawn_tree(self.list(), name)
        if found is None:
            raise self._unknown(name)
        meta, spec = (body := self._get(name))["metadata"], body.get("spec") or {}
        return dataclasses.replace(
            found, trace_id=trace_hex_of(spec.get("traceparent"), meta["uid"])
        )

    def forest(self, *, all_namespaces: bool = False) -> tuple[TreeNode, ...]:
        """Every spawn tree in the namespace (or in every one), from one listing."""
        return spawn_forest(self.list(all_namespaces=all_namespaces))

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
        return self._kill(name, self.namespace, reason, by)[0]

    def _kill(self, name: str, namespace: str, reason: str, by: str) -> tuple[WorkerInfo, bool]:
        """The worker, and whether this call asked it to stop (False: someone had)."""
        info = WorkerInfo.from_body(self._get(name, namespace))
        if info.spec.kill is not None:
            return info, False
        if info.phase in TERMINAL_PHASES:
            raise nothing_to_kill(info)
        kill = {"spec": {"kill": {"reason": reason.strip() or "killed", "by": by}}}
        return WorkerInfo.from_body(self._patch(name, kill, MERGE, namespace)), True

    def kill_selected(
        self,
        where: WorkerFilter,
        reason: str = "",
        by: str = "",
        *,
        all_namespaces: bool = False,
        dry_run: bool = False,
    ) -> builtins.list[KillResult]:
        """Kill every run `where` selects (`WorkerFilter()`: all), as `kubectl delete -l`
        deletes: one result per matched worker, in list order; none matched: empty.

        A run already asked to stop keeps its first reason; one that ended on its own is
        left alone (both reported, neither an error). `dry_run` sends no write.
        """
        results = []
        for info in self.list(where, all_namespaces=all_namespaces):
            now, outcome = info, kill_outcome(info)
            if outcome == "killed" and not dry_run:
                try:  # read again: it may have ended, or been killed, since the listing
                    now, ours = self._kill(info.name, info.namespace, reason, by)
                    outcome = "killed" if ours else "already killed"
                except WorkerFinishedError:
                    outcome = "finished"
                except UnknownWorkerError:
                    continue  # gone since the listing (collected, or its parent was)
            results.append(kill_result(now, outcome, reason, dry_run))
        return results

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
            info = self.wait(name, collect_phases(self.get(name)), timeout, progress)
        except WaitTimeoutError as e:
            raise CollectTimeoutError(str(e)) from None
        return self._collected(info, keep)

    def collect_selected(
        self,
        where: WorkerFilter,
        timeout: float = DEFAULT_COLLECT_TIMEOUT,
        progress: Progress | None = None,
        *,
        keep: bool = False,
        all_namespaces: bool = False,
        dry_run: bool = False,
    ) -> Generator[CollectResult, None, None]:
        """Collect every worker `where` selects now (`WorkerFilter()`: all), each as it
        settles, on one watch; none matched: nothing.

        A parent waits for its selected children, since removing it removes them. Ends
        when all are collected; at the timeout, CollectTimeoutError names the ones left (those
        yielded are collected). A worker removed meanwhile by someone else comes with
        `deleted` False and that as its error. `dry_run` waits for nothing and removes
        nothing: it yields the matched workers as they are now.
        """
        chosen = self.list(where, all_namespaces=all_namespaces)
        if dry_run:
            for info in chosen:
                yield collect_result(info, keep=True)
            return
        pending = PendingCollection(chosen, keep)
        deadline = time.monotonic() + timeout
        for kind, body in self._observe(None, deadline, where.labels, all_namespaces):
            if body is not None:
                info = WorkerInfo.from_body(body)
                if info not in pending:
                    continue
                if kind == "DELETED":
                    yield pending.gone(info)
                    continue
                pending.update(info)
                if progress is not None:
                    progress(info)
            for info in pending.ready():
                try:
                    result = self._collected(info, keep)
                except UnknownWorkerError:
                    result = collect_result(info, keep=True, error=GONE)
                yield result
            if not pending:
                return
        raise CollectTimeoutError(f"still not settled after {timeout:g}s: {pending.left()}")

    def _collected(self, info: WorkerInfo, keep: bool) -> CollectResult:
        """The settled worker's result; then, unless `keep`, it is removed."""
        killed = self._killed_children(info) if info.phase == "Killed" else ()
        result = collect_result(info, keep, killed_children=killed)
        if keep:
            return result
        name, namespace = info.name, info.namespace or self.namespace
        # Marked first, so the operator does not take the deletion for a kill.
        marked = {"metadata": {"annotations": {COLLECTED_ANNOTATION: "true"}}}
        self._patch(name, marked, MERGE, namespace)
        # Someone else removed it already: collected all the same.
        try:
            self.api.delete(PLURAL, namespace, name, {"propagationPolicy": "Background"})
        except ApiError as e:
            with contextlib.suppress(UnknownWorkerError):
                raise translate(e, self._unknown(name, namespace)) from e
        return result

    def _killed_children(self, info: WorkerInfo) -> tuple[str, ...]:
        try:
            workers = self._items(PLURAL, namespace=info.namespace or None)
        except ApiError as e:
            if e.status == 403:  # a runtime's credentials read only its own children
                return ()
            raise
        children = map(WorkerInfo.from_body, workers)
        return tuple(
            sorted(w.name for w in children if w.spec.parent == info.name and w.phase == "Killed")
        )

    def events(
        self,
        name: str | None = None,
        *,
        follow: bool = True,
        since: int = 0,
        timeout: float | None = None,
        where: WorkerFilter | None = None,
        all_namespaces: bool = False,
    ) -> Generator[EventRecord, None, None]:
        """The events (index > since) of one worker or of all `where` selects, in the
        namespace or (`all_namespaces`) the whole cluster, multiplexed from one watch.

        Each (worker, index) comes once, in index order per worker. Without `follow` it
        ends after what is there now; with it, when the one worker is deleted, or at the
        timeout (None: never).
        """
        if name and (all_namespaces or (where and not where.everything)):
            raise ValueError("events of one worker are read in its namespace, unfiltered")
        where = where or WorkerFilter()
        cursor = EventCursor(since)
        deadline = None if timeout is None else time.monotonic() + timeout
        found = False
        for kind, body in self._observe(name, deadline, where.labels, all_namespaces):
            if kind == "SYNCED":
                if name and not found:
                    raise self._unknown(name)
                if not follow:
                    return
            elif kind == "DELETED" and body is not None:
                cursor.forget(body)
                if name:
                    return
            elif body is not None and where.matches(WorkerInfo.from_body(body)):
                found = True
                yield from cursor.advance(body)
