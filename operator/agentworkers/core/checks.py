"""Rules that admission and the handlers both enforce, each written once.

Admission refuses the write; a handler, which must hold when admission is off, fails
the run or the config with the same reason and words.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentworkers.api.agentconfig import ModelDefaults
from agentworkers.api.provider import reasoning_api_rule
from agentworkers.api.worker import WorkerSpec
from agentworkers.errors import (
    InvalidSpecError,
    ReasoningAPIUnsupportedError,
    SecretNotAllowedError,
)


def check_secrets(worker: WorkerSpec, allowed: Iterable[str]) -> None:
    """A Worker may name only API-key Secrets its AgentConfig allows."""
    refused = sorted(set(worker.allowed_secrets) - set(allowed))
    if refused:
        raise SecretNotAllowedError(
            f"AgentConfig {worker.agent} does not allow secret(s) {', '.join(refused)}",
            field="spec.allowedSecrets",
        )


def check_reasoning_api(worker: WorkerSpec, model: ModelDefaults) -> None:
    """A Worker's reasoningAPI needs a run whose provider is anthropic: its own, else its
    AgentConfig's (`model`, with any ModelProvider's api already in)."""
    provider = worker.provider or model.provider
    if worker.reasoning_api is not None and provider != "anthropic":
        raise ReasoningAPIUnsupportedError(reasoning_api_rule(provider), field="spec.reasoningAPI")


def check_kind(worker: WorkerSpec) -> None:
    """A Worker's kind agrees with its parent: dynamic runs are built by a parent run,
    static ones are top-level. Checked when a Worker is made (Workers 0.1.0 made for a
    parent say static, and keep running)."""
    if (worker.kind == "dynamic") == (worker.parent is not None):
        return
    if worker.parent is None:
        rule = "'dynamic' needs spec.parent: a dynamic run is built by a parent run"
    else:
        rule = (
            f"'static' with spec.parent {worker.parent!r}: a run with a parent is dynamic "
            "(static is a top-level run of its AgentConfig); omit kind or set dynamic"
        )
    raise InvalidSpecError(rule, field="spec.kind")
