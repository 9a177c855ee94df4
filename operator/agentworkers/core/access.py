"""The least privilege a worker's runtime gets. Pure: names and RBAC objects.

Each Worker has its own ServiceAccount and Role, owned by it. The Role lets the
runtime read its own Worker and patch its own status, read its agent's config and
revisions (to re-verify its profile pin), create Workers (admission lets it create
only children that name it as parent), and read, patch and delete its children,
whose names the operator adds to the Role as they are bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentworkers.api import GROUP
from agentworkers.api.names import IDENTITY_LABEL, WORKER_LABEL
from agentworkers.core.identities import is_pool_account
from agentworkers.core.objects import meta
from agentworkers.core.owners import owner_reference

ACCOUNT_PREFIX = "worker-"


def account_name(worker: str) -> str:
    return f"{ACCOUNT_PREFIX}{worker}"[:253]


def worker_of(username: str, namespace: str) -> str | None:
    """The worker whose runtime `username` is, from an admission request's user info."""
    prefix = f"system:serviceaccount:{namespace}:{ACCOUNT_PREFIX}"
    return username[len(prefix) :] if username.startswith(prefix) else None


def account_object(
    metadata: dict[str, Any], annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    """A runtime's ServiceAccount of `metadata`, its token mounted, with `annotations`
    (workload identity)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {**metadata, **({"annotations": dict(annotations)} if annotations else {})},
        "automountServiceAccountToken": True,
    }


def agent_account(
    config: Mapping[str, Any], name: str, label: str, annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    """An account the AgentConfig `config` owns (a warm pod's, a pooled one): named
    `name`, labelled `label` with its agent, goes with the agent."""
    agent = meta(config)
    metadata = {
        "name": name,
        "namespace": agent.namespace,
        "labels": {label: agent.name},
        "ownerReferences": [owner_reference(config)],
    }
    return account_object(metadata, annotations)


def role_rules(worker: str, agent: str, children: list[str]) -> list[dict[str, Any]]:
    own = [worker]
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [GROUP],
            "resources": ["workers"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": own,
        },
        {
            "apiGroups": [GROUP],
            "resources": ["workers/status"],
            "verbs": ["get", "patch", "update"],
            "resourceNames": own,
        },
        {"apiGroups": [GROUP], "resources": ["workers"], "verbs": ["create"]},
        {
            "apiGroups": [GROUP],
            "resources": ["agentconfigs"],
            "verbs": ["get"],
            "resourceNames": [agent],
        },
        {"apiGroups": [GROUP], "resources": ["agentconfigrevisions"], "verbs": ["get"]},
    ]
    if children:
        rules.append(
            {
                "apiGroups": [GROUP],
                "resources": ["workers"],
                "verbs": ["get", "list", "watch", "patch", "delete"],
                "resourceNames": sorted(set(children)),
            }
        )
    return rules


def access_objects(
    worker_body: dict[str, Any],
    agent: str,
    children: list[str],
    annotations: Mapping[str, str] | None = None,
    account: str | None = None,
) -> list[dict[str, Any]]:
    """ServiceAccount (with `annotations`: workload identity), Role and RoleBinding of one
    worker's runtime, owned by the Worker. `account`: the ServiceAccount the RoleBinding
    binds instead of the run's own (a warm pod's, once the run claimed it, or a pooled
    one: the RoleBinding then carries its name, so the pool sees when none names it)."""
    worker = meta(worker_body)
    name = account_name(worker.name)
    owned: dict[str, Any] = {
        "name": name,
        "namespace": worker.namespace,
        "labels": {WORKER_LABEL: worker.name},
        "ownerReferences": [owner_reference(worker_body)],
    }
    pooled = {IDENTITY_LABEL: account} if account and is_pool_account(account) else {}
    return [
        account_object(owned, annotations),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": owned,
            "rules": role_rules(worker.name, agent, children),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {**owned, "labels": {**owned["labels"], **pooled}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {"kind": "ServiceAccount", "name": account or name, "namespace": worker.namespace}
            ],
        },
    ]
