"""Spawn-time and run-start checks of a virtual-profile child. Pure: callers bring the objects.

At spawn (admission, then the handler): the child's profile must come from its
parent's frozen map, the parent must not be a profile run nor run below one, and the
agent's live revision must still be the one the parent froze. The accepted spawn gets
a Binding. At run start, the binding is verified against the Worker's own spec and
the agent's current map: a restart reproduces the exact profile or does not run at all.
A run below a profile run (without a profile of its own) is bounded by that run's
profile: `ancestor_profile` is what it inherits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentworkers.api import AgentConfigRevisionSpec
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.names import BINDING_ANNOTATION
from agentworkers.api.worker import BindingSummary, InheritedBounds, WorkerSpec, WorkerStatus
from agentworkers.core.objects import meta
from agentworkers.core.revisions import frozen_map
from agentworkers.core.tracing import trace_id_of
from agentworkers.virtualagent import (
    Binding,
    MissingProfileError,
    NoProfileMapError,
    Profile,
    ProfileRecursionError,
    StaleProfilePinError,
    TamperedBindingError,
    UnknownProfileError,
    VirtualAgentError,
    validate_binding,
)
from agentworkers.virtualagent.errors import nested


@dataclass(frozen=True)
class ParentRun:
    """What a spawn needs to know of the parent Worker."""

    name: str
    agent: str
    frozen: RevisionRef | None
    # The profile run this run is (itself) or runs below (an ancestor); None: neither.
    bounded_by: InheritedBounds | None = None
    # When the parent's deadline runs out: its children's cannot run out later.
    deadline_at: str | None = None
    # The trace the parent's run is in (core.tracing): its children's runs are in it too.
    trace_id: int = 0


def profile_run(chain: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The nearest run of `chain` (a run, then every run above it) that runs under a
    profile."""
    return next((run for run in chain if (run.get("spec") or {}).get("profile")), None)


def parent_run(chain: Sequence[dict[str, Any]]) -> ParentRun | None:
    """What a spawn below `chain[0]` is checked against (`chain`: that run, then every run
    above it): the parent run, and the profile run that bounds it, if any."""
    if not chain:
        return None
    body = chain[0]
    ancestor = profile_run(chain)
    parent = meta(body)
    return ParentRun(
        name=parent.name,
        agent=(body.get("spec") or {}).get("agent", ""),
        frozen=_frozen(body),
        bounded_by=(
            InheritedBounds(worker=meta(ancestor).name, profile=ancestor["spec"]["profile"])
            if ancestor is not None
            else None
        ),
        deadline_at=(body.get("status") or {}).get("deadlineAt"),
        trace_id=trace_id_of((body.get("spec") or {}).get("traceparent"), parent.uid),
    )


def _frozen(body: dict[str, Any]) -> RevisionRef | None:
    try:
        return WorkerStatus.model_validate(body.get("status") or {}).frozen_revision
    except ValidationError:
        return None  # an unreadable status has frozen nothing the operator can trust


def check_spawn(
    child: WorkerSpec,
    parent: ParentRun | None,
    frozen_revision: AgentConfigRevisionSpec | None,
    live: RevisionRef | None,
) -> Binding:
    """The binding for a child that selects `child.profile`, or the seed's error."""
    key = child.profile or ""
    if parent is None:
        raise NoProfileMapError("spec.parent", f"parent worker {child.parent!r} does not exist")
    if parent.bounded_by is not None:
        where = (
            "is itself a virtual-profile run"
            if parent.bounded_by.worker == parent.name
            else f"runs below the virtual-profile run {parent.bounded_by.worker} "
            f"(profile {parent.bounded_by.profile!r})"
        )
        raise ProfileRecursionError(
            "spec.profile", f"parent {parent.name} {where}; it cannot apply a profile"
        )
    if parent.agent != child.agent:
        raise NoProfileMapError(
            "spec.agent", f"parent {parent.name} runs agent {parent.agent!r}, not {child.agent!r}"
        )
    if parent.frozen is None or frozen_revision is None:
        raise NoProfileMapError(
            "spec.parent", f"parent {parent.name} has not frozen a profile map (not started yet?)"
        )

    def read_live() -> tuple[str, str]:
        if live is None:
            raise MissingProfileError("spec.agent", f"agent {child.agent!r} has no active revision")
        return str(live.revision), live.digest

    frozen = frozen_map(frozen_revision, read_live)
    profile = frozen.profile(key)
    if profile is None:
        known = (
            ", ".join(sorted(p.profile.key for p in frozen_revision.profile_map.profiles)) or "none"
        )
        raise UnknownProfileError(
            "spec.profile",
            f"{key!r} is not in the map parent {parent.name} froze at revision "
            f"{frozen_revision.revision} (known: {known})",
        )
    binding = frozen.bind(profile)
    try:
        frozen.verify_current()
    except StaleProfilePinError as error:
        # The port names its own fields (revision_id); say it as a user meets it.
        now = f"is now at revision {live.revision}" if live else "has no active revision"
        raise StaleProfilePinError(
            "spec.profile",
            f"parent {parent.name} started on revision {frozen_revision.revision} of agent "
            f"{child.agent!r}, which {now}; its children take profiles from that revision "
            "only while it is current: start the parent again (or spawn from a run started "
            "since) to use the current profiles",
        ) from error
    return binding


