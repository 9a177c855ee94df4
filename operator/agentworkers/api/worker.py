"""Worker: one agent run, in one pod (the seed's Worker, Spec and WorkerInfo)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr, ValidationInfo, field_validator, model_validator

from agentworkers.api.agentconfig import RevisionRef
from agentworkers.api.common import Condition, KubeModel, MaxBytes, conditions_field
from agentworkers.api.provider import (
    PROVIDERS_TEXT,
    REASONING_API_TEXT,
    Provider,
    ReasoningAPI,
    reasoning_api_rule,
)
from agentworkers.api.tracing import TraceParent
from agentworkers.virtualagent import (
    HEX_DIGEST_PATTERN,
    INPUT_NAME_PATTERN,
    MAX_INPUT_NAME_BYTES,
    MAX_KEY_LENGTH,
    MAX_MODEL_LENGTH,
)

Phase = Literal["Pending", "Running", "Idle", "Done", "Failed", "Killed"]
TERMINAL_PHASES: frozenset[str] = frozenset({"Done", "Failed", "Killed"})
# Phases collect returns at: the run has nothing more to say until it is asked again.
SETTLED_PHASES: frozenset[str] = TERMINAL_PHASES | {"Idle"}
# Set by a client's collect before it deletes the Worker: that deletion is no kill.
# Status fields only a run's runtime writes (the operator neither reads nor keeps them).
RUNTIME_STATUS: frozenset[str] = frozenset({"recentEvents", "output"})
MAX_QUERIES = 256
MAX_MESSAGE_BYTES = 64 * 1024
Message = Annotated[StrictStr, MaxBytes(MAX_MESSAGE_BYTES)]
MAX_REASON_BYTES = 1024
# Inputs travel inside the Worker (etcd keeps an object to 1.5 MiB): a few, and small.
MAX_INPUTS = 16
MAX_INPUT_BYTES = 256 * 1024  # one input's content, decoded
MAX_INPUTS_BYTES = 512 * 1024  # all of one Worker's, decoded
_BASE64 = r"^[A-Za-z0-9+/]*={0,2}$"


class Kill(KubeModel):
    """A request to stop the run. Once set it cannot be taken back."""

    reason: Annotated[StrictStr, MaxBytes(MAX_REASON_BYTES)] = Field(
        description="Why the run is stopped; surfaces on collect and in the Killed Event. "
        f"At most {MAX_REASON_BYTES} bytes.",
        min_length=1,
    )
    by: StrictStr = Field(
        default="", description="Who asked (a user, a parent worker).", max_length=253
    )


class WorkerInput(KubeModel):
    """A file handed to the run: a spawning parent's sandbox file, carried whole."""

    name: Annotated[StrictStr, MaxBytes(MAX_INPUT_NAME_BYTES)] = Field(
        description="Canonical filename: a base name of letters, digits, '.', '_' and '-' "
        "(no directory); the file is inputs/<name> in the run's sandbox. Its MIME type follows "
        "from it. Unique among the Worker's inputs.",
        pattern=INPUT_NAME_PATTERN,
    )
    sha256: StrictStr = Field(
        description="SHA-256 (hex) of the content; the run checks it before it takes the input.",
        pattern=HEX_DIGEST_PATTERN,
        max_length=64,  # what the pattern says, for the cost of the immutability rule
    )
    content: StrictStr = Field(
        default="",
        description=f"The content, base64 (omit for an empty file); at most {MAX_INPUT_BYTES} "
        f"bytes decoded, {MAX_INPUTS_BYTES} for all of a Worker's inputs.",
        # Base64 of MAX_INPUT_BYTES: 4 characters for every 3 bytes.
        max_length=-(-MAX_INPUT_BYTES // 3) * 4,
        pattern=_BASE64,
    )


class WorkerSpec(KubeModel):
    """What to run. `agent`, `parent` and `profile` are fixed at creation."""

    agent: StrictStr = Field(
        description="The AgentConfig (top-level agent) this run belongs to, in this namespace. "
        "A child spawned with a virtual profile stays the top-level agent's run.",
        min_length=1,
        max_length=253,
    )
    kind: Literal["static", "dynamic"] = Field(
        default="static",
        description="How the run came to be (the seed's worker Kind). static: a top-level run "
        "of its AgentConfig, instantiated from the agent as configured; dynamic: built at run "
        "time by the parent run named in `parent`. Follows from `parent` when omitted; a kind "
        "that disagrees with `parent` is refused at creation.",
    )
    description: StrictStr = Field(default="", description="One line on what this worker is for.")
    prompt: Message = Field(
        default="",
        description=f"Extra system prompt, added to the agent's; at most {MAX_MESSAGE_BYTES} "
        "bytes.",
    )
    provider: Provider | None = Field(
        default=None, description=f"Driver override: {PROVIDERS_TEXT}."
    )
    model: Annotated[StrictStr, MaxBytes(MAX_MODEL_LENGTH)] | None = Field(
        default=None, description=f"Model override, at most {MAX_MODEL_LENGTH} bytes."
    )
    skills: tuple[StrictStr, ...] | None = Field(
        default=None, description="Skills to keep, from the agent's; omit for all of them."
    )
    mcps: tuple[StrictStr, ...] | None = Field(
        default=None, description="MCP servers to keep, from the agent's; omit for all of them."
    )
    script: list[dict[str, Any]] | None = Field(
        default=None,
        description="For the scripted provider: this run's own script (see AgentConfig "
        "spec.model.script).",
    )
    reasoning: Literal["off", "low", "medium", "high"] | None = Field(
        default=None, description="Reasoning effort override."
    )
    reasoning_api: ReasoningAPI | None = Field(
        default=None,
        alias="reasoningAPI",
        description=f"{REASONING_API_TEXT} Overrides the AgentConfig's spec.model.reasoningAPI.",
    )
    allowed_secrets: tuple[StrictStr, ...] = Field(
        default=(),
        description="Secrets the run may read; each must also be allowed by the AgentConfig.",
    )
    initial_message: Message = Field(
        default="",
        description=f"First message, delivered when the run starts; at most {MAX_MESSAGE_BYTES} "
        "bytes.",
    )
    inputs: tuple[WorkerInput, ...] = Field(
        default=(),
        description="Files the run starts with (a parent's spawn_worker passes files of its "
        "sandbox). Under a virtual profile (its own, or the one of the profile run it runs "
        "below) at most the profile's inputCount, each matching one of its inputPatterns, "
        f"and given as its inputDisposition says; otherwise at most {MAX_INPUTS}, as files "
        "inputs/<name>. Fixed at creation.",
        max_length=MAX_INPUTS,
    )
    parent: StrictStr | None = Field(
        default=None, description="The Worker that spawned this one (it owns this one)."
    )
    profile: Annotated[StrictStr, MaxBytes(MAX_KEY_LENGTH)] | None = Field(
        default=None,
        description="Key of a virtual-agent profile from the parent's frozen map; needs `parent`.",
    )
    queries: tuple[Message, ...] = Field(
        default=(),
        description="Messages delivered after the first, in order, once each, at most "
        f"{MAX_MESSAGE_BYTES} bytes each. Append only.",
        max_length=MAX_QUERIES,
    )
    interactive: bool = Field(
        default=False,
        description="Stay Idle after answering, waiting for spec.queries, instead of finishing "
        "(Done) after the first answer.",
    )
    kill: Kill | None = Field(default=None, description="Set to stop the run.")
    traceparent: TraceParent | None = None
    suspend: bool = Field(
        default=False,
        description="Hold the run before it starts (the binding is still made at spawn). "
        "Clearing it starts the run, which verifies the binding first.",
    )

    @field_validator("reasoning_api")
    @classmethod
    def _reasoning_api_with_anthropic(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The AgentConfig's provider, when this spec names none, is admission's to check.
        provider = info.data.get("provider")
        if value is not None and provider not in (None, "anthropic"):
            raise ValueError(reasoning_api_rule(provider))
        return value

    deadline_seconds: StrictInt | None = Field(
        default=None,
        description="Longest the run may take; defaults to the AgentConfig's. A child's "
        "never outlives what is left of its parent's.",
        ge=1,
    )
    idle_timeout_seconds: StrictInt | None = Field(
        default=None,
        description="How long an interactive run may wait Idle for a query before it ends "
        "(Done, reason IdleTimeout) and frees its pod; defaults to the AgentConfig's.",
        ge=1,
    )
    ttl_seconds_after_finished: StrictInt | None = Field(
        default=None,
        description="How long a finished run stays before it is deleted, unless a parent "
        "still has to collect it; defaults to the AgentConfig's (none: it stays).",
        ge=0,
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_from_parent(cls, data: Any) -> Any:
        # Only the default: a Worker 0.1.0 made for a parent says static, and still loads.
        if isinstance(data, dict) and data.get("kind") is None:
            return {**data, "kind": "dynamic" if data.get("parent") else "static"}
        return data


class BindingSummary(KubeModel):
    """The virtual-agent profile this run is pinned to (the full binding is an annotation)."""

    key: StrictStr = Field(description="Profile key.")
    label: StrictStr = Field(default="", description="Profile label.")
    profile_hash: StrictStr = Field(description="Pinned profile hash.")
    revision: StrictStr = Field(description="Pinned AgentConfig revision id.")
    digest: StrictStr = Field(description="Pinned AgentConfig revision digest.")


class InheritedBounds(KubeModel):
    """The virtual-agent profile an unprofiled descendant of a profile run is bounded by."""

    worker: StrictStr = Field(description="The ancestor Worker that runs under the profile.")
    profile: StrictStr = Field(description="That Worker's profile key.")


class WorkerEvent(KubeModel):
    """One entry of the run's recent events (tool call, tool result, thought, message,
    status, an MCP server reached or not, notice)."""

    index: StrictInt = Field(description="Monotonic per worker, from 1.")
    kind: Literal[
        "tool_call",
        "tool_result",
        "thought",
        "assistant_message",
        "status_change",
        "mcp_server",
        "notice",
    ] = Field(description="What happened (notice: a problem that is not a step, e.g. a skill).")
    time: StrictStr = Field(description="When (RFC 3339).")
    summary: StrictStr = Field(
        default="", description="A short rendering of the payload.", max_length=1024
    )


MAX_MCP_STATUS_TOOLS = 128


class McpServerStatus(KubeModel):
    """One MCP server of the run, as its runtime found it at run start (and since)."""

    name: StrictStr = Field(description="The server's name in the AgentConfig.")
    url: StrictStr = Field(default="", description="Where the runtime connected.")
    required: bool = Field(default=False, description="Whether the run needs it.")
    state: Literal["Connected", "Unavailable"] = Field(
        description="Connected: its tools are offered; Unavailable: the run goes without them "
        "(or, required, fails with McpServerUnavailable)."
    )
    tools: tuple[StrictStr, ...] = Field(
        default=(),
        description="The tools the run got from it, as the model sees them (`<server>__<tool>`), "
        "after the allow-list and disabledTools.",
        max_length=MAX_MCP_STATUS_TOOLS,
    )
    message: StrictStr = Field(
        default="", description="Why it is unavailable.", max_length=MAX_REASON_BYTES
    )


class TokenUsage(KubeModel):
    """Tokens a run's model calls used, as the provider reported them (or estimated)."""

    prompt: StrictInt = Field(default=0, description="Prompt (input) tokens.", ge=0)
    completion: StrictInt = Field(default=0, description="Completion (output) tokens.", ge=0)
    estimated: StrictInt = Field(
        default=0,
        description="Of prompt and completion, the tokens estimated (about 4 characters "
        "each) for replies the provider sent without usage.",
        ge=0,
    )

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class TreeStatus(KubeModel):
    """A top-level run's tree, as the operator last summed it."""

    runs: StrictInt = Field(default=0, description="Runs below the root (every phase).", ge=0)
    live: StrictInt = Field(default=0, description="Runs below the root not ended.", ge=0)
    tokens_used: StrictInt = Field(
        default=0, description="Tokens the root and every run below it used.", ge=0
    )
    token_budget: StrictInt | None = Field(
        default=None, description="The tree's budget (AgentConfig spec.tree.tokenBudget)."
    )
    budget_exhausted: bool = Field(
        default=False, description="The tree ran out of its budget; its runs below were killed."
    )
    summed_at: StrictStr | None = Field(default=None, description="When it was last summed.")


class WorkerStatus(KubeModel):
    """What the run is doing, as the operator and the runtime report it."""

    observed_generation: StrictInt | None = Field(
        default=None, description="The generation observed."
    )
    phase: Phase | None = Field(
        default=None, description="Pending, Running, Idle, Done, Failed or Killed."
    )
    conditions: tuple[Condition, ...] = conditions_field()
    output: StrictStr | None = Field(default=None, description="The run's last assistant message.")
    error: StrictStr | None = Field(
        default=None, description="Why the run failed, or the kill reason."
    )
    last_event: StrictStr | None = Field(default=None, description="The last thing that happened.")
    started_at: StrictStr | None = Field(default=None, description="When the run started.")
    updated_at: StrictStr | None = Field(default=None, description="When the status last changed.")
    pod: StrictStr | None = Field(default=None, description="The run's pod.")
    queue: StrictStr | None = Field(
        default=None,
        description="The Kueue LocalQueue the run's pod waits or waited in (its AgentConfig's "
        "spec.worker.queueName); condition Queued says whether it still waits, and why.",
    )
    deadline_at: StrictStr | None = Field(
        default=None,
        description="When the run's deadline runs out (its children's, at the latest).",
    )
    idle_since: StrictStr | None = Field(
        default=None, description="Since when the run waits Idle (the runtime's report)."
    )
    tokens_used: TokenUsage | None = Field(
        default=None, description="Tokens this run used so far (the runtime's report)."
    )
    tree: TreeStatus | None = Field(
        default=None, description="For a top-level run: its tree's size and token use."
    )
    frozen_revision: RevisionRef | None = Field(
        default=None,
        description="The agent's revision this run froze at its start: its children's profiles "
        "come from that revision's map.",
    )
    binding: BindingSummary | None = Field(default=None, description="The pinned profile, if any.")
    revision: StrictStr | None = Field(
        default=None,
        description="The AgentConfigRevision this run uses: the one its profile binding pins, "
        "or the one a top-level run froze at its start.",
    )
    inherited: InheritedBounds | None = Field(
        default=None,
        description="For a descendant of a virtual-profile run: the profile whose bounds it "
        "inherits (it never gets more than that run's effective configuration).",
    )
    mcp_servers: tuple[McpServerStatus, ...] | None = Field(
        default=None,
        description="The MCP servers the run keeps, as its runtime reached them (the runtime's "
        "report); an unavailable one gets a Warning Event (McpServerUnavailable).",
    )
    event_index: StrictInt | None = Field(default=None, description="Index of the last event.")
    queries_delivered: StrictInt | None = Field(
        default=None, description="How many of spec.queries the run has taken."
    )
    recent_events: tuple[WorkerEvent, ...] = Field(
        default=(), description="The most recent events (a bounded ring).", max_length=50
    )
