"""AgentConfig: one configured top-level agent (its name is the agent id)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Self, get_args

from pydantic import (
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentworkers.api.common import (
    Condition,
    FieldValueError,
    KubeModel,
    MaxBytes,
    conditions_field,
)
from agentworkers.api.names import MAX_MCP_SERVER_NAME, MCP_SERVER_NAME_PATTERN
from agentworkers.api.profile import ProfileEntry
from agentworkers.api.provider import (
    PROVIDERS_TEXT,
    REASONING_API_TEXT,
    ModelProviderSpec,
    Provider,
    ReasoningAPI,
    reasoning_api_rule,
)
from agentworkers.api.tracing import Tracing
from agentworkers.virtualagent import (
    DEFAULT_MAX_PROFILES,
    MAX_INSTRUCTIONS_BYTES,
    MAX_MAX_STEPS,
    MAX_MAX_TOKEN_BUDGET,
    MAX_MAX_TOKENS,
    MAX_MODEL_LENGTH,
)

Name = StrictStr
DEFAULT_REVISION_HISTORY_LIMIT = 10
# A spawn tree's limits when its AgentConfig leaves them out (`spec.tree`).
DEFAULT_MAX_DEPTH = 5
DEFAULT_MAX_CHILDREN = 20
DEFAULT_MAX_LIVE_DESCENDANTS = 100


# The tools the runtime has built in: AgentConfig spec.tools is this enum, so an unknown
# name is refused at admission with the list. (MCP tools are offered by their server's
# allow-list, never listed here.)
BuiltinTool = Literal[
    "list_files",
    "read_file",
    "write_file",
    "run_command",
    "spawn_worker",
    "inspect_worker",
    "collect_worker",
    "kill_worker",
]
BUILTIN_TOOLS: Final[tuple[str, ...]] = get_args(BuiltinTool)


class ModelDefaults(KubeModel):
    """The model a worker of this agent talks to, unless a profile narrows it."""

    provider: Provider = Field(
        default="openai", description=f"Driver that talks to the model: {PROVIDERS_TEXT}."
    )
    model: Annotated[StrictStr, MaxBytes(MAX_MODEL_LENGTH)] | None = Field(
        default=None,
        description=f"Model name sent to the provider, at most {MAX_MODEL_LENGTH} bytes; "
        "may be left out with a providerRef that has a defaultModel.",
        min_length=1,
    )
    provider_ref: StrictStr | None = Field(
        default=None,
        description="A ModelProvider in this namespace: its api, endpoint and key stand for "
        "provider, baseURL and apiKeySecret (set either, not both), resolved when each run "
        "starts.",
        min_length=1,
    )
    base_url: StrictStr | None = Field(
        default=None,
        alias="baseURL",
        description="Base URL of the endpoint (e.g. http://vllm:8000/v1 for openai; for "
        "anthropic, without /v1); omit for the provider's public API.",
    )
    api_key_secret: StrictStr | None = Field(
        default=None,
        description="Secret (key `apiKey`) holding the endpoint's API key, mounted into every "
        "worker pod of this agent.",
    )
    temperature: StrictFloat | None = Field(
        default=None, description="Sampling temperature, 0 to 2.", ge=0, le=2
    )
    max_tokens: StrictInt | None = Field(
        default=None,
        description="Most tokens one model reply may use; a profile can only lower it.",
        ge=1,
        le=MAX_MAX_TOKENS,
    )
    reasoning_effort: Literal["off", "low", "medium", "high"] | None = Field(
        default=None, description="How hard the model thinks: off, low, medium or high."
    )
    reasoning_api: ReasoningAPI | None = Field(
        default=None,
        alias="reasoningAPI",
        description=f"{REASONING_API_TEXT} A Worker's own wins.",
    )
    script: list[dict[str, Any]] | None = Field(
        default=None,
        description="For the scripted provider: the steps it replies with ({reply}, {tool, "
        "args}, {thought}, {match, reply}); a Worker's own script wins.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        inline = self.model_fields_set & {"provider", "base_url", "api_key_secret"}
        if self.provider_ref is not None and inline:
            named = ", ".join(sorted(ModelDefaults.model_fields[f].alias or f for f in inline))
            raise ValueError(f"providerRef replaces {named}: set either, not both")
        if self.model is None and self.provider_ref is None:
            raise ValueError("model is required unless a providerRef gives a defaultModel")
        return self

    @field_validator("reasoning_api")
    @classmethod
    def _reasoning_api_with_anthropic(cls, value: str | None, info: ValidationInfo) -> str | None:
        # With a providerRef, admission checks the ModelProvider's api.
        provider = info.data.get("provider", "openai")
        if value is not None and info.data.get("provider_ref") is None and provider != "anthropic":
            raise ValueError(reasoning_api_rule(provider))
        return value

    def with_provider(self, provider: ModelProviderSpec) -> ModelDefaults:
        """These defaults with the referenced provider's api, endpoint, key and model."""
        return self.model_copy(
            update={
                "provider": provider.api,
                "base_url": provider.endpoint,
                "api_key_secret": provider.api_key_secret,
                "model": self.model or provider.default_model,
            }
        )