def check_binding_write(
    annotations: Mapping[str, str], old: Mapping[str, Any] | None, by_operator: bool
) -> None:
    """Admission's rule: nobody but the operator sets, changes or removes a binding."""
    before = meta(old or {}).annotations
    after = annotations.get(BINDING_ANNOTATION)
    if by_operator or after == before.get(BINDING_ANNOTATION):
        return
    what = "set at creation" if old is None else "changed or removed"
    raise TamperedBindingError(
        f"metadata.annotations[{BINDING_ANNOTATION}]",
        f"only the operator writes a Worker's binding; it cannot be {what} by another client",
    )


def encode_binding(binding: Binding) -> str:
    return json.dumps(
        binding.model_dump(by_alias=True, exclude_none=True, mode="json"), sort_keys=True
    )


def decode_binding(text: str) -> Binding:
    """A binding read back from its annotation; anything unreadable is tampering."""
    try:
        return Binding.model_validate_json(text)
    except ValidationError as e:
        raise TamperedBindingError(
            BINDING_ANNOTATION, f"not a readable binding: {e.errors()[0]['msg']}"
        ) from e


def summary(binding: Binding) -> BindingSummary:
    """What the operator records in status when it binds: the key, hash and pin."""
    return BindingSummary(
        key=binding.key,
        label=binding.label,
        profile_hash=binding.profile_hash,
        revision=binding.config_revision_id,
        digest=binding.config_digest,
    )


def check_binding(
    child: WorkerSpec,
    annotation: str | None,
    recorded: BindingSummary | None,
    parent: ParentRun | None,
) -> Binding | None:
    """The binding a profiled Worker carries, if it is the one the operator wrote for it.

    None: never bound (the operator binds it now). `recorded` is the summary the operator
    put in status when it bound: a binding that is gone, or that differs from it, was
    tampered with. Whatever the annotation says, it must bind the profile, agent and
    parent revision the Worker's own spec names: a binding copied from another Worker
    does not.
    """
    if annotation is None:
        if recorded is None:
            return None
        raise TamperedBindingError(
            BINDING_ANNOTATION,
            f"the binding annotation is gone (the operator bound profile {recorded.key!r} "
            f"at revision {recorded.revision})",
        )
    binding = decode_binding(annotation)
    mismatches = [
        (field, bound, wanted)
        for field, bound, wanted in (
            ("key", binding.key, child.profile),
            ("agent", binding.agent_id, child.agent),
            ("parent", binding.parent, child.agent),
            ("revision", binding.config_revision_id, _frozen_id(parent)),
        )
        if wanted is not None and bound != wanted
    ]
    if mismatches:
        field, bound, wanted = mismatches[0]
        raise TamperedBindingError(
            BINDING_ANNOTATION,
            f"the binding's {field} is {bound!r}, but this Worker's is {wanted!r} "
            "(a binding made for another Worker)",
        )
    if recorded is not None and summary(binding) != recorded:
        raise TamperedBindingError(
            BINDING_ANNOTATION,
            f"the binding changed after the operator bound profile {recorded.key!r} "
            f"(hash {recorded.profile_hash[:12]}, revision {recorded.revision})",
        )
    return binding


def _frozen_id(parent: ParentRun | None) -> str | None:
    """The revision a child's binding must pin: the one its parent froze (if known)."""
    return str(parent.frozen.revision) if parent and parent.frozen else None


def verify_run_start(
    child: WorkerSpec,
    annotation: str | None,
    recorded: BindingSummary | None,
    parent: ParentRun | None,
    current: AgentConfigRevisionSpec | None,
) -> tuple[Binding, Profile]:
    """The binding and the exact profile the run must use: the binding is the Worker's
    own (`check_binding`) and still pins the agent's current map."""
    binding = check_binding(child, annotation, recorded, parent)
    if binding is None:
        raise TamperedBindingError(BINDING_ANNOTATION, "the Worker has no binding")
    if current is None:
        raise MissingProfileError(
            "spec.agent", f"agent {binding.agent_id!r} has no active revision"
        )
    try:
        return binding, frozen_map(current).verify_pin(binding)
    except StaleProfilePinError as error:
        raise StaleProfilePinError(
            "spec.profile",
            f"this run was bound to profile {binding.key!r} of revision "
            f"{binding.config_revision_id} of agent {binding.agent_id!r}, which is now at "
            f"revision {current.revision}; a profiled run starts only on the revision it was "
            "bound to: spawn it again from a parent started since",
        ) from error


def ancestor_profile(
    ancestor: WorkerSpec, annotation: str | None, recorded: BindingSummary | None
) -> Profile | None:
    """The profile a profile run's descendants are bounded by: the sealed snapshot of its
    own binding, checked like a run start's. None: the ancestor is not bound yet."""
    binding = check_binding(ancestor, annotation, recorded, None)
    if binding is None:
        return None
    try:
        validate_binding(binding)  # the sealed snapshot hashes to the pinned hash
    except VirtualAgentError as error:
        raise nested(error, BINDING_ANNOTATION, TamperedBindingError) from error
    if binding.profile is None:
        raise TamperedBindingError(BINDING_ANNOTATION, "the sealed profile snapshot is missing")
    return binding.profile
