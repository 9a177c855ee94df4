"""reasoningAPI reaches the effective config, from the Worker or its AgentConfig, only for
a run whose provider is anthropic; anywhere else it is refused, never left inert."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, WorkerSpec
from agentworkers.api.agentconfig import ModelDefaults
from agentworkers.core.checks import check_reasoning_api
from agentworkers.core.effective import AGENT, WORKER, resolve
from agentworkers.errors import ReasoningAPIUnsupportedError


def config(**model: object) -> AgentConfigSpec:
    return AgentConfigSpec.model_validate({"model": {"model": "m", **model}})


def test_the_workers_reasoning_api_wins_and_is_sourced() -> None:
    effective = resolve(
        config(provider="anthropic", reasoningAPI="enabled"),
        WorkerSpec(agent="a", reasoning_api="adaptive"),
    )
    assert (effective.reasoning_api, effective.sources["reasoning_api"]) == ("adaptive", WORKER)
    assert effective.wire()["reasoningAPI"] == "adaptive"


def test_the_agents_default_goes_with_its_own_provider() -> None:
    agent = config(provider="anthropic", reasoningAPI="enabled")
    own = resolve(agent, WorkerSpec(agent="a"))
    assert (own.reasoning_api, own.sources["reasoning_api"]) == ("enabled", AGENT)
    # A Worker that picks another provider leaves the default behind.
    other = resolve(agent, WorkerSpec(agent="a", provider="openai"))
    assert (other.provider, other.reasoning_api) == ("openai", None)


def test_a_worker_picking_anthropic_takes_its_own_reasoning_api() -> None:
    effective = resolve(
        config(provider="openai"),
        WorkerSpec(agent="a", provider="anthropic", reasoning_api="enabled"),
    )
    assert (effective.provider, effective.reasoning_api) == ("anthropic", "enabled")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"model": {"model": "m", "reasoningAPI": "enabled"}}, "reasoningAPI"),  # openai
        ({"model": {"model": "m", "provider": "scripted", "reasoningAPI": "x"}}, "reasoningAPI"),
        ({"model": {"model": "m", "provider": "gemini"}}, "provider"),
    ],
)
def test_the_agent_config_refuses_what_its_provider_cannot_do(
    spec: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as error:
        AgentConfigSpec.model_validate(spec)
    assert error.value.errors()[0]["loc"][-1] == field


def test_the_worker_refuses_reasoning_api_with_its_own_other_provider() -> None:
    with pytest.raises(ValidationError, match="needs provider anthropic") as error:
        WorkerSpec.model_validate({"agent": "a", "provider": "openai", "reasoningAPI": "enabled"})
    assert error.value.errors()[0]["loc"] == ("reasoningAPI",)
    with pytest.raises(ValidationError, match="provider"):
        WorkerSpec.model_validate({"agent": "a", "provider": "ollama"})


def test_the_run_start_check_reads_the_agents_provider() -> None:
    """The handler's repeat of admission (which can be off): the Worker names no provider,
    its agent's (a ModelProvider's api already in) is not anthropic."""
    worker = WorkerSpec(agent="a", reasoning_api="enabled")
    check_reasoning_api(worker, ModelDefaults(provider="anthropic", model="m"))
    with pytest.raises(ReasoningAPIUnsupportedError, match="provider is openai") as error:
        check_reasoning_api(worker, ModelDefaults(model="m"))
    assert error.value.field == "spec.reasoningAPI"