class Limits(KubeModel):
    """Run limits of a worker; a profile can only tighten them."""

    max_steps: StrictInt | None = Field(
        default=None, description="Most agent-loop steps one run may take.", ge=1, le=MAX_MAX_STEPS
    )
    token_budget: StrictInt | None = Field(
        default=None,
        description="Most tokens one run may spend in all; omit for no budget.",
        ge=1,
        le=MAX_MAX_TOKEN_BUDGET,
    )


class TreeLimits(KubeModel):
    """Limits on the tree of runs a top-level run of this agent spawns (its children,
    theirs, ...). A spawn past one is refused at admission, with the limit, the count and
    the tree's root; the operator checks again before the run starts."""

    max_depth: StrictInt | None = Field(
        default=None,
        description="Deepest a run may be: the top-level run is depth 0, its children 1. "
        f"Default {DEFAULT_MAX_DEPTH}.",
        ge=0,
    )
    max_children: StrictInt | None = Field(
        default=None,
        description="Most children one run may have at a time (a collected child frees its "
        f"place). Default {DEFAULT_MAX_CHILDREN}.",
        ge=0,
    )
    max_live_descendants: StrictInt | None = Field(
        default=None,
        description="Most runs below the top-level run that have not ended, at a time. "
        f"Default {DEFAULT_MAX_LIVE_DESCENDANTS}.",
        ge=0,
    )

    token_budget: StrictInt | None = Field(
        default=None,
        description="Most tokens the root and every run below it may use together (the "
        "runtimes' reports). A spawn is refused when what is left is less than the child's "
        "own limits.tokenBudget; when the tree runs out, every live run below the root is "
        "killed (TreeBudgetExhausted). Omit for none.",
        ge=1,
    )

    @property
    def depth(self) -> int:
        return DEFAULT_MAX_DEPTH if self.max_depth is None else self.max_depth

    @property
    def children(self) -> int:
        return DEFAULT_MAX_CHILDREN if self.max_children is None else self.max_children

    @property
    def live_descendants(self) -> int:
        if self.max_live_descendants is None:
            return DEFAULT_MAX_LIVE_DESCENDANTS
        return self.max_live_descendants


# A DNS-1123 subdomain: the names of RuntimeClasses, PriorityClasses and Secrets.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SubdomainName = Annotated[StrictStr, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
# A skill's name: its ConfigMap's, its folder's (skills/<name>) and its SKILL.md's `name`,
# so a DNS-1123 label (which also fits the 64-character names agent skills take).
SKILL_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SkillName = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=SKILL_NAME)]
# The image 0.1.0's CRD filled in when spec.worker.image was left out: stored AgentConfigs
# carry it though no one chose it, so it stands for "the install's image", like an omission.
IMAGE_DEFAULT_0_1_0 = "ghcr.io/agentworkers/agentworkers:0.1.0"


class SecretKeyRef(KubeModel):
    """One key of a Secret in the agent's namespace."""

    name: SubdomainName = Field(
        description="The Secret; it must be one of the AgentConfig's spec.allowedSecrets."
    )
    key: StrictStr = Field(
        description="The key within the Secret.",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
    )


class McpHeader(KubeModel):
    """An HTTP header sent with every request to an MCP server, its value from a Secret."""

    name: StrictStr = Field(
        description="Header name, e.g. Authorization.",
        min_length=1,
        max_length=128,
        pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
    )
    secret_key_ref: SecretKeyRef = Field(
        description="Where the value is: mounted read-only into the worker pods that keep "
        "this server, never written into a spec, an effective config or an event."
    )
    prefix: StrictStr = Field(
        default="",
        description='Put before the Secret\'s value, e.g. "Bearer ".',
        max_length=64,
    )


