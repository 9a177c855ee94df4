"""The model drivers, one per provider, and ``client_for``, which picks one.

- ``openai``: any OpenAI-compatible chat-completions endpoint, through the ``openai``
  SDK (``openai_chat``);
- ``anthropic``: Anthropic's Messages API, through the ``anthropic`` SDK
  (``anthropic_messages``);
- ``scripted``: replies from a script, for tests and demos (``scripted``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.models import ModelClient
from agentworkers.runtime.providers.scripted import ScriptedModel, parse_script

__all__ = ["ScriptedModel", "client_for", "parse_script"]


def preload(provider: str) -> None:
    """Import a provider's SDK ahead of any run: a warm pod's runtime, whose agent names
    the provider, pays the import before its claim instead of after."""
    if provider == "openai":
        import agentworkers.runtime.providers.openai_chat  # noqa: PLC0415
    elif provider == "anthropic":
        import agentworkers.runtime.providers.anthropic_messages  # noqa: F401, PLC0415


def client_for(
    config: EffectiveConfig,
    api_key: str | None = None,
    script: str | bytes | Sequence[Any] | None = None,
    timeout: float = 120.0,
) -> ModelClient:
    """The run's one client for its configuration's provider (the key read from the
    api-key Secret; a script for ``scripted``). Only the chosen driver's SDK is
    imported: each costs a pod 20 to 50 MB and up to a second of its start."""
    match config.provider:
        case "openai":
            from agentworkers.runtime.providers.openai_chat import OpenAIChat  # noqa: PLC0415

            return OpenAIChat(config.base_url, api_key, config.model, timeout)
        case "anthropic":
            from agentworkers.runtime.providers.anthropic_messages import (  # noqa: PLC0415
                AnthropicMessages,
            )

            return AnthropicMessages(config.base_url, api_key, config.model, timeout)
        case "scripted":
            if script is None:
                raise ValueError("provider scripted needs a script")
            return ScriptedModel(script)
        case _:
            assert_never(config.provider)
