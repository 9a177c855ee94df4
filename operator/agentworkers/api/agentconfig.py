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
from agentworkers.api.mcp import McpServer
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
from agentworkers.api.workerpod import WorkerTemplate
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


# A skill's name: its ConfigMap's, its folder's (skills/<name>) and its SKILL.md's `name`,
# so a DNS-1123 label (which also fits the 64-character names agent skills take).
SKILL_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SkillName = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=SKILL_NAME)]


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
