"""An in-memory `Repository`: the API server as the controller sees it, for table tests.

It keeps resource versions and refuses a stale precondition with a 409, as the API server
does and as `Storage` reports it (an `ApiError`, which `Requeue` retries); it records
every write and Event, so a test asserts what a user would see.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from agentworkers.api import AgentConfigRevisionSpec
from agentworkers.api.names import APPLIED_BY_ANNOTATION
from agentworkers.core.owners import owned_by
from agentworkers.core.revisions import ExistingRevision, pinned_by, revision_name
from agentworkers.errors import ApiError
from agentworkers.kube.api import refusal
from agentworkers.kube.repository import Conflict

Body = dict[str, Any]


@dataclass
class Memory:
    """Objects by (plural, namespace, name); pods under "pods", RBAC under its kinds."""

    objects: dict[tuple[str, str, str], Body] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, type, reason
    writes: list[tuple[str, str, str]] = field(default_factory=list)  # verb, plural, name
    _versions: Iterator[int] = field(default_factory=lambda: itertools.count(100))
    _rules_set: dict[tuple[str, str], list[Body]] = field(default_factory=dict)

    # --- setting the scene --------------------------------------------------------

    def put(self, plural: str, body: Body) -> Body:
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", "ns")
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", "2030-01-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(plural, meta["namespace"], meta["name"])] = body
        return copy.deepcopy(body)

    def find(self, plural: str, name: str, namespace: str = "ns") -> Body | None:
        return copy.deepcopy(self.objects.get((plural, namespace, name)))

    def reasons(self, name: str) -> list[str]:
        return [reason for who, _, reason, _ in self.events if who == name]

    # --- the Repository -----------------------------------------------------------

    def get(self, plural: str, namespace: str, name: str) -> Body | None:
        return self.find(plural, name, namespace)

    def items(self, plural: str, namespace: str, selector: str | None = None) -> Iterator[Body]:
        return iter(
            copy.deepcopy(b)
            for (p, ns, _), b in self.objects.items()
            if (p, ns) == (plural, namespace)
        )

    def of_agent(self, plural: str, namespace: str, agent: str) -> list[Body]:
        return [
            b for b in self.items(plural, namespace) if (b.get("spec") or {}).get("agent") == agent
        ]

    def in_namespace(self, plural: str, namespace: str) -> list[Body]:
        return list(self.items(plural, namespace))

    def workload_of(self, namespace: str, pod: str) -> Body | None:
        return next(
            (
                b
                for b in self.items("workloads", namespace)
                if pod in {o.get("name") for o in b["metadata"].get("ownerReferences") or []}
            ),
            None,
        )

    def children(self, namespace: str, parent: str) -> list[str]:
        return sorted(
            b["metadata"]["name"]
            for b in self.items("workers", namespace)
            if b["spec"].get("parent") == parent
        )

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> str | None:
        body = self.objects.get((plural, namespace, name))
        if body is None:
            return None
        self._precondition(plural, body, resource_version)
        merged = {**(body.get("status") or {}), **copy.deepcopy(dict(status))}
        for key, value in status.items():  # a merge patch's null removes a map's key
            if isinstance(value, dict) and None in value.values():
                old = (body.get("status") or {}).get(key) or {}
                merged[key] = {k: v for k, v in {**old, **value}.items() if v is not None}
        body["status"] = merged
        self.writes.append(("PATCH", f"{plural}/status", name))
        return self._bump(body)

    def revisions(self, namespace: str, agent: str) -> list[ExistingRevision]:
        return [
            ExistingRevision(
                r["metadata"]["name"], r["spec"]["revision"], r["spec"]["digest"], None
            )
            for r in self.of_agent("agentconfigrevisions", namespace, agent)
        ]

    def create_revision(
        self, config: Body, spec: AgentConfigRevisionSpec, applied_by: str = ""
    ) -> ExistingRevision:
        name = revision_name(spec.agent, spec.revision)
        namespace = config["metadata"]["namespace"]
        annotations = {APPLIED_BY_ANNOTATION: applied_by} if applied_by else {}
        self.put(
            "agentconfigrevisions",
            {
                "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
                "spec": spec.wire(),
            },
        )
        self.writes.append(("POST", "agentconfigrevisions", name))
        return ExistingRevision(name, spec.revision, spec.digest, config["metadata"]["uid"])

    def delete_revision(self, namespace: str, name: str) -> None:
        self.objects.pop(("agentconfigrevisions", namespace, name), None)

    def pinned_revisions(self, namespace: str, agent: str) -> set[str]:
        return pinned_by(agent, self.of_agent("workers", namespace, agent))

    def post_event(self, body: Body, type_: str, reason: str, message: str) -> None:
        self.events.append((body["metadata"]["name"], type_, reason, message))

    def revision_spec(self, namespace: str, name: str) -> AgentConfigRevisionSpec | None:
        found = self.find("agentconfigrevisions", name, namespace)
        return AgentConfigRevisionSpec.model_validate(found["spec"]) if found else None

    def patch_metadata(
        self,
        plural: str,
        body: Body,
        annotations: Mapping[str, str],
        labels: Mapping[str, str],
        owner_references: list[dict[str, Any]],
    ) -> str:
        meta = body["metadata"]
        kept = self.objects[(plural, meta["namespace"], meta["name"])]
        self._precondition(plural, kept, meta["resourceVersion"])
        kept_meta = kept["metadata"]
        kept_meta["annotations"] = {**(kept_meta.get("annotations") or {}), **annotations}
        kept_meta["labels"] = {**(kept_meta.get("labels") or {}), **labels}
        kept_meta["ownerReferences"] = owner_references
        self.writes.append(("PATCH", plural, meta["name"]))
        return self._bump(kept)

    def get_pod(self, namespace: str, name: str, *, confirm: bool = False) -> Body | None:
        return self.find("pods", name, namespace)

    def create_pod(self, pod: Body, owner_uid: str) -> Body:
        name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
        existing = self.find("pods", name, namespace)
        if existing is not None:
            if not owned_by(existing, owner_uid):
                raise Conflict(f"a pod named {name} exists and is not this worker's")
            return existing
        self.writes.append(("POST", "pods", name))
        return self.put("pods", pod)

    def delete_pod(self, namespace: str, name: str, uid: str, version: str | None = None) -> None:
        pod = self.objects.get(("pods", namespace, name))
        if pod is not None and pod["metadata"]["uid"] == uid:
            if version and version != pod["metadata"]["resourceVersion"]:
                return  # as the API server's 409, which Storage takes for done
            del self.objects[("pods", namespace, name)]
            self.writes.append(("DELETE", "pods", name))

    def shorten_pod_deadline(self, namespace: str, name: str, uid: str, seconds: int) -> None:
        pod = self.objects.get(("pods", namespace, name))
        if pod is not None and pod["metadata"]["uid"] == uid:
            assert seconds <= pod["spec"].get("activeDeadlineSeconds", seconds)  # the API's rule
            pod["spec"]["activeDeadlineSeconds"] = seconds
            self.writes.append(("PATCH", "pods", name))

    def pods_labelled(self, namespace: str, label: str, value: str) -> list[Body]:
        return [
            b
            for b in self.items("pods", namespace)
            if (b["metadata"].get("labels") or {}).get(label) == value
        ]

    def patch_object(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> Body:
        # Accounts are kept by their kind, as ensure_access keeps them.
        kind = {"serviceaccounts": "ServiceAccount"}.get(plural, plural)
        kept = self.objects.get((kind, namespace, name))
        if kept is None:
            raise ApiError("not found", 404)
        version = (patch.get("metadata") or {}).get("resourceVersion")
        if version and version != kept["metadata"]["resourceVersion"]:
            raise ApiError("the object has been modified", 409)
        _merge(kept, patch)
        self.writes.append(("PATCH", plural, name))
        self._bump(kept)
        return copy.deepcopy(kept)

    def patch_json(
        self, plural: str, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> Body:
        kind = {"serviceaccounts": "ServiceAccount"}.get(plural, plural)
        kept = self.objects.get((kind, namespace, name))
        if kept is None:
            raise ApiError("not found", 404)
        patched = copy.deepcopy(kept)
        for op in ops:
            # As the API server's JSON patch: a test of null passes where the field is absent.
            if op["op"] == "test" and op.get("value") is None:
                if jsonpointer.resolve_pointer(patched, op["path"], None) is not None:
                    raise ApiError(f"test failed: {op['path']} is present", 422)
                continue
            try:
                patched = jsonpatch.apply_patch(patched, [dict(op)])
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
                raise ApiError(str(e), 422) from None
        kept.clear()
        kept.update(patched)
        self.writes.append(("PATCH", plural, name))
        self._bump(kept)
        return copy.deepcopy(kept)

    def delete_worker(self, namespace: str, name: str, uid: str) -> None:
        worker = self.objects.get(("workers", namespace, name))
        if worker is not None and worker["metadata"]["uid"] == uid:
            del self.objects[("workers", namespace, name)]
            self.writes.append(("DELETE", "workers", name))

    def ensure_access(self, objects: list[Body]) -> bool:
        created_role = False
        for obj in objects:
            key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
            if key not in self.objects:
                self.objects[key] = copy.deepcopy(obj)
                self.writes.append(("POST", obj["kind"], obj["metadata"]["name"]))
                created_role = created_role or obj["kind"] == "Role"
        return created_role

    def listed(self, plural: str, namespace: str, selector: str) -> list[Body]:
        kind = {"serviceaccounts": "ServiceAccount", "rolebindings": "RoleBinding"}.get(
            plural, plural
        )
        label, has_value, value = selector.partition("=")
        return [
            copy.deepcopy(b)
            for (k, ns, _), b in self.objects.items()
            if (k, ns) == (kind, namespace)
            and label in (labels := b["metadata"].get("labels") or {})
            and (not has_value or labels[label] == value)
        ]

    def create_account(self, account: Body) -> Body:
        meta = account["metadata"]
        key = ("ServiceAccount", meta["namespace"], meta["name"])
        if key in self.objects:
            raise ApiError("already exists", 409)
        made = copy.deepcopy(account)
        made["metadata"]["uid"] = f"uid-{meta['name']}"
        self.objects[key] = made
        self.writes.append(("POST", "ServiceAccount", meta["name"]))
        return copy.deepcopy(made)

    def delete_account(self, namespace: str, name: str, uid: str) -> None:
        kept = self.objects.get(("ServiceAccount", namespace, name))
        if kept is not None and kept["metadata"].get("uid") == uid:
            del self.objects[("ServiceAccount", namespace, name)]
            self.writes.append(("DELETE", "ServiceAccount", name))

    def set_role_rules(self, namespace: str, name: str, rules: list[Body]) -> bool:
        role = self.objects.get(("Role", namespace, name))
        if role is None:
            return False
        if self._rules_set.get((namespace, name)) == rules:
            return True  # as the operator's Storage: the rules it set last, not again
        self._rules_set[(namespace, name)] = copy.deepcopy(rules)
        role["rules"] = copy.deepcopy(rules)
        self.writes.append(("PATCH", "Role", name))
        return True

    # --- what the API server does -------------------------------------------------

    def _precondition(self, plural: str, body: Body, version: str | None) -> None:
        if version and version != body["metadata"]["resourceVersion"]:
            name = body["metadata"]["name"]
            status = {
                "kind": "Status",
                "status": "Failure",
                "reason": "Conflict",
                "code": 409,
                "message": f'Operation cannot be fulfilled on {plural} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            }
            raise refusal(409, "Conflict", json.dumps(status))

    def _bump(self, body: Body) -> str:
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        return str(body["metadata"]["resourceVersion"])


def _merge(into: Body, patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386), as the API server applies one."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
