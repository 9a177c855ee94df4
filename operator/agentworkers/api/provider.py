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


class ModelProviderSpec(KubeModel):
    """Where a model is served and how it is spoken to."""

    api: Literal["openai", "scripted"] = Field(
        default="openai",
        description="How the runtime talks to it: `openai` (any OpenAI-compatible "
        "chat-completions endpoint) or `scripted` (replies from a script, for tests and demos).",
    )
    endpoint: StrictStr | None = Field(
        default=None,
        description="Base URL of the endpoint (e.g. http://vllm.models:8000/v1); omit for "
        "the API's public one.",
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
