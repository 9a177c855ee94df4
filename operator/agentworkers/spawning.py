"""Spawn-time and run-start checks of a virtual-profile child. Pure: callers bring the objects.

At spawn (admission, then the handler): the child's profile must come from its
parent's frozen map, the parent must not itself be a profile run, and the agent's
live revision must still be the one the parent froze. The accepted spawn gets a
Binding. At run start, the binding is verified against the agent's current map: a
restart reproduces the exact profile or does not run at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from agentworkers.api import AgentConfigRevisionSpec
from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.worker import WorkerSpec
from agentworkers.revisions import frozen_map
from agentworkers.virtualagent import (
    Binding,
    MissingProfileError,
    NoProfileMapError,
    Profile,
    ProfileRecursionError,
    TamperedBindingError,
    UnknownProfileError,
)

BINDING_ANNOTATION = "agentworkers.io/binding"


@dataclass(frozen=True)
class ParentRun:
    """What a spawn needs to know of the parent Worker."""

    name: str
    agent: str
    frozen: RevisionRef | None
    is_profile_run: bool


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
    if parent.is_profile_run:
        raise ProfileRecursionError(
            "spec.profile",
            f"parent {parent.name} is itself a virtual-profile run; it cannot apply a profile",
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
    frozen.verify_current()
    return binding


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


def verify_run_start(annotation: str | None, current: AgentConfigRevisionSpec | None) -> Profile:
    """The exact profile the run must use, checked against the agent's current map."""
    if annotation is None:
        raise TamperedBindingError(BINDING_ANNOTATION, "the binding annotation is gone")
    binding = decode_binding(annotation)
    if current is None:
        raise MissingProfileError(
            "spec.agent", f"agent {binding.agent_id!r} has no active revision"
        )
    return frozen_map(current).verify_pin(binding)
