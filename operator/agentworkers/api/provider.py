"""ModelProvider: a model endpoint defined once per namespace, referenced by AgentConfigs.

One key rotation (the Secret's content) or endpoint move (this object) reaches every agent
that names the provider, from the next run on: a run resolves its provider when it starts,
and its pod mounts only that provider's key.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr

from agentworkers.api.common import KubeModel, MaxBytes
from agentworkers.virtualagent import MAX_MODEL_LENGTH

# The model drivers the runtime has (runtime/providers/): an enum at admission, so an
# unknown one is refused naming its field instead of failing a pod.
Provider = Literal["openai", "anthropic", "scripted"]
PROVIDERS_TEXT = (
    "`openai` (any OpenAI-compatible chat-completions endpoint: OpenAI, Azure OpenAI, vLLM, "
    "Ollama, LiteLLM), `anthropic` (Anthropic's Messages API) or `scripted` (replies from a "
    "script, for tests and demos)"
)


def reasoning_api_rule(provider: str) -> str:
    """Why a reasoningAPI is refused for a run of `provider` (not anthropic)."""
    return (
        f"reasoningAPI is Anthropic's thinking: it needs provider anthropic, and this run's "
        f"provider is {provider}"
    )


# Anthropic's thinking modes (the Messages API's `thinking.type`).
ReasoningAPI = Literal["enabled", "adaptive"]
REASONING_API_TEXT = (
    "Anthropic's thinking, for provider `anthropic` only (refused with any other): "
    "`enabled` (extended thinking, its budget a share of maxTokens set by the reasoning "
    "effort) or `adaptive` (the model decides how much to think)."
)


class ModelProviderSpec(KubeModel):
    """Where a model is served and how it is spoken to."""

    api: Provider = Field(
        default="openai", description=f"How the runtime talks to it: {PROVIDERS_TEXT}."
    )
    endpoint: StrictStr | None = Field(
        default=None,
        description="Base URL of the endpoint (e.g. http://vllm.models:8000/v1 for openai, "
        "https://api.anthropic.com for anthropic, without /v1); omit for the API's public one.",
        min_length=1,
    )
    api_key_secret: StrictStr | None = Field(
        default=None,
        description="Secret in this namespace (key `apiKey`) holding the endpoint's API key; "
        "mounted into the pods of the agents that use this provider, and no others.",
        min_length=1,
    )
    default_model: Annotated[StrictStr, MaxBytes(MAX_MODEL_LENGTH)] | None = Field(
        default=None,
        description="Model of an AgentConfig that names this provider and no model.",
        min_length=1,
    )