DEFAULT_MCP_TIMEOUT_SECONDS = 30
MAX_MCP_TIMEOUT_SECONDS = 600


class McpServer(KubeModel):
    """An MCP server whose tools the agent's runs are offered as `<name>__<tool>`."""

    # Each run connects when it starts (streamable HTTP), lists the server's tools (again
    # when the server says they changed), unless a Worker's mcps, a profile's pausedServers
    # or disabledTools hide them: docs/agents.md.

    name: StrictStr = Field(
        description="Names the server in Worker mcps, a profile's pausedServers and its tools' "
        "names (`<name>__<tool>`): letters, digits, `-`, single `_` (never `__`), at most "
        f"{MAX_MCP_SERVER_NAME} characters.",
        min_length=1,
        max_length=MAX_MCP_SERVER_NAME,
        pattern=MCP_SERVER_NAME_PATTERN,
    )
    url: StrictStr = Field(
        description="The server's streamable HTTP endpoint, e.g. "
        "http://search-mcp.tools.svc:8080/mcp.",
        min_length=1,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
    )
    tools: tuple[Name, ...] = Field(
        default=(),
        description="Allow-list: only these of the server's tools are offered (as the server "
        "names them, without the prefix); empty offers every tool it lists.",
    )
    headers_from: tuple[McpHeader, ...] = Field(
        default=(),
        description="Headers sent with every request (e.g. Authorization), each from a key of "
        "a Secret that spec.allowedSecrets lists.",
    )
    required: bool = Field(
        default=False,
        description="A run cannot go without this server: when it cannot be reached at run "
        "start the run fails (McpServerUnavailable). Otherwise the run goes on without its "
        "tools, and a Warning Event names the server.",
    )
    timeout_seconds: StrictInt = Field(
        default=DEFAULT_MCP_TIMEOUT_SECONDS,
        description="Longest a connection, a tool listing or one tool call may take; a call "
        "that takes longer comes back to the model as an error.",
        ge=1,
        le=MAX_MCP_TIMEOUT_SECONDS,
    )

    def secrets(self) -> set[str]:
        """The Secrets its headers come from."""
        return {header.secret_key_ref.name for header in self.headers_from}


class Toleration(KubeModel):
    """A taint a worker pod tolerates, as in a Pod."""

    key: StrictStr | None = Field(default=None, description="Taint key; empty: every key.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (the default)."
    )
    value: StrictStr | None = Field(default=None, description="Taint value, for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; empty: every effect."
    )
    toleration_seconds: StrictInt | None = Field(
        default=None, description="How long a NoExecute taint is tolerated.", ge=0
    )


class Affinity(KubeModel):
    """Scheduling constraints of a worker pod, as in a Pod's spec.affinity."""

    node_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")
    pod_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")
    pod_anti_affinity: dict[str, Any] | None = Field(default=None, description="As in a Pod.")


class Resources(KubeModel):
    """Container resources of a worker, as in a Pod."""

    requests: dict[str, StrictStr] | None = Field(default=None, description="e.g. cpu: 250m.")
    limits: dict[str, StrictStr] | None = Field(default=None, description="e.g. memory: 1Gi.")


# Bound of an agent's pool of identities: ServiceAccounts are small, but each free one is
# an object the API server keeps.
MAX_IDENTITY_POOL: Final = 1000


class WorkerPod(KubeModel):
    """Where and how a worker's pod runs. The operator's install sets defaults for every
    agent (the chart's `workerDefaults`, its image included); an AgentConfig's spec.worker
    overrides them field by field."""

    image: StrictStr | None = Field(
        default=None,
        description="Image of the worker runtime; omit for the install's own image.",
        min_length=1,
    )
    image_pull_secrets: tuple[SubdomainName, ...] | None = Field(
        default=None, description="Names of Secrets to pull the image with."
    )
    runtime_class_name: SubdomainName | None = Field(
        default=None, description="RuntimeClass of the pod, e.g. gvisor or kata."
    )
    node_selector: dict[str, StrictStr] | None = Field(
        default=None, description="Node labels the pod must land on."
    )
    tolerations: tuple[Toleration, ...] | None = Field(
        default=None, description="Taints the pod tolerates."
    )
    affinity: Affinity | None = Field(default=None, description="Scheduling constraints.")
    resources: Resources | None = Field(
        default=None, description="Container resources (requests and limits)."
    )
    priority_class_name: SubdomainName | None = Field(
        default=None, description="PriorityClass of the pod."
    )
    service_account_annotations: dict[str, StrictStr] | None = Field(
        default=None,
        description="Annotations of each run's own ServiceAccount (workload identity, e.g. "
        "eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account).",
    )
    identity_pool: StrictInt | None = Field(
        default=None,
        description="ServiceAccounts of this agent made ahead of its cold runs, each "
        'reused only once the pod that ran as it is gone (docs/scaling.md, "Pooled '
        f'identities"); 0 or unset: each run gets its own. At most {MAX_IDENTITY_POOL}.',
        ge=0,
        le=MAX_IDENTITY_POOL,
    )

    @field_validator("image")
    @classmethod
    def _install_image(cls, image: str | None) -> str | None:
        return None if image == IMAGE_DEFAULT_0_1_0 else image

    def over(self, defaults: WorkerPod) -> Self:
        """These knobs, each one left out taken from `defaults`."""
        unset = {
            k: getattr(defaults, k) for k in WorkerPod.model_fields if getattr(self, k) is None
        }
        return self.model_copy(update=unset)


