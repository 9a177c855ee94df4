"""AgentConfigRevision: an immutable snapshot of an AgentConfig and its frozen profile map.

Written only by the operator, owned by its AgentConfig, never changed once created
(CEL `self == oldSelf`), like a Deployment's ReplicaSets or a ControllerRevision.
"""

from __future__ import annotations

from pydantic import Field, StrictInt, StrictStr

from agentworkers.api.agentconfig import AgentConfigSpec
from agentworkers.api.common import KubeModel
from agentworkers.virtualagent import Profile
from agentworkers.virtualagent.constants import HEX_DIGEST_PATTERN


class FrozenProfile(KubeModel):
    """One profile of the frozen map, with the hash a Worker's binding pins."""

    profile: Profile = Field(description="The canonical, normalised profile.")
    hash: StrictStr = Field(
        description="SHA-256 of the profile's canonical form.", pattern=HEX_DIGEST_PATTERN
    )
    source: StrictStr = Field(
        description="Where it was declared: `AgentConfig` (its virtualAgents section) or "
        "`VirtualAgentProfile/<name>`."
    )


class FrozenProfileMap(KubeModel):
    """The effective profile map of the revision, frozen: a reader never re-derives it."""

    owner: StrictStr = Field(description="The top-level agent owning every profile.")
    max_profiles: StrictInt = Field(description="The cap the map was validated against.")
    profiles: tuple[FrozenProfile, ...] = Field(
        default=(), description="The profiles, sorted by key."
    )


class AgentConfigRevisionSpec(KubeModel):
    """The snapshot. Immutable: a change to the AgentConfig cuts a new revision instead."""

    agent: StrictStr = Field(description="The AgentConfig this revision belongs to.")
    revision: StrictInt = Field(description="Revision id, monotonic per AgentConfig.", ge=1)
    digest: StrictStr = Field(
        description="SHA-256 of the canonical JSON of `config` and `profileMap` together.",
        pattern=HEX_DIGEST_PATTERN,
    )
    config: AgentConfigSpec = Field(description="The AgentConfig spec as it was.")
    profile_map: FrozenProfileMap = Field(description="The effective virtual-agent profile map.")
