"""The objects the operator reconciles, as its watches last saw them: an informer cache.

The operator's watches (kopf's, one per resource) feed every event in; a reconcile and
an admission review read from here instead of the API server, so the cost of one pass
does not grow with the number of objects, and the API server serves watches, not GETs.

Three habits of client-go's informers and the Job controller:
- What is kept is trimmed to the fields the operator reads (never a Worker's messages,
  inputs' content, events or output, never a pod's spec): memory grows with the
  objects, not their size.
- Our own writes are written through, so the next pass sees them before their watch
  event arrives (the Job controller's "expectations": no second pod from a stale cache).
  A version older than the one kept is ignored, so a late event cannot undo a write.
- Indexes answer the questions a pass asks (a parent's children, an agent's workers,
  profiles and revisions) without scanning.
- A watch event that brings nothing new is no reason for a pass (`news`): the echo of a
  version a pass read or wrote itself (its own status write, its pod's create), or a
  change only to fields the store does not keep (a pod's scheduling, a runtime's events).
  Measured at 25 spawns/s: 3.84 passes per Worker before, 2.17 after.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from agentworkers.api.names import CLAIMED_LABEL, IDENTITY_LABEL, POOL_LABEL, WORKER_LABEL
from agentworkers.api.worker import RUNTIME_STATUS
from agentworkers.core.objects import Meta, meta
from agentworkers.core.owners import owner_names

Body = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)

# The annotations the operator reads; kubectl's last-applied copy of a spec and the like
# are dropped.
KEPT_ANNOTATIONS = frozenset(
    {
        "agentworkers.io/binding",
        "agentworkers.io/collected",
        "agentworkers.io/frozen-revision",
        # Argo CD's mark on what it applied: which Application a revision came from.
        "argocd.argoproj.io/tracking-id",
    }
)
_META = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
         "deletionTimestamp", "labels", "ownerReferences")  # fmt: skip


def _meta(meta: Mapping[str, Any]) -> Body:
    kept = {k: meta[k] for k in _META if k in meta}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k in KEPT_ANNOTATIONS
    }
    if annotations:
        kept["annotations"] = annotations
    return kept


# A Worker's messages are the runtime's to read, up to 64 KiB each; so is its inputs'
# content (up to 512 KiB): the operator checks their names, admission and the run the rest.
_MESSAGES = ("queries", "initialMessage")


def _worker(body: Mapping[str, Any]) -> Body:
    spec = {k: v for k, v in (body.get("spec") or {}).items() if k not in _MESSAGES}
    if "inputs" in spec:
        spec["inputs"] = [{k: v for k, v in i.items() if k != "content"} for i in spec["inputs"]]
    status = {k: v for k, v in (body.get("status") or {}).items() if k not in RUNTIME_STATUS}
    return {**_envelope(body), "spec": spec, "status": status}


def _pod(body: Mapping[str, Any]) -> Body:
    status = body.get("status") or {}
    kept = {k: status[k] for k in ("phase", "reason", "message") if k in status}
    # Of its container: when it started (`core.pods.running_since`) and how it ended
    # (`core.pods.failure`), nothing else.
    for c in (status.get("containerStatuses") or [])[:1]:
        state = c.get("state") or {}
        if (running := state.get("running")) and running.get("startedAt"):
            kept["containerStatuses"] = [
                {"name": c.get("name"), "state": {"running": {"startedAt": running["startedAt"]}}}
            ]
        elif ended := state.get("terminated"):
            end = {k: ended[k] for k in ("exitCode", "reason") if k in ended}
            kept["containerStatuses"] = [{"name": c.get("name"), "state": {"terminated": end}}]
    trimmed = {**_envelope(body), "status": kept}
    # Of its spec only its scheduling gates' names: Kueue's says the run is still queued.
    gates = [{"name": g.get("name")} for g in (body.get("spec") or {}).get("schedulingGates") or []]
    if gates:
        trimmed["spec"] = {"schedulingGates": gates}
    return trimmed


# Of a Kueue Workload, the conditions that say whether and why its pod waits.
_WORKLOAD_CONDITIONS = frozenset({"QuotaReserved", "Admitted"})


def _workload(body: Mapping[str, Any]) -> Body:
    status = body.get("status") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") in _WORKLOAD_CONDITIONS
    ]
    kept: Body = {"conditions": conditions}
    if cluster_queue := (status.get("admission") or {}).get("clusterQueue"):
        kept["admission"] = {"clusterQueue": cluster_queue}
    return {**_envelope(body), "status": kept}


def _whole(body: Mapping[str, Any]) -> Body:
    return {**_envelope(body), **{k: body[k] for k in ("spec", "status") if k in body}}


def _envelope(body: Mapping[str, Any]) -> Body:
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": _meta(body.get("metadata") or {}),
    }


TRIM: dict[str, Callable[[Mapping[str, Any]], Body]] = {
    "workers": _worker,
    "pods": _pod,
    "agentconfigs": _whole,
    "agentconfigrevisions": _whole,
    "virtualagentprofiles": _whole,
    "modelproviders": _whole,
    "tokenquotas": _whole,
    # Kueue's, for the pods of queued runs (watched only where Kueue's CRD exists).
    "workloads": _workload,
}


def _older(old: str, new: str) -> bool:
    """Whether version `old` is older than `new`. Resource versions are opaque to clients,
    but etcd's are integers; when they are not, neither is older (the later arrival wins)."""
    return old.isdigit() and new.isdigit() and int(old) < int(new)


