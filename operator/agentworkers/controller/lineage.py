"""Where a Worker sits in its tree: its parent run, and the profile run above it, if any.

A run below a profile run (its child, grandchild, ...) is bounded by that run's profile
and cannot select one of its own; both the spawn check (admission, handler) and the run
start ask these questions.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.worker import InheritedBounds, WorkerStatus
from agentworkers.core.spawning import ParentRun
from agentworkers.errors import UnknownWorkerError
from agentworkers.kube.repository import Repository

# How far up a parent chain the operator looks for a profile run (a bound on the reads).
MAX_ANCESTRY = 64


def parent_run(
    storage: Repository, namespace: str, parent_body: dict[str, Any] | None
) -> tuple[ParentRun | None, dict[str, Any] | None]:
    """What a spawn is checked against: the parent run, and the profile run (the parent
    itself or an ancestor) that bounds it, if any."""
    if parent_body is None:
        return None, None
    ancestor = profile_ancestor(storage, namespace, parent_body)
    bounded_by = (
        InheritedBounds(worker=ancestor["metadata"]["name"], profile=ancestor["spec"]["profile"])
        if ancestor is not None
        else None
    )
    parent = ParentRun(
        name=parent_body["metadata"]["name"],
        agent=(parent_body.get("spec") or {}).get("agent", ""),
        frozen=_frozen(parent_body),
        bounded_by=bounded_by,
    )
    return parent, ancestor


def profile_ancestor(
    storage: Repository, namespace: str, body: dict[str, Any]
) -> dict[str, Any] | None:
    """The nearest Worker from `body` up its parent chain that runs under a profile.

    A missing link fails closed: what cannot be shown unbounded is not treated as such.
    """
    for _ in range(MAX_ANCESTRY):
        spec = body.get("spec") or {}
        if spec.get("profile"):
            return body
        if not spec.get("parent"):
            return None
        found = storage.get("workers", namespace, spec["parent"])
        if found is None:
            raise UnknownWorkerError(
                field="spec.parent",
                rule=f"worker {spec['parent']!r}, an ancestor of this run, does not exist",
            )
        body = found
    raise UnknownWorkerError(
        field="spec.parent", rule=f"the parent chain is longer than {MAX_ANCESTRY}"
    )


def _frozen(body: dict[str, Any]) -> RevisionRef | None:
    try:
        return WorkerStatus.model_validate(body.get("status") or {}).frozen_revision
    except ValidationError:
        return None  # an unreadable status has frozen nothing the operator can trust
