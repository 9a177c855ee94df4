"""A run below a virtual-profile run never gets more than that run's effective config."""

from __future__ import annotations

from agentworkers.api import AgentConfigSpec, WorkerSpec
from agentworkers.api.worker import InheritedBounds
from agentworkers.core.effective import INHERITED, inherit, resolve
from agentworkers.virtualagent import Overlay, Profile

CONFIG = AgentConfigSpec.model_validate(
    {
        "model": {"model": "big", "maxTokens": 4000, "temperature": 1.0},
        "skills": ["search", "write", "deploy"],
        "tools": ["run_command", "read_file", "spawn_worker"],
        "mcpServers": [
            {"name": "git", "url": "http://git-mcp/mcp"},
            {"name": "prod", "url": "http://prod-mcp/mcp"},
        ],
        "limits": {"maxSteps": 100, "tokenBudget": 100000},
        "allowedSecrets": ["model-key", "prod-db"],
    }
)
PROFILE = Profile(
    parent="planner",
    key="researcher",
    overlay=Overlay(
        model="small",
        temperature=0.2,
        skills=("search",),
        disabled_tools=("run_command",),
        paused_servers=("prod",),
        max_steps=10,
        token_budget=5000,
    ),
)
VIA = InheritedBounds(worker="r1", profile="researcher")


def test_a_grandchild_keeps_no_more_than_the_profile_run() -> None:
    ancestor = WorkerSpec(agent="planner", allowed_secrets=("model-key",))
    grandchild = WorkerSpec(agent="planner", allowed_secrets=("model-key", "prod-db"))
    ceiling = resolve(CONFIG, ancestor, PROFILE)
    own = resolve(CONFIG, grandchild)
    bounded = inherit(own, ceiling, VIA)

    assert own.skills == ("search", "write", "deploy") and own.max_steps == 100
    assert bounded.model == "small" and bounded.temperature == 0.2
    assert bounded.skills == ("search",)
    assert bounded.tools == ("read_file", "spawn_worker")
    assert bounded.disabled_tools == ("run_command",)
    assert [s.name for s in bounded.mcp_servers] == ["git"]
    assert bounded.mcp_servers[0].url == "http://git-mcp/mcp"
    assert bounded.paused_servers == ("prod",)
    assert bounded.max_steps == 10 and bounded.token_budget == 5000
    assert bounded.max_tokens == 4000
    assert bounded.secrets == ("model-key",)
    assert bounded.inherited == VIA and bounded.profile is None
    for field in ("model", "skills", "tools", "max_steps", "token_budget", "secrets"):
        assert bounded.sources[field] == INHERITED, field
    assert bounded.sources["max_tokens"] != INHERITED  # unchanged by the ceiling


def test_a_descendant_s_own_narrowing_still_holds() -> None:
    ceiling = resolve(CONFIG, WorkerSpec(agent="planner"), PROFILE)
    own = resolve(CONFIG, WorkerSpec(agent="planner", skills=()))
    bounded = inherit(own, ceiling, VIA)
    assert bounded.skills == () and bounded.sources["skills"] == "worker"


def test_no_budget_below_a_budget_is_the_budget() -> None:
    config = CONFIG.model_copy(
        update={"limits": CONFIG.limits.model_copy(update={"token_budget": None})}
    )
    ceiling = resolve(config, WorkerSpec(agent="planner"), PROFILE)
    bounded = inherit(resolve(config, WorkerSpec(agent="planner")), ceiling, VIA)
    assert bounded.token_budget == 5000
