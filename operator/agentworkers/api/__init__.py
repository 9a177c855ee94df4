"""The agentworkers custom resources: pydantic models of their specs and statuses (each
kind's CRD definition is in `agentworkers.api.crds`).
"""

from __future__ import annotations

from agentworkers.api.agentconfig import AgentConfigSpec, AgentConfigStatus
from agentworkers.api.common import API_VERSION, GROUP, VERSION, Condition, KubeModel
from agentworkers.api.profile import (
    ProfileEntry,
    VirtualAgentProfileSpec,
    VirtualAgentProfileStatus,
)
from agentworkers.api.quota import TokenQuotaSpec, TokenQuotaStatus
from agentworkers.api.revision import AgentConfigRevisionSpec, FrozenProfile, FrozenProfileMap
from agentworkers.api.worker import WorkerSpec, WorkerStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "AgentConfigRevisionSpec",
    "AgentConfigSpec",
    "AgentConfigStatus",
    "Condition",
    "FrozenProfile",
    "FrozenProfileMap",
    "KubeModel",
    "ProfileEntry",
    "TokenQuotaSpec",
    "TokenQuotaStatus",
    "VirtualAgentProfileSpec",
    "VirtualAgentProfileStatus",
    "WorkerSpec",
    "WorkerStatus",
]
