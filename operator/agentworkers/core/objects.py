"""Typed views of the objects the operator reads: any object's metadata, and what the store
keeps of a pod's status (`kube/store.TRIM`). Pure.

Bodies stay dicts: they come from the API and go back to it (patches, creates) spelt as the
API spells them, and the store hands out copies a pass may change before it writes them.
A view is read from a body when asked (`meta(body)`, `pod_status(body)`), is never written
back, and reads every optional field the one way: an absent name, uid or version is "",
absent labels or annotations are empty, an absent time is None. Writing stays where each
object is built; owner references are read and written in `core.owners`, times parsed and
stamped in `core.clocks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class Meta(NamedTuple):
    """An object's `metadata`, the fields the operator reads but its owner references
    (`core.owners`, where they are written too). Times are the API's strings
    (`core.clocks.parse` reads them); labels and annotations are read-only. A named tuple,
    not a frozen dataclass: made for every object a pass or a watch event reads, it costs
    half as much (0.8 against 1.8 us)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None
    labels: Mapping[str, str] = _EMPTY
    annotations: Mapping[str, str] = _EMPTY
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (it waits for its finalizers)."""
        return bool(self.deletion_timestamp)


def meta(body: Mapping[str, Any]) -> Meta:
    """The metadata of `body` (an object from the store, the API or an admission review)."""
    raw = body.get("metadata") or _EMPTY
    generation = raw.get("generation")
    return Meta(
        name=str(raw.get("name") or ""),
        namespace=str(raw.get("namespace") or ""),
        uid=str(raw.get("uid") or ""),
        resource_version=str(raw.get("resourceVersion") or ""),
        generation=int(generation) if generation is not None else None,
        labels=MappingProxyType(raw.get("labels") or {}),
        annotations=MappingProxyType(raw.get("annotations") or {}),
        creation_timestamp=raw.get("creationTimestamp") or None,
        deletion_timestamp=raw.get("deletionTimestamp") or None,
    )


def phase(body: Mapping[str, Any]) -> str | None:
    """`status.phase` of a Worker or a pod; None before anything has set one."""
    return (body.get("status") or _EMPTY).get("phase") or None


@dataclass(frozen=True, slots=True)
class Terminated:
    """How a pod's container ended."""

    container: str
    exit_code: int | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class PodStatus:
    """What the operator reads of a pod besides its metadata: its phase, the kubelet's
    reason and message, its scheduling gates' names, and of its containers the first one
    running (since when) and the first one ended."""

    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    gates: tuple[str, ...] = ()
    running_since: str | None = None
    terminated: Terminated | None = None


def pod_status(pod: Mapping[str, Any]) -> PodStatus:
    status = pod.get("status") or _EMPTY
    running_since: str | None = None
    terminated: Terminated | None = None
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or _EMPTY
        started = (state.get("running") or _EMPTY).get("startedAt")
        if started and running_since is None:
            running_since = str(started)
        ended = state.get("terminated")
        if ended and terminated is None:
            code = ended.get("exitCode")
            terminated = Terminated(
                container=str(container.get("name") or ""),
                exit_code=int(code) if code is not None else None,
                reason=ended.get("reason") or None,
            )
    gates = (pod.get("spec") or _EMPTY).get("schedulingGates") or ()
    return PodStatus(
        phase=status.get("phase") or None,
        reason=status.get("reason") or None,
        message=status.get("message") or None,
        gates=tuple(str(g.get("name") or "") for g in gates),
        running_since=running_since,
        terminated=terminated,
    )