# A Kueue LocalQueue's name: a DNS-1123 subdomain that is also a label value (63 at most).
QueueName = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]

# Bounds of a warm pool: pods that wait idle count against the namespace's quota, and a
# pool replaces every one of them on each revision, so it stays small.
MAX_WARM_POOL_SIZE: Final = 50
DEFAULT_WARM_IDLE_SECONDS: Final = 3600


class WarmPool(KubeModel):
    """Pods of this agent started ahead of its runs (docs/scaling.md, "Warm pool"): a
    spawn claims a ready one instead of waiting for a pod; an empty pool means a cold
    start, never a wait."""

    size: StrictInt = Field(
        default=0,
        description=f"Warm pods kept ready; 0 turns the pool off. At most {MAX_WARM_POOL_SIZE}.",
        ge=0,
        le=MAX_WARM_POOL_SIZE,
    )
    idle_seconds: StrictInt = Field(
        default=DEFAULT_WARM_IDLE_SECONDS,
        description="A warm pod unclaimed for this long is replaced by a fresh one.",
        ge=30,
        le=86400,
    )


class WorkerTemplate(WorkerPod):
    """Knobs of the pod each worker of this agent runs in."""

    queue_name: QueueName | None = Field(
        default=None,
        description="A Kueue LocalQueue in this namespace: every run of this agent (its "
        "children too) waits in it until Kueue admits its pod (Worker Pending, condition "
        "Queued), by the pod's resource requests, which resources.requests must set (cpu or "
        "memory). Omit to start runs at once. docs/multitenancy.md.",
    )

    sandbox_size: StrictStr = Field(
        default="1Gi",
        description="Size limit of the emptyDir sandbox mounted as the working directory.",
    )
    deadline_seconds: StrictInt | None = Field(
        default=None,
        description="activeDeadlineSeconds of the pod: the longest a run may take.",
        ge=1,
    )
    idle_timeout_seconds: StrictInt | None = Field(
        default=None,
        description="How long an interactive run may wait Idle before it ends (IdleTimeout); "
        "omit for no limit. A Worker's own wins.",
        ge=1,
    )
    ttl_seconds_after_finished: StrictInt | None = Field(
        default=None,
        description="How long a finished run nobody has to collect stays before it is deleted; "
        "omit to keep it. A Worker's own wins.",
        ge=0,
    )
    warm_pool: WarmPool | None = Field(
        default=None,
        description="Pods started ahead of this agent's runs, at its active revision; a "
        "spawn whose pod they match claims one.",
    )

    @model_validator(mode="after")
    def _queued_runs_request(self) -> Self:
        # Kueue admits a pod by its requests: a pod without any would fit every quota.
        requests = (self.resources.requests if self.resources else None) or {}
        if self.queue_name is not None and not {"cpu", "memory"} & requests.keys():
            raise FieldValueError(
                "resources.requests",
                "a queued run (queueName) needs cpu or memory requests: Kueue admits a pod "
                "by its requests, and one with none would fit every quota",
            )
        return self


class VirtualAgents(KubeModel):
    """The virtual-agent profiles of this agent, declared in the config itself."""

    max_profiles: StrictInt = Field(
        default=0,
        description=f"Most profiles the effective map may hold; 0 means {DEFAULT_MAX_PROFILES}.",
        ge=0,
    )
    profiles: tuple[ProfileEntry, ...] = Field(
        default=(),
        description="Profiles, each with a unique key. Over a standalone "
        "VirtualAgentProfile of the same key, these win.",
    )


