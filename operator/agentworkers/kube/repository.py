"""What the controller and admission read and write, as one protocol: `Repository`.

`Storage` is the implementation on an API server (`agentworkers.kube.api`), reading from
the operator's watch-fed store where it has one; the controller's table tests use an
in-memory one (`tests/unit/controller/memory.py`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentworkers.api import AgentConfigRevisionSpec
from agentworkers.api.common import API_VERSION
from agentworkers.api.names import AGENT_LABEL, APPLIED_BY_ANNOTATION
from agentworkers.core.objects import meta
from agentworkers.core.owners import owned_by, owner_reference, references
from agentworkers.core.revisions import ExistingRevision, pinned_by, revision_name
from agentworkers.errors import ApiError
from agentworkers.kube.api import JSON_PATCH, Api
from agentworkers.kube.events import Recorder
from agentworkers.kube.store import TRIM, Store

Body = Mapping[str, Any]


class Conflict(Exception):
    """A child already exists under our deterministic name but is not ours."""


class Repository(Protocol):
    """The operations the controller and admission use; `Storage` documents each."""

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    def of_agent(self, plural: str, namespace: str, agent: str) -> list[dict[str, Any]]: ...
    def in_namespace(self, plural: str, namespace: str) -> list[dict[str, Any]]: ...
    def children(self, namespace: str, parent: str) -> list[str]: ...
    def workload_of(self, namespace: str, pod: str) -> dict[str, Any] | None: ...
    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> str | None: ...
    def revisions(self, namespace: str, agent: str) -> list[ExistingRevision]: ...
    def create_revision(
        self, config: Body, spec: AgentConfigRevisionSpec, applied_by: str = ""
    ) -> ExistingRevision: ...
    def delete_revision(self, namespace: str, name: str) -> None: ...
    def pinned_revisions(self, namespace: str, agent: str) -> set[str]: ...
    def post_event(self, body: Body, type_: str, reason: str, message: str) -> None: ...
    def revision_spec(self, namespace: str, name: str) -> AgentConfigRevisionSpec | None: ...
    def patch_metadata(
        self,
        plural: str,
        body: Body,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        owner_references: list[dict[str, Any]],
    ) -> str: ...
    def get_pod(
        self, namespace: str, name: str, *, confirm: bool = False
    ) -> dict[str, Any] | None: ...
    def create_pod(self, pod: dict[str, Any], owner_uid: str) -> dict[str, Any]: ...
    def delete_pod(
        self, namespace: str, name: str, uid: str, version: str | None = None
    ) -> None: ...
    def pods_labelled(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]: ...
    def patch_object(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...
    def patch_json(
        self, plural: str, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]: ...
    def shorten_pod_deadline(self, namespace: str, name: str, uid: str, seconds: int) -> None: ...
    def delete_worker(self, namespace: str, name: str, uid: str) -> None: ...
    def ensure_access(self, objects: list[dict[str, Any]]) -> bool: ...
    def listed(self, plural: str, namespace: str, selector: str) -> list[dict[str, Any]]: ...
    def create_account(self, account: dict[str, Any]) -> dict[str, Any]: ...
    def delete_account(self, namespace: str, name: str, uid: str) -> None: ...
    def set_role_rules(self, namespace: str, name: str, rules: list[dict[str, Any]]) -> bool: ...


# Runtime Roles whose last written rules a process remembers (see Storage.set_role_rules).
ROLES_REMEMBERED = 10_000


@dataclass
class Storage:
    """The repository on an API server. With a `store`, reads come from the operator's
    watches and writes go through to it; a miss is read from the API (the store may not
    have seen an object yet)."""

    api: Api
    store: Store | None = None
    events: Recorder = field(init=False)
    # A digest of the rules this process last wrote to a runtime's Role (`set_role_rules`),
    # for the latest ROLES_REMEMBERED Roles: a Role forgotten costs one write again.
    _role_rules: OrderedDict[tuple[str, str], int] = field(init=False, default_factory=OrderedDict)
    _role_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.events = Recorder(self.api)

    def _remember(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """A body a write returned, into the store (its echo is no news)."""
        if self.store is not None and body:
            self.store.wrote(plural, body)
        return body

    def _read(self, plural: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        """A body read from the API past the store, into the store (its event is news)."""
        if self.store is not None and body:
            self.store.read(plural, body)
        return body or None

    # --- generic ---------------------------------------------------------

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.store is not None and (found := self.store.get(plural, namespace, name)):
            return found
        return self._read(plural, self.api.get(plural, namespace, name))

    def items(
        self, plural: str, namespace: str, selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        try:
            found = self.api.list(plural, namespace, labels=selector or "")
        except ApiError as e:
            if e.status == 404:  # the CRD is not installed (yet)
                return iter(())
            raise
        return iter(found.get("items", []))

    def of_agent(self, plural: str, namespace: str, agent: str) -> list[dict[str, Any]]:
        """The profiles, revisions or workers of `agent`, from the store's index once it has
        one (the operator's handlers run only after their watches listed everything)."""
        if self.store is not None:
            return self.store.of_agent(plural, namespace, agent)
        selector = f"{AGENT_LABEL}={agent}" if plural == "agentconfigrevisions" else None
        return [
            item
            for item in self.items(plural, namespace, selector)
            if (item.get("spec") or {}).get("agent") == agent
        ]

    def in_namespace(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of a kind in the namespace, from the store once it has one."""
        if self.store is not None:
            return self.store.in_namespace(plural, namespace)
        return list(self.items(plural, namespace))

    def children(self, namespace: str, parent: str) -> list[str]:
        if self.store is not None:
            return self.store.children(namespace, parent)
        return sorted(
            meta(w).name
            for w in self.items("workers", namespace)
            if (w.get("spec") or {}).get("parent") == parent
        )

    def workload_of(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """Kueue's Workload for a queued run's pod, as the watch last saw it: the reason its
        pod waits, for the Worker's status. From the store only (its watch runs where Kueue's
        CRD exists), never a read on the pass's path; None without one."""
        return self.store.workload_of(namespace, pod) if self.store is not None else None

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> str | None:
        """Merge-patch the status subresource; a vanished object is nothing to report on.

        With `resource_version`, the patch applies only to that version (409 otherwise):
        for status that another writer (a worker's runtime) shares. Returns the new version.
        """
        patch: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        try:
            found = self.api.patch(plural, namespace, name, patch, subresource="status")
        except ApiError as e:
            if e.status != 404:
                raise
            return None
        return meta(self._remember(plural, found)).resource_version

    # --- revisions -------------------------------------------------------

    def revisions(self, namespace: str, agent: str) -> list[ExistingRevision]:
        return [
            ExistingRevision(
                name=meta(r).name,
                revision=int(r["spec"]["revision"]),
                digest=r["spec"]["digest"],
                owner_uid=next((o.uid for o in references(r) if o.controller), None),
            )
            for r in self.of_agent("agentconfigrevisions", namespace, agent)
        ]

    def create_revision(
        self, config: Body, spec: AgentConfigRevisionSpec, applied_by: str = ""
    ) -> ExistingRevision:
        """Create the revision, or adopt the one a crashed earlier pass made with this content."""
        owner = meta(config)
        namespace = owner.namespace
        name = revision_name(spec.agent, spec.revision)
        body = {
            "apiVersion": API_VERSION,
            "kind": "AgentConfigRevision",
            "metadata": {
                "name": name,
                "labels": {AGENT_LABEL: spec.agent},
                "ownerReferences": [owner_reference(config)],
                **({"annotations": {APPLIED_BY_ANNOTATION: applied_by}} if applied_by else {}),
            },
            "spec": spec.wire(),
        }
        try:
            self._remember(
                "agentconfigrevisions", self.api.create("agentconfigrevisions", namespace, body)
            )
        except ApiError as e:
            if e.status != 409:
                raise
            existing = self.get("agentconfigrevisions", namespace, name) or {}
            same = existing.get("spec", {}).get("digest") == spec.digest
            if not same or not owned_by(existing, owner.uid):
                raise Conflict(
                    f"AgentConfigRevision {name} exists with other content or another owner"
                ) from e
        return ExistingRevision(name, spec.revision, spec.digest, owner.uid)

    def delete_revision(self, namespace: str, name: str) -> None:
        self._delete("agentconfigrevisions", namespace, name)
        if self.store is not None:
            self.store.forget(
                "agentconfigrevisions", {"metadata": {"namespace": namespace, "name": name}}
            )

    def delete_worker(self, namespace: str, name: str, uid: str) -> None:
        """Delete this Worker (not a later one of its name); the garbage collector takes
        what it owns."""
        self._delete("workers", namespace, name, {"preconditions": {"uid": uid}})

    def _delete(
        self, plural: str, namespace: str, name: str, options: Mapping[str, Any] | None = None
    ) -> None:
        """Delete; gone already, or (409) no longer the object the preconditions name: done."""
        try:
            self.api.delete(plural, namespace, name, options)
        except ApiError as e:
            if e.status not in (404, 409):
                raise

    def pinned_revisions(self, namespace: str, agent: str) -> set[str]:
        """Revisions a live Worker of the agent pins (they outlive the history limit)."""
        return pinned_by(agent, self.of_agent("workers", namespace, agent))

    def post_event(self, body: Body, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on `body` (best effort, once: see `Recorder`)."""
        self.events.post(body, type_, reason, message)

    # --- workers and their pods ------------------------------------------

    def revision_spec(self, namespace: str, name: str) -> AgentConfigRevisionSpec | None:
        found = self.get("agentconfigrevisions", namespace, name)
        return AgentConfigRevisionSpec.model_validate(found["spec"]) if found else None

    def patch_metadata(
        self,
        plural: str,
        body: Body,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        owner_references: list[dict[str, Any]],
    ) -> str:
        """Add annotations and labels, only if the object is still the version we read.

        The resourceVersion precondition makes a write like the binding happen exactly
        once: a second writer gets a 409 and re-reads instead of overwriting.
        """
        read = meta(body)
        patch = {
            "metadata": {
                "resourceVersion": read.resource_version,
                "annotations": dict(annotations),
                "labels": dict(labels),
                "ownerReferences": owner_references,
            }
        }
        found = self.api.patch(plural, read.namespace, read.name, patch)
        return meta(self._remember(plural, found)).resource_version

    def get_pod(self, namespace: str, name: str, *, confirm: bool = False) -> dict[str, Any] | None:
        """The pod, as the store has it; `confirm`: a pod the store lacks is looked for in
        the API (before a decision that a missing pod would make final)."""
        if self.store is not None:
            found = self.store.get("pods", namespace, name)
            if found is not None or not confirm:
                return found
        return self._read("pods", self.api.get("pods", namespace, name))

    def create_pod(self, pod: dict[str, Any], owner_uid: str) -> dict[str, Any]:
        """Create the pod, or adopt the one an earlier pass made (same owner); else Conflict."""
        namespace, name = meta(pod).namespace, meta(pod).name
        try:
            return self._remember("pods", self.api.create("pods", namespace, pod))
        except ApiError as e:
            if e.status != 409:
                raise
        existing = self.get_pod(namespace, name, confirm=True)
        if existing is None or not owned_by(existing, owner_uid):
            raise Conflict(f"a pod named {name} exists and is not this worker's")
        return existing

    def delete_pod(self, namespace: str, name: str, uid: str, version: str | None = None) -> None:
        """Delete the pod of this uid now; gone already, or another pod by now: nothing to do.
        With `version`, only that version of it (a warm pod a run has not claimed since)."""
        preconditions = {"uid": uid, **({"resourceVersion": version} if version else {})}
        self._delete(
            "pods", namespace, name, {"gracePeriodSeconds": 0, "preconditions": preconditions}
        )

    def shorten_pod_deadline(self, namespace: str, name: str, uid: str, seconds: int) -> None:
        """Lower the pod's activeDeadlineSeconds (the API server lets it only go down); gone
        already, or another pod by now (its uid differs: refused): nothing to do."""
        patch = {"metadata": {"uid": uid}, "spec": {"activeDeadlineSeconds": seconds}}
        try:
            found = self.api.patch("pods", namespace, name, patch)
        except ApiError as e:
            if e.status in (404, 409, 422):
                return
            raise
        self._remember("pods", found)

    def pods_labelled(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        """The pods whose `label` is `value`, from the store's index once it has one."""
        if self.store is not None:
            return self.store.pods_labelled(namespace, label, value)
        return list(self.items("pods", namespace, f"{label}={value}"))

    def patch_object(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A merge patch (a `metadata.resourceVersion` in it is a precondition: 409)."""
        found = self.api.patch(plural, namespace, name, dict(patch))
        return self._remember(plural, found) if plural in TRIM else found

    def patch_json(
        self, plural: str, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """A JSON patch (RFC 6902), applied whole or not at all: a failed `test` operation
        (a precondition) is refused with 422 (a `test` of null: the field is absent)."""
        found = self.api.patch(
            plural, namespace, name, [dict(op) for op in ops], content_type=JSON_PATCH
        )
        return self._remember(plural, found) if plural in TRIM else found

    # --- a worker runtime's own account ------------------------------------

    def ensure_access(self, objects: list[dict[str, Any]]) -> bool:
        """Create the runtime's ServiceAccount, Role and RoleBinding; existing ones are kept.
        Returns whether the Role was created (else it existed, with rules of its own)."""
        created_role = False
        for obj in objects:
            plural = {"ServiceAccount": "serviceaccounts", "Role": "roles"}.get(
                obj["kind"], "rolebindings"
            )
            try:
                self.api.create(plural, meta(obj).namespace, obj)
                created_role = created_role or obj["kind"] == "Role"
            except ApiError as e:
                if e.status != 409:
                    raise
        return created_role

    def listed(self, plural: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The objects `selector` selects, from the API itself (never the store)."""
        return list(self.items(plural, namespace, selector))

    def create_account(self, account: dict[str, Any]) -> dict[str, Any]:
        return self.api.create("serviceaccounts", meta(account).namespace, account)

    def delete_account(self, namespace: str, name: str, uid: str) -> None:
        """Delete the ServiceAccount of this uid; gone, or another by now: nothing to do."""
        self._delete("serviceaccounts", namespace, name, {"preconditions": {"uid": uid}})

    def set_role_rules(self, namespace: str, name: str, rules: list[dict[str, Any]]) -> bool:
        """Replace a Role's rules; False when the Role does not exist (yet). The rules this
        process wrote last are not written again: the same grant, asked again, is free."""
        key = (namespace, name)
        digest = hash(json.dumps(rules, sort_keys=True))  # as the store judges news
        with self._role_lock:
            if self._role_rules.get(key) == digest:
                return True
        try:
            self.api.patch("roles", namespace, name, {"rules": rules})
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        with self._role_lock:
            self._role_rules[key] = digest
            self._role_rules.move_to_end(key)
            while len(self._role_rules) > ROLES_REMEMBERED:
                self._role_rules.popitem(last=False)
        return True
