"""VirtualAgentProfile: one virtual-agent profile declared on its own (the seed's YAML door).

The same profile can come in through an AgentConfig's `virtualAgents` section (the
revision door); both decode into the canonical `virtualagent.Profile`, normalise
and hash the same way. The fields and their documentation are the canonical
model's own, so the two doors cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt, StrictStr

from agentworkers.api.common import Condition, KubeModel, conditions_field
from agentworkers.virtualagent import Overlay, Profile

_CANON = Profile.model_fields


def _field(name: str, *, required: bool = False) -> Any:
    """The canonical Profile's field, description and schema bounds included."""
    if required:
        canon = _CANON[name]
        return Field(description=canon.description, json_schema_extra=canon.json_schema_extra)
    return _CANON[name]


class ProfileEntry(KubeModel):
    """A profile as declared: everything but its parent agent, which the door supplies."""

    key: StrictStr = _field("key", required=True)
    label: StrictStr = _field("label")
    overlay: Overlay = _field("overlay")
    input_patterns: tuple[StrictStr, ...] | None = _field("input_patterns")
    input_count: StrictInt = _field("input_count")
    input_disposition: StrictStr = _field("input_disposition")
    output_schema: dict[str, Any] | None = _field("output_schema")

    def to_profile(self, owner: str) -> Profile:
        """The canonical profile, owned by `owner` (the top-level agent)."""
        return Profile(parent=owner, **self.model_dump(exclude_none=True, exclude={"agent"}))


class VirtualAgentProfileSpec(ProfileEntry):
    """A standalone profile for one AgentConfig (named by `agent`)."""

    agent: StrictStr = Field(
        description=(
            "Name of the AgentConfig (the top-level agent) in this namespace that owns the "
            "profile. A profile of the same key in that AgentConfig's virtualAgents section "
            "wins over this one. Immutable: to give the profile to another agent, delete it "
            "and create it again."
        ),
        min_length=1,
    )

    def profile(self) -> Profile:
        """The canonical profile, owned by `agent`."""
        return self.to_profile(self.agent)


class VirtualAgentProfileStatus(KubeModel):
    """What the operator observed of the profile."""

    observed_generation: StrictInt | None = Field(
        default=None, description="The .metadata.generation this status describes."
    )
    hash: StrictStr | None = Field(
        default=None,
        description="SHA-256 of the profile's canonical form: the hash a Worker's binding pins.",
    )
    revision: StrictStr | None = Field(
        default=None,
        description="The AgentConfigRevision whose frozen map includes this profile, if any.",
    )
    conditions: tuple[Condition, ...] = conditions_field()
