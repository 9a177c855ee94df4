"""The agentworkers custom resources: pydantic models of their specs and statuses.

`RESOURCES` describes each one for the CRD generator (`agentworkers.crdgen`): kind,
names, printer columns and the CEL rules that the models alone cannot carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentworkers.api.agentconfig import AgentConfigSpec, AgentConfigStatus
from agentworkers.api.common import API_VERSION, GROUP, VERSION, Condition, KubeModel
from agentworkers.api.profile import (
    ProfileEntry,
    VirtualAgentProfileSpec,
    VirtualAgentProfileStatus,
)
from agentworkers.api.revision import AgentConfigRevisionSpec, FrozenProfile, FrozenProfileMap

CATEGORY = "agentworkers"


def column(
    name: str, path: str, kind: str = "string", priority: int = 0, description: str = ""
) -> Mapping[str, object]:
    col: dict[str, object] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        col["priority"] = priority
    if description:
        col["description"] = description
    return col


def condition_column(name: str, condition: str, what: str = "status") -> Mapping[str, object]:
    return column(name, f'.status.conditions[?(@.type=="{condition}")].{what}')


AGE = column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    description: str
    spec: type[KubeModel]
    status: type[KubeModel] | None
    short_names: tuple[str, ...]
    printer_columns: tuple[Mapping[str, object], ...]
    root_rules: tuple[Mapping[str, str], ...] = field(default=())
    group: str = GROUP
    version: str = VERSION
    categories: tuple[str, ...] = (CATEGORY,)


AGENT_CONFIG = Resource(
    kind="AgentConfig",
    plural="agentconfigs",
    description="A configured top-level agent: model defaults, skills, tools, limits, the pod "
    "its workers run in and its virtual-agent profiles. Its name is the agent id. Every change "
    "cuts an immutable AgentConfigRevision.",
    spec=AgentConfigSpec,
    status=AgentConfigStatus,
    short_names=("ac",),
    printer_columns=(
        column("Model", ".spec.model.model"),
        column("Revision", ".status.activeRevision.revision", "integer"),
        column("Profiles", ".status.profiles", "integer"),
        condition_column("Ready", "Ready"),
        condition_column("Reason", "Ready", "reason"),
        AGE,
    ),
)

AGENT_CONFIG_REVISION = Resource(
    kind="AgentConfigRevision",
    plural="agentconfigrevisions",
    description="An immutable snapshot, written by the operator, of an AgentConfig's spec and "
    "its frozen virtual-agent profile map, with a digest. Workers pin it.",
    spec=AgentConfigRevisionSpec,
    status=None,
    short_names=("acr",),
    printer_columns=(
        column("Agent", ".spec.agent"),
        column("Revision", ".spec.revision", "integer"),
        column("Digest", ".spec.digest", priority=1),
        AGE,
    ),
    root_rules=(
        {"rule": "self.spec == oldSelf.spec", "message": "an AgentConfigRevision is immutable"},
    ),
)

VIRTUAL_AGENT_PROFILE = Resource(
    kind="VirtualAgentProfile",
    plural="virtualagentprofiles",
    description="One virtual-agent profile of an AgentConfig, declared on its own: a bounded, "
    "narrow-only overlay a parent worker may apply to a child it spawns.",
    spec=VirtualAgentProfileSpec,
    status=VirtualAgentProfileStatus,
    short_names=("vap", "vaprofile"),
    printer_columns=(
        column("Agent", ".spec.agent"),
        column("Key", ".spec.key"),
        column("Label", ".spec.label", priority=1),
        condition_column("Accepted", "Accepted"),
        condition_column("Reason", "Accepted", "reason"),
        column("Revision", ".status.revision"),
        column("Hash", ".status.hash", priority=1),
        AGE,
    ),
)

RESOURCES: tuple[Resource, ...] = (AGENT_CONFIG, AGENT_CONFIG_REVISION, VIRTUAL_AGENT_PROFILE)

__all__ = [
    "API_VERSION",
    "GROUP",
    "RESOURCES",
    "VERSION",
    "AgentConfigRevisionSpec",
    "AgentConfigSpec",
    "AgentConfigStatus",
    "Condition",
    "FrozenProfile",
    "FrozenProfileMap",
    "KubeModel",
    "ProfileEntry",
    "Resource",
    "VirtualAgentProfileSpec",
    "VirtualAgentProfileStatus",
]
