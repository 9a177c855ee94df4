"""The effective configuration of one run, and which layer set each field. Pure.

Three layers, each only able to narrow the one before it (but for model choice):
the AgentConfig, the Worker's own selections, and a virtual profile's overlay with
the seed's set operations and clamps. A run below a virtual-profile run (its child,
grandchild, ...) inherits that run's effective configuration as a ceiling: a fourth
layer, `inherited`. `sources` names the layer behind each field, which is what
`agentworkers explain` shows.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictStr

from agentworkers.api.agentconfig import AgentConfigSpec
from agentworkers.api.common import KubeModel
from agentworkers.api.mcp import McpServer
from agentworkers.api.provider import Provider, ReasoningAPI
from agentworkers.api.tracing import Tracing
from agentworkers.api.worker import InheritedBounds, WorkerSpec
from agentworkers.virtualagent import (
    MAX_MAX_STEPS,
    Overlay,
    Profile,
    block_name,
    intersect_strings,
    overlay_clamp_max_steps,
    overlay_clamp_max_tokens,
    overlay_clamp_token_budget,
    union_strings,
)

AGENT, WORKER, PROFILE, CLAMP, INHERITED = "agent", "worker", "profile", "clamp", "inherited"


class Block(KubeModel):
    name: StrictStr = Field(description="Block name, e.g. virtual_agent.<key>.")
    text: StrictStr = Field(description="Block text.")


class ModelEndpoint(KubeModel):
    """Where a run's model client connects, and with which key: what a client built ahead
    of a run (a warm pod's, before its claim) must share with the run to serve it."""

    provider: Provider
    base_url: StrictStr | None = Field(default=None, alias="baseURL")
    api_key_secret: StrictStr | None = None


class EffectiveConfig(KubeModel):
    """Everything the runtime needs to run the agent loop, after every layer."""

    agent: StrictStr
    provider: Provider
    model: StrictStr
    base_url: StrictStr | None = Field(default=None, alias="baseURL")
    api_key_secret: StrictStr | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: StrictStr | None = None
    reasoning_api: ReasoningAPI | None = Field(default=None, alias="reasoningAPI")
    skills: tuple[StrictStr, ...] = ()
    tools: tuple[StrictStr, ...] = ()
    # Each kept server whole: the runtime connects to it (its headers' Secrets mounted).
    mcp_servers: tuple[McpServer, ...] = ()
    disabled_tools: tuple[StrictStr, ...] = ()
    paused_servers: tuple[StrictStr, ...] = ()
    max_steps: int = MAX_MAX_STEPS
    token_budget: int = 0  # 0: no budget
    instructions: StrictStr = ""
    blocks: tuple[Block, ...] = ()
    secrets: tuple[StrictStr, ...] = ()
    profile: StrictStr | None = None
    inherited: InheritedBounds | None = None
    output_schema: dict[str, Any] | None = None
    # What the runtime does with the Worker's inputs (a profile's inputDisposition).
    input_disposition: StrictStr = ""
    script: list[dict[str, Any]] | None = None
    # The agent's tracing (None: off); the run's trace context is the Worker's own.
    tracing: Tracing | None = None
    sources: dict[str, str] = Field(default_factory=dict)

    @property
    def endpoint(self) -> ModelEndpoint:
        return ModelEndpoint(
            provider=self.provider, base_url=self.base_url, api_key_secret=self.api_key_secret
        )


def allowed_secrets(config: AgentConfigSpec, worker: WorkerSpec) -> tuple[str, ...]:
    """Only what both the Worker asks for and its AgentConfig allows."""
    return tuple(sorted(set(worker.allowed_secrets) & set(config.allowed_secrets)))


def resolve(
    config: AgentConfigSpec, worker: WorkerSpec, profile: Profile | None = None
) -> EffectiveConfig:
    sources: dict[str, str] = {}

    def pick(field: str, layered: list[tuple[str, Any]]) -> Any:
        """The last layer that set a value wins; remember which."""
        value, source = None, AGENT
        for layer, candidate in layered:
            if candidate is not None:
                value, source = candidate, layer
        sources[field] = source
        return value

    model = config.model
    overlay = profile.overlay if profile else None
    provider = pick("provider", [(AGENT, model.provider), (WORKER, worker.provider)])
    chosen_model = pick(
        "model",
        [
            (AGENT, model.model),
            (WORKER, worker.model),
            (PROFILE, overlay.model.strip() if overlay and overlay.model else None),
        ],
    )
    temperature = pick(
        "temperature",
        [(AGENT, model.temperature), (PROFILE, overlay.temperature if overlay else None)],
    )
    reasoning = pick(
        "reasoning_effort",
        [
            (AGENT, model.reasoning_effort),
            (WORKER, worker.reasoning),
            (PROFILE, overlay.reasoning_effort if overlay else None),
        ],
    )
    # Anthropic's thinking: the AgentConfig's default goes with its own provider, so a
    # Worker that picks another provider leaves it behind (admission refuses a Worker's
    # own reasoningAPI for a provider other than anthropic).
    reasoning_api = pick(
        "reasoning_api",
        [
            (AGENT, model.reasoning_api if provider == "anthropic" else None),
            (WORKER, worker.reasoning_api),
        ],
    )

    # Sets: the worker keeps some of the agent's; the profile keeps some of those (an
    # explicit empty set keeps none) and can only hide tools and servers.
    skills, sources["skills"] = _skills(config.skills, worker.skills, overlay)
    servers = tuple(config.mcp_servers)
    sources["mcp_servers"] = AGENT
    if worker.mcps is not None:
        servers = tuple(s for s in servers if s.name in set(worker.mcps))
        sources["mcp_servers"] = WORKER
    disabled = tuple(overlay.disabled_tools or ()) if overlay else ()
    paused = tuple(overlay.paused_servers or ()) if overlay else ()
    sources["disabled_tools"] = sources["paused_servers"] = PROFILE if overlay else AGENT
    disabled = union_strings((), disabled) or ()
    paused = union_strings((), paused) or ()
    tools = tuple(t for t in config.tools if t not in set(disabled))
    sources["tools"] = PROFILE if len(tools) != len(config.tools) else AGENT
    if any(s.name in set(paused) for s in servers):
        servers = tuple(s for s in servers if s.name not in set(paused))
        sources["mcp_servers"] = PROFILE

    # Limits: the overlay can only tighten; a clamp is named as its own layer.
    max_tokens = overlay_clamp_max_tokens(model.max_tokens, overlay.max_tokens if overlay else None)
    sources["max_tokens"] = _limit_source(
        model.max_tokens, overlay.max_tokens if overlay else None, max_tokens
    )
    steps_cap = config.limits.max_steps or MAX_MAX_STEPS
    max_steps = overlay_clamp_max_steps(steps_cap, overlay.max_steps if overlay else None)
    sources["max_steps"] = _limit_source(
        steps_cap, overlay.max_steps if overlay else None, max_steps
    )
    budget_cap = config.limits.token_budget or 0
    token_budget = overlay_clamp_token_budget(budget_cap, overlay.token_budget if overlay else None)
    sources["token_budget"] = _limit_source(
        budget_cap or None, overlay.token_budget if overlay else None, token_budget
    )

    instructions = "\n\n".join(part for part in (config.instructions, worker.prompt) if part)
    sources["instructions"] = WORKER if worker.prompt else AGENT
    blocks: tuple[Block, ...] = ()
    if profile and profile.overlay.instructions:
        blocks = (Block(name=block_name(profile.key), text=profile.overlay.instructions),)
        sources["blocks"] = PROFILE
    sources["secrets"] = WORKER
    sources["input_disposition"] = PROFILE if profile else AGENT
    return EffectiveConfig(
        agent=worker.agent,
        provider=provider,
        model=chosen_model,
        base_url=model.base_url,
        api_key_secret=model.api_key_secret,
        temperature=temperature,
        max_tokens=max_tokens,
        reasoning_effort=reasoning,
        reasoning_api=reasoning_api,
        skills=skills,
        tools=tools,
        mcp_servers=servers,
        disabled_tools=disabled,
        paused_servers=paused,
        max_steps=max_steps,
        token_budget=token_budget,
        instructions=instructions,
        blocks=blocks,
        secrets=allowed_secrets(config, worker),
        profile=profile.key if profile else None,
        output_schema=profile.output_schema if profile else None,
        input_disposition=profile.input_disposition if profile else "",
        script=worker.script if worker.script is not None else model.script,
        tracing=config.tracing,
        sources=sources,
    )


def _skills(
    agent: tuple[str, ...], worker: tuple[str, ...] | None, overlay: Overlay | None
) -> tuple[tuple[str, ...], str]:
    """The skills a run keeps, and the layer that last narrowed them."""
    skills, source = agent, AGENT
    if worker is not None:
        skills, source = tuple(s for s in skills if s in set(worker)), WORKER
    if overlay and overlay.skills is not None:
        skills, source = intersect_strings(skills, overlay.skills) or (), PROFILE
    return skills, source


def _limit_source(parent: int | None, overlay: int | None, result: int | None) -> str:
    if overlay is None or overlay <= 0:
        return AGENT
    return CLAMP if result != overlay else PROFILE


# What a descendant of a profile run takes from that run as it is: the model and how it
# is sampled (a choice, not an amount, so the profile's choice holds below it).
_INHERITED_CHOICES = (
    "provider",
    "model",
    "base_url",
    "api_key_secret",
    "temperature",
    "reasoning_effort",
    "reasoning_api",
    "input_disposition",
)


def inherit(
    own: EffectiveConfig, ceiling: EffectiveConfig, via: InheritedBounds
) -> EffectiveConfig:
    """`own`, never more than `ceiling` (the effective config of the profile run `via`).

    Sets keep only what the ceiling has (exclusions add up), limits take the tighter
    value, the model choices are the ceiling's. Every field the ceiling changed is
    sourced `inherited`.
    """

    def tighter(mine: int | None, theirs: int | None, unset: int | None) -> int | None:
        values = [v for v in (mine, theirs) if v is not None and v != unset]
        return min(values) if values else mine

    def kept(mine: tuple[str, ...], theirs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(item for item in mine if item in set(theirs))

    changes: dict[str, object] = {name: getattr(ceiling, name) for name in _INHERITED_CHOICES}
    changes.update(
        skills=kept(own.skills, ceiling.skills),
        tools=kept(own.tools, ceiling.tools),
        mcp_servers=tuple(
            s for s in own.mcp_servers if s.name in {c.name for c in ceiling.mcp_servers}
        ),
        secrets=kept(own.secrets, ceiling.secrets),
        disabled_tools=tuple(sorted({*own.disabled_tools, *ceiling.disabled_tools})),
        paused_servers=tuple(sorted({*own.paused_servers, *ceiling.paused_servers})),
        max_tokens=tighter(own.max_tokens, ceiling.max_tokens, None),
        max_steps=tighter(own.max_steps, ceiling.max_steps, None),
        token_budget=tighter(own.token_budget, ceiling.token_budget, 0) or 0,
    )
    sources = dict(own.sources)
    for name, value in changes.items():
        if value != getattr(own, name):
            sources[name] = INHERITED
    return own.model_copy(update={**changes, "inherited": via, "sources": sources})
