"""The only code that calls the Kubernetes API. Everything above it deals in models."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

from agentworkers.api import GROUP, VERSION, AgentConfigRevisionSpec
from agentworkers.api.common import API_VERSION
from agentworkers.conditions import now, truncate
from agentworkers.revisions import ExistingRevision, pinned_by, revision_name

log = logging.getLogger(__name__)

AGENT_LABEL = f"{GROUP}/agent"
REVISION_LABEL = f"{GROUP}/revision"
FIELD_MANAGER = "agentworkers-operator"

Body = Mapping[str, Any]


class Conflict(Exception):
    """A child already exists under our deterministic name but is not ours."""


def ref(body: Body, *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to `body`, so the garbage collector removes the child with it."""
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "name": body["metadata"]["name"],
        "uid": body["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


@dataclass
class Storage:
    api: kubernetes.client.ApiClient

    @property
    def custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.api)

    # --- generic ---------------------------------------------------------

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
            return cast(dict[str, Any], found)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def items(
        self, plural: str, namespace: str, selector: str | None = None
    ) -> Iterator[dict[str, Any]]:
        try:
            found = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, label_selector=selector or ""
            )
        except ApiException as e:
            if e.status == 404:  # the CRD is not installed (yet)
                return iter(())
            raise
        return iter(cast(dict[str, Any], found).get("items", []))

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
            found = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, patch
            )
        except ApiException as e:
            if e.status != 404:
                raise
            return None
        return str(cast(dict[str, Any], found)["metadata"]["resourceVersion"])

    # --- revisions -------------------------------------------------------

    def revisions(self, namespace: str, agent: str) -> list[ExistingRevision]:
        return [
            ExistingRevision(
                name=r["metadata"]["name"],
                revision=int(r["spec"]["revision"]),
                digest=r["spec"]["digest"],
                owner_uid=next(
                    (
                        o["uid"]
                        for o in r["metadata"].get("ownerReferences", [])
                        if o.get("controller")
                    ),
                    None,
                ),
            )
            for r in self.items("agentconfigrevisions", namespace, f"{AGENT_LABEL}={agent}")
        ]

    def create_revision(self, config: Body, spec: AgentConfigRevisionSpec) -> ExistingRevision:
        """Create the revision, or adopt the one a crashed earlier pass made with this content."""
        namespace = config["metadata"]["namespace"]
        name = revision_name(spec.agent, spec.revision)
        body = {
            "apiVersion": API_VERSION,
            "kind": "AgentConfigRevision",
            "metadata": {
                "name": name,
                "labels": {AGENT_LABEL: spec.agent},
                "ownerReferences": [ref(config)],
            },
            "spec": spec.wire(),
        }
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentconfigrevisions", body
            )
        except ApiException as e:
            if e.status != 409:
                raise
            existing = self.get("agentconfigrevisions", namespace, name) or {}
            owners = [o.get("uid") for o in existing.get("metadata", {}).get("ownerReferences", [])]
            if (
                existing.get("spec", {}).get("digest") != spec.digest
                or config["metadata"]["uid"] not in owners
            ):
                raise Conflict(
                    f"AgentConfigRevision {name} exists with other content or another owner"
                ) from e
        return ExistingRevision(name, spec.revision, spec.digest, config["metadata"]["uid"])

    def delete_revision(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentconfigrevisions", name
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def pinned_revisions(self, namespace: str, agent: str) -> set[str]:
        """Revisions a live Worker of the agent pins (they outlive the history limit)."""
        return pinned_by(agent, self.items("workers", namespace))

    # --- events ----------------------------------------------------------

    def post_event(self, body: Body, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on `body`, as `kubectl describe` shows it.

        Best effort: an Event that cannot be posted never fails a handler."""
        meta = body["metadata"]
        stamp = now()
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": truncate(message),
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            kubernetes.client.CoreV1Api(self.api).create_namespaced_event(meta["namespace"], event)  # type: ignore[arg-type]
        except ApiException as e:
            log.warning(
                "could not post the %s Event on %s/%s: %s",
                reason,
                body["kind"],
                meta["name"],
                e.reason,
            )

    # --- workers and their pods ------------------------------------------

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api)

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
        meta = body["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": dict(annotations),
                "labels": dict(labels),
                "ownerReferences": owner_references,
            }
        }
        found = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], plural, meta["name"], patch
        )
        return str(cast(dict[str, Any], found)["metadata"]["resourceVersion"])

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            pod = self.core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return cast(dict[str, Any], self.api.sanitize_for_serialization(pod))  # type: ignore[no-untyped-call]

    def create_pod(self, pod: dict[str, Any], owner_uid: str) -> dict[str, Any]:
        """Create the pod, or adopt the one an earlier pass made (same owner); else Conflict."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            created = self.core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]
            return cast(dict[str, Any], self.api.sanitize_for_serialization(created))  # type: ignore[no-untyped-call]
        except ApiException as e:
            if e.status != 409:
                raise
        existing = self.get_pod(namespace, name)
        owners = [
            o.get("uid") for o in (existing or {}).get("metadata", {}).get("ownerReferences") or []
        ]
        if existing is None or owner_uid not in owners:
            raise Conflict(f"a pod named {name} exists and is not this worker's")
        return existing

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise

    # --- a worker runtime's own account ------------------------------------

    @property
    def rbac(self) -> kubernetes.client.RbacAuthorizationV1Api:
        return kubernetes.client.RbacAuthorizationV1Api(self.api)

    def ensure_access(self, objects: list[dict[str, Any]]) -> None:
        """Create the runtime's ServiceAccount, Role and RoleBinding; existing ones are kept."""
        create: dict[str, Callable[..., object]] = {
            "ServiceAccount": self.core.create_namespaced_service_account,
            "Role": self.rbac.create_namespaced_role,
            "RoleBinding": self.rbac.create_namespaced_role_binding,
        }
        for obj in objects:
            try:
                create[obj["kind"]](obj["metadata"]["namespace"], obj)
            except ApiException as e:
                if e.status != 409:
                    raise

    def set_role_rules(self, namespace: str, name: str, rules: list[dict[str, Any]]) -> bool:
        """Replace a Role's rules; False when the Role does not exist (yet)."""
        try:
            self.rbac.patch_namespaced_role(name, namespace, {"rules": rules})
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True
