"""The agentworkers custom resources as CRDs: for each kind, its names, its spec and status
models, its printer columns and the CEL rules the models alone cannot carry.
`agentworkers.api.crdgen` makes `crds/` from `RESOURCES` (`make crds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentworkers.api.agentconfig import AgentConfigSpec, AgentConfigStatus
from agentworkers.api.common import GROUP, VERSION, KubeModel
from agentworkers.api.profile import VirtualAgentProfileSpec, VirtualAgentProfileStatus
from agentworkers.api.provider import ModelProviderSpec
from agentworkers.api.quota import TokenQuotaSpec, TokenQuotaStatus
from agentworkers.api.revision import AgentConfigRevisionSpec
from agentworkers.api.worker import WorkerSpec, WorkerStatus

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
# Label values hold at most 63 characters; the names of agents and workers go into labels.
MAX_LABEL_NAME = 63


@dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    description: str
    spec: type[KubeModel]
    status: type[KubeModel] | None
    short_names: tuple[str, ...]
    printer_columns: tuple[Mapping[str, object], ...]
    root_rules: tuple[Mapping[str, object], ...] = field(default=())
    # A bound on metadata.name (the only metadata a CRD schema may restrict), if any.
    max_name_length: int | None = None
    group: str = GROUP
    version: str = VERSION
    categories: tuple[str, ...] = (CATEGORY,)
    # Written by users (not only by the operator): unknown spec fields are refused by
    # name at admission rather than pruned by the API server.
    user_written: bool = True


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
        column("Warm", ".status.warmPool.ready", "integer"),
        column("Claimed", ".status.warmPool.claimed", "integer", priority=1),
        column("Starting", ".status.warmPool.starting", "integer", priority=1),
        condition_column("Ready", "Ready"),
        condition_column("Reason", "Ready", "reason"),
        AGE,
    ),
    max_name_length=MAX_LABEL_NAME,
)

AGENT_CONFIG_REVISION = Resource(
    kind="AgentConfigRevision",
    plural="agentconfigrevisions",
    description="An immutable snapshot, written by the operator, of an AgentConfig's spec and "
    "its frozen virtual-agent profile map, with a digest. Workers pin it.",
    spec=AgentConfigRevisionSpec,
    status=None,
    user_written=False,
    short_names=("acr",),
    printer_columns=(
        column("Agent", ".spec.agent"),
        column("Revision", ".spec.revision", "integer"),
        column("Digest", ".spec.digest", priority=1),
        AGE,
    ),
    root_rules=(
        {
            "rule": "self.spec == oldSelf.spec",
            "message": "an AgentConfigRevision is immutable",
            "fieldPath": ".spec",
        },
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
    root_rules=(
        # A profile moved to another agent would linger in the first agent's map.
        {
            "rule": "self.spec.agent == oldSelf.spec.agent",
            "message": "spec.agent is immutable: delete the profile and create it for the "
            "other agent",
            "fieldPath": ".spec.agent",
        },
    ),
)


def _fixed(field: str) -> Mapping[str, str]:
    """A spec field that keeps the value (or absence) it was created with."""
    return {
        "rule": f"has(self.spec.{field}) == has(oldSelf.spec.{field}) && "
        f"(!has(self.spec.{field}) || self.spec.{field} == oldSelf.spec.{field})",
        "message": f"spec.{field} is immutable",
        "fieldPath": f".spec.{field}",
    }


WORKER = Resource(
    kind="Worker",
    plural="workers",
    description="One agent run, in one pod. Spawn by creating it; query by appending to "
    "spec.queries; kill by setting spec.kill; collect with the agentworkers client or CLI.",
    spec=WorkerSpec,
    status=WorkerStatus,
    short_names=("wk",),
    printer_columns=(
        column("Phase", ".status.phase"),
        column("Agent", ".spec.agent"),
        column("Profile", ".spec.profile"),
        column("Parent", ".spec.parent"),
        column("Inherits", ".status.inherited.profile"),
        column("Queue", ".status.queue"),
        column("Last Event", ".status.lastEvent"),
        column("Pod", ".status.pod", priority=1),
        column("Revision", ".status.revision", priority=1),
        AGE,
    ),
    max_name_length=MAX_LABEL_NAME,
    root_rules=(
        _fixed("agent"),
        _fixed("parent"),
        _fixed("profile"),
        _fixed("traceparent"),
        {
            # Names and digests, not the content (its size would cost the rule too much):
            # the run checks the content against the digest.
            "rule": "has(self.spec.inputs) == has(oldSelf.spec.inputs) && "
            "(!has(self.spec.inputs) || self.spec.inputs.map(i, i.name + ':' + i.sha256) == "
            "oldSelf.spec.inputs.map(i, i.name + ':' + i.sha256))",
            "message": "spec.inputs is immutable",
            "fieldPath": ".spec.inputs",
        },
        {
            "rule": "!has(self.spec.profile) || has(self.spec.parent)",
            "message": "spec.profile needs spec.parent: a parent worker applies a virtual profile",
            "fieldPath": ".spec.parent",
        },
        {
            "rule": "!has(self.spec.reasoningAPI) || !has(self.spec.provider) || "
            "self.spec.provider == 'anthropic'",
            "message": "spec.reasoningAPI is Anthropic's thinking: it needs provider anthropic",
            "fieldPath": ".spec.reasoningAPI",
        },
        {
            # Admission's check (core.checks.check_kind), for creates no webhook sees; on
            # creates only, so that Workers 0.1.0 made for a parent (kind static) still update.
            "rule": "oldSelf.hasValue() || !has(self.spec.kind) || "
            "(self.spec.kind == 'dynamic') == has(self.spec.parent)",
            "optionalOldSelf": True,
            "message": "spec.kind disagrees with spec.parent: a run with a parent is dynamic, "
            "a top-level run is static",
            "fieldPath": ".spec.kind",
        },
        {
            "rule": "!has(oldSelf.spec.kill) || "
            "(has(self.spec.kill) && self.spec.kill == oldSelf.spec.kill)",
            "message": "spec.kill cannot be changed or taken back once set",
            "fieldPath": ".spec.kill",
        },
        {
            "rule": "!has(oldSelf.spec.queries) || (has(self.spec.queries) && "
            "self.spec.queries.size() >= oldSelf.spec.queries.size() && "
            "self.spec.queries.slice(0, oldSelf.spec.queries.size()) == oldSelf.spec.queries)",
            "message": "spec.queries is append-only",
            "fieldPath": ".spec.queries",
        },
    ),
)

MODEL_PROVIDER = Resource(
    kind="ModelProvider",
    plural="modelproviders",
    description="A model endpoint defined once per namespace: its API, endpoint, key Secret "
    "and default model, referenced by AgentConfigs (spec.model.providerRef). Each run "
    "resolves it when it starts and mounts only its key.",
    spec=ModelProviderSpec,
    status=None,
    short_names=("mp",),
    printer_columns=(
        column("API", ".spec.api"),
        column("Endpoint", ".spec.endpoint"),
        column("Default Model", ".spec.defaultModel"),
        column("Key", ".spec.apiKeySecret", priority=1),
        AGE,
    ),
)

TOKEN_QUOTA = Resource(
    kind="TokenQuota",
    plural="tokenquotas",
    description="The tokens a namespace, or one agent in it, may use per calendar window "
    "(hour, day, month, UTC). A spawn whose own token budget does not fit in what is left is "
    "refused at admission (TokenQuotaExceeded); usage is summed from the Workers' reported "
    "tokens onto the status, where it outlives them.",
    spec=TokenQuotaSpec,
    status=TokenQuotaStatus,
    short_names=("tq",),
    printer_columns=(
        column("Agent", ".spec.agent", description="Only this agent's runs (none: all)."),
        column("Window", ".spec.window"),
        column("Limit", ".spec.tokens", "integer", description="Tokens per window."),
        column("Used", ".status.used", "integer", description="Used in this window."),
        column("Reserved", ".status.reserved", "integer", description="Live runs may still use."),
        column("Remaining", ".status.remaining", "integer"),
        column("Resets", ".status.resetsAt", "date", description="When the window ends."),
        AGE,
    ),
)

RESOURCES: tuple[Resource, ...] = (
    AGENT_CONFIG,
    AGENT_CONFIG_REVISION,
    VIRTUAL_AGENT_PROFILE,
    WORKER,
    MODEL_PROVIDER,
    TOKEN_QUOTA,
)