def _unchanged(new: Body, old: Body | None) -> bool:
    """Whether `new` keeps what `old` kept, but its version. Compared as dicts: both are
    the store's own trimmed copies, never changed once made (serialising each event to a
    digest was about a tenth of the time the operator held the GIL under load)."""
    if old is None or new.keys() != old.keys():
        return False
    if any(new[k] != old[k] for k in new if k != "metadata"):
        return False
    meta_new, meta_old = new["metadata"], old["metadata"]
    return meta_new.keys() == meta_old.keys() and all(
        meta_new[k] == meta_old[k] for k in meta_new if k != "resourceVersion"
    )


# Pod labels indexed by value: a run's pod by its Worker (a claimed warm pod's name is not
# the Worker's), an agent's warm pods, those of them runs claimed, and the pods that run as
# each pooled identity.
INDEXED_POD_LABELS = (WORKER_LABEL, POOL_LABEL, CLAIMED_LABEL, IDENTITY_LABEL)


def _agent(plural: str, body: Mapping[str, Any]) -> str | None:
    spec = body.get("spec") or {}
    if plural == "agentconfigs":
        return meta(body).name
    if plural == "pods":
        return None
    return spec.get("agent")


class Store:
    """Trimmed copies of the operator's objects, by kind, namespace and name, with indexes."""

    def __init__(self, judged: frozenset[str] = frozenset()) -> None:
        """`judged`: the kinds whose watch events are judged for news (`news`)."""
        self._judged = judged
        self._lock = threading.Lock()
        self._objects: dict[str, dict[Key, Body]] = {plural: {} for plural in TRIM}
        # (plural, namespace, agent) -> names: an agent's workers, profiles and revisions.
        self._by_agent: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
        # (namespace, parent) -> the Workers whose spec.parent it is.
        self._children: defaultdict[Key, set[str]] = defaultdict(set)
        # (namespace, pod) -> the Workloads Kueue made for that pod.
        self._workloads: defaultdict[Key, set[str]] = defaultdict(set)
        # (label, namespace, value) -> the pods that carry it (INDEXED_POD_LABELS).
        self._pods_by: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
        # For the judged kinds, by (plural, namespace, name): what the watch
        # last delivered, the versions passes read or wrote until their events arrive,
        # and the news of the last event until its handler takes it (`news`).
        self._heard: dict[tuple[str, str, str], Body] = {}
        self._seen: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._news: dict[tuple[str, str, str], bool] = {}

    # --- feeding ---------------------------------------------------------------------

    def wrote(self, plural: str, body: Mapping[str, Any]) -> None:
        """An object as the API server returned it to a pass's write: the pass has seen
        this version, so its watch event is no news."""
        trimmed = TRIM[plural](body)
        of = meta(trimmed)
        with self._lock:
            self._keep(plural, trimmed, of)
            if plural in self._judged:
                self._seen[(plural, of.namespace, of.name)].add(of.resource_version)

    def read(self, plural: str, body: Mapping[str, Any]) -> None:
        """An object a pass read from the API past the store: kept, and its watch event is
        still news. The reader may be another kind's pass (a warm pool's, a profile's) that
        has done none of the object's own work: an AgentConfig first read by its pool's
        pass would otherwise never be cut into a revision."""
        trimmed = TRIM[plural](body)
        with self._lock:
            self._keep(plural, trimmed, meta(trimmed))

    def observed(self, plural: str, body: Mapping[str, Any]) -> None:
        """An object as a watch delivered it. Of a judged kind, whether it is news is kept
        for `news`: it is, unless it is a version a pass has seen, or it changes none of
        what the store keeps since the watch's last event of it."""
        trimmed = TRIM[plural](body)
        of = meta(trimmed)
        with self._lock:
            self._keep(plural, trimmed, of)
            if plural not in self._judged:
                return
            key = (plural, of.namespace, of.name)
            version = of.resource_version
            seen = version in self._seen.get(key, ())
            if key in self._seen:  # the versions whose events have come (or later ones)
                pending = {v for v in self._seen[key] if v != version and not _older(v, version)}
                if pending:
                    self._seen[key] = pending
                else:
                    del self._seen[key]
            self._news[key] = not seen and not _unchanged(trimmed, self._heard.get(key))
            self._heard[key] = trimmed

    def news(self, plural: str, namespace: str, name: str) -> bool:
        """Whether the watch event `observed` last (judged) brought anything a pass has
        not seen; True when there was none to judge. Taken once."""
        with self._lock:
            return self._news.pop((plural, namespace, name), True)

    def _keep(self, plural: str, trimmed: Body, of: Meta) -> None:
        key = (of.namespace, of.name)
        kept = self._objects[plural].get(key)
        if kept is not None:
            if _older(of.resource_version, meta(kept).resource_version):
                return
            self._unindex(plural, kept)
        self._objects[plural][key] = trimmed
        self._index(plural, trimmed, of)

    def forget(self, plural: str, body: Mapping[str, Any]) -> None:
        """The object is gone; a newer one of its name the store holds (made since, by a
        pass's write) is kept."""
        of = meta(body)
        where = (of.namespace, of.name)
        with self._lock:
            kept = self._objects[plural].get(where)
            if kept is not None and _older(of.resource_version, meta(kept).resource_version):
                return
            kept = self._objects[plural].pop(where, None)
            if kept is not None:
                self._unindex(plural, kept)
            key = (plural, of.namespace, of.name)
            for judged in (self._heard, self._seen, self._news):
                judged.pop(key, None)

    def _index(self, plural: str, body: Body, of: Meta) -> None:
        namespace, name = of.namespace, of.name
        if (agent := _agent(plural, body)) is not None:
            self._by_agent[(plural, namespace, agent)].add(name)
        if plural == "workers" and (parent := body["spec"].get("parent")):
            self._children[(namespace, parent)].add(name)
        for pod in _pods_owning(plural, body):
            self._workloads[(namespace, pod)].add(name)
        if plural == "pods":
            for label in INDEXED_POD_LABELS:
                if value := of.labels.get(label):
                    self._pods_by[(label, namespace, value)].add(name)

    def _unindex(self, plural: str, body: Body) -> None:
        of = meta(body)
        namespace, name = of.namespace, of.name
        if (agent := _agent(plural, body)) is not None:
            names = self._by_agent[(plural, namespace, agent)]
            names.discard(name)
            if not names:
                del self._by_agent[(plural, namespace, agent)]
        if plural == "workers" and (parent := body["spec"].get("parent")):
            children = self._children[(namespace, parent)]
            children.discard(name)
            if not children:
                del self._children[(namespace, parent)]
        for pod in _pods_owning(plural, body):
            workloads = self._workloads[(namespace, pod)]
            workloads.discard(name)
            if not workloads:
                del self._workloads[(namespace, pod)]
        if plural == "pods":
            for label in INDEXED_POD_LABELS:
                if value := of.labels.get(label):
                    pods = self._pods_by[(label, namespace, value)]
                    pods.discard(name)
                    if not pods:
                        del self._pods_by[(label, namespace, value)]

    # --- reading ---------------------------------------------------------------------

    def get(self, plural: str, namespace: str, name: str) -> Body | None:
        """A copy of the object (callers may change it), or None."""
        with self._lock:
            found = self._objects[plural].get((namespace, name))
        return _copy(found) if found is not None else None

    def of_agent(self, plural: str, namespace: str, agent: str) -> list[Body]:
        """The workers, profiles or revisions that name `agent` (a config: itself)."""
        with self._lock:
            names = sorted(self._by_agent.get((plural, namespace, agent), ()))
            found = [self._objects[plural][(namespace, n)] for n in names]
        return [_copy(b) for b in found]

    def pods_labelled(self, namespace: str, label: str, value: str) -> list[Body]:
        """The pods whose `label` (one of INDEXED_POD_LABELS) is `value`."""
        with self._lock:
            names = sorted(self._pods_by.get((label, namespace, value), ()))
            found = [self._objects["pods"][(namespace, n)] for n in names]
        return [_copy(b) for b in found]

    def children(self, namespace: str, parent: str) -> list[str]:
        with self._lock:
            return sorted(self._children.get((namespace, parent), ()))

    def workload_of(self, namespace: str, pod: str) -> Body | None:
        """The Kueue Workload of a pod (the newest, were there more than one), or None."""
        with self._lock:
            names = sorted(self._workloads.get((namespace, pod), ()))
            found = [self._objects["workloads"][(namespace, n)] for n in names]
        found.sort(key=lambda b: meta(b).creation_timestamp or "")
        return _copy(found[-1]) if found else None

    def in_namespace(self, plural: str, namespace: str) -> list[Body]:
        """Every object of a kind in one namespace (a scan: for the few kinds and the rare
        questions with no index, a TokenQuota's runs)."""
        with self._lock:
            found = [b for (ns, _), b in self._objects[plural].items() if ns == namespace]
        return [_copy(b) for b in found]

    def unlisted(
        self, plural: str, namespace: str | None, listed: set[Key], version: str
    ) -> list[Body]:
        """The objects of a kind (in `namespace`; None: in all) that a listing at `version`
        did not list though they are no newer than it: deleted while no watch was there to
        say so. Only etcd's integer versions are compared; with others, none is. A kind
        the store does not keep has none."""
        if not version.isdigit():
            return []
        up_to = int(version)
        with self._lock:
            found = [
                body
                for key, body in self._objects.get(plural, {}).items()
                if key not in listed
                and namespace in (None, key[0])
                and (kept := meta(body).resource_version).isdigit()
                and int(kept) <= up_to
            ]
        return [_copy(b) for b in found]

    def keys(self, plural: str) -> list[Key]:
        """Every (namespace, name) of a kind the store holds."""
        with self._lock:
            return list(self._objects[plural])

    def size(self, plural: str) -> int:
        """How many objects of a kind the store holds (the `agentworkers_store_objects` gauge)."""
        with self._lock:
            return len(self._objects[plural])


def _pods_owning(plural: str, body: Body) -> list[str]:
    """The pods a Workload belongs to (Kueue's pod integration makes one per pod)."""
    return owner_names(body, "Pod") if plural == "workloads" else []


def _copy(value: Any) -> Any:
    """A copy a caller may change without changing the store."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