class AgentConfigSpec(KubeModel):
    """A top-level agent: its model, skills, tools, limits, worker pods and profiles."""

    description: StrictStr = Field(default="", description="What the agent is for.")
    model: ModelDefaults = Field(description="Model defaults of the agent's workers.")
    skills: tuple[SkillName, ...] = Field(
        default=(),
        description="Skills the agent's workers have: each the name of a ConfigMap in this "
        "namespace holding the skill's files (a SKILL.md with name and description, plus its "
        "scripts), mounted read-only at skills/<name> in the sandbox of each run that keeps it.",
    )
    tools: tuple[BuiltinTool, ...] = Field(
        default=(),
        description="Built-in tools offered to the model: list_files, read_file, write_file "
        "and run_command (in the run's sandbox), spawn_worker, inspect_worker, collect_worker "
        "and kill_worker (its children).",
    )
    mcp_servers: tuple[McpServer, ...] = Field(
        default=(),
        description="MCP servers whose tools are offered to the model (see docs/agents.md): "
        "each run connects to those its Worker and profile keep.",
    )
    limits: Limits = Field(default_factory=Limits, description="Run limits.")
    instructions: Annotated[StrictStr, MaxBytes(MAX_INSTRUCTIONS_BYTES)] = Field(
        default="",
        description=f"System instructions, at most {MAX_INSTRUCTIONS_BYTES} bytes of UTF-8.",
    )
    allowed_secrets: tuple[Name, ...] = Field(
        default=(),
        description="Secrets a worker of this agent may be given (a Worker may ask for fewer).",
    )
    worker: WorkerTemplate = Field(
        default_factory=WorkerTemplate, description="The pod each worker runs in."
    )
    tree: TreeLimits | None = Field(
        default=None,
        description="Limits on the spawn tree below each top-level run of this agent; "
        "omitted, the defaults.",
    )
    virtual_agents: VirtualAgents | None = Field(
        default=None,
        description="Virtual-agent profiles declared in the config (the revision door).",
    )
    tracing: Tracing | None = Field(
        default=None,
        description="Send the runs' spans (model and tool calls, queries, the run's life) to "
        "an OTLP collector, one trace per spawn tree; omitted, no tracing.",
    )
    revision_history_limit: StrictInt = Field(
        default=DEFAULT_REVISION_HISTORY_LIMIT,
        description="How many old AgentConfigRevisions to keep; one a live Worker pins is "
        "always kept.",
        ge=1,
    )

    @model_validator(mode="after")
    def _mcp_servers(self) -> Self:
        names = [server.name for server in self.mcp_servers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise FieldValueError("mcpServers", f"names must be unique; {', '.join(twice)} repeat")
        allowed = set(self.allowed_secrets)
        for i, server in enumerate(self.mcp_servers):
            for j, header in enumerate(server.headers_from):
                if header.secret_key_ref.name not in allowed:
                    raise FieldValueError(
                        f"mcpServers[{i}].headersFrom[{j}].secretKeyRef.name",
                        f"Secret {header.secret_key_ref.name!r} is not in spec.allowedSecrets",
                    )
        return self


class RevisionRef(KubeModel):
    """Which AgentConfigRevision is in force."""

    name: StrictStr = Field(description="Name of the AgentConfigRevision.")
    revision: StrictInt = Field(description="Its revision id, monotonic per AgentConfig.")
    digest: StrictStr = Field(description="SHA-256 of its canonical content.")


class WarmPoolStatus(KubeModel):
    """The warm pool's pods, by state, as the operator last counted them."""

    ready: StrictInt = Field(default=0, description="Warm pods running and unclaimed.")
    starting: StrictInt = Field(default=0, description="Warm pods not running yet.")
    claimed: StrictInt = Field(
        default=0, description="Pods of the pool a run claimed that still run."
    )


class AgentConfigStatus(KubeModel):
    """What the operator observed and derived."""

    observed_generation: StrictInt | None = Field(
        default=None, description="The .metadata.generation this status describes."
    )
    active_revision: RevisionRef | None = Field(
        default=None, description="The revision new workers of this agent freeze."
    )
    profiles: StrictInt | None = Field(
        default=None, description="Number of profiles in the active revision's map."
    )
    warm_pool: WarmPoolStatus | None = Field(
        default=None, description="The warm pool (spec.worker.warmPool), when it has one."
    )
    conditions: tuple[Condition, ...] = conditions_field()
