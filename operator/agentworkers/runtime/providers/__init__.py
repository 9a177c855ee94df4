"""The model drivers, one per provider, and ``client_for``, which picks one.

- ``openai``: any OpenAI-compatible chat-completions endpoint, through the ``openai``
  SDK (``openai_chat``);
- ``anthropic``: Anthropic's Messages API, through the ``anthropic`` SDK
  (``anthropic_messages``);
- ``scripted``: replies from a script, for tests and demos (``scripted``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentworkers.core.effective import EffectiveConfig, ModelEndpoint
from agentworkers.runtime.models import ModelClient
from agentworkers.runtime.providers.scripted import ScriptedModel, parse_script

if TYPE_CHECKING:  # an SDK comes only with the driver chosen (`_driver`)
    from agentworkers.runtime.providers.anthropic_messages import AnthropicMessages
    from agentworkers.runtime.providers.openai_chat import OpenAIChat

    SdkDriver = OpenAIChat | AnthropicMessages

__all__ = ["Prepared", "ScriptedModel", "client_for", "parse_script", "prepare"]


# Seconds a model call may go silent (the SDK's read timeout; see ``streaming``).
MODEL_TIMEOUT = 120.0


@dataclass(frozen=True)
class Prepared:
    """A model client built ahead of its run (a warm pod's, while it waits for a claim):
    the SDK's client, its HTTP client and TLS context, about 20 ms of CPU each, off the
    way to the run's first model call. It serves one run: one whose endpoint and key
    are those it was built with."""

    endpoint: ModelEndpoint
    api_key: str | None
    client: SdkDriver

    def serves(self, config: EffectiveConfig, api_key: str | None) -> bool:
        return self.endpoint == config.endpoint and self.api_key == api_key


def prepare(endpoint: ModelEndpoint, api_key: str | None) -> Prepared | None:
    """The SDK of `endpoint`'s provider imported and its client built, for a run to come
    (None for ``scripted``, which has nothing to build: its script is the run's)."""
    driver = _driver(endpoint.provider)
    if driver is None:
        return None
    # The model goes with each request: the run's is set when it takes the client.
    client = driver(endpoint.base_url, api_key, "", MODEL_TIMEOUT)
    return Prepared(endpoint, api_key, client)


def _driver(provider: str) -> type[SdkDriver] | None:
    """The SDK driver of `provider`, imported now: each SDK costs a pod 20 to 50 MB and up
    to a second of its start, so only the chosen one is."""
    if provider == "openai":
        from agentworkers.runtime.providers.openai_chat import OpenAIChat  # noqa: PLC0415

        return OpenAIChat
    if provider == "anthropic":
        from agentworkers.runtime.providers.anthropic_messages import (  # noqa: PLC0415
            AnthropicMessages,
        )

        return AnthropicMessages
    return None


def client_for(
    config: EffectiveConfig,
    api_key: str | None = None,
    script: str | bytes | Sequence[Any] | None = None,
    prepared: Prepared | None = None,
) -> ModelClient:
    """The run's one client for its configuration's provider (the key read from the
    api-key Secret; a script for ``scripted``): the one `prepared` ahead if it serves
    this run, else a new one."""
    if prepared is not None and prepared.serves(config, api_key):
        prepared.client.model = config.model
        return prepared.client
    if (driver := _driver(config.provider)) is not None:
        return driver(config.base_url, api_key, config.model, MODEL_TIMEOUT)
    if script is None:
        raise ValueError("provider scripted needs a script")
    return ScriptedModel(script)
