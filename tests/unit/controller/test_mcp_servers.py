"""MCP servers from the AgentConfig to the pod and back: the naming rule, admission, the
effective config, the header Secrets a pod mounts, and what the operator makes of the
runtime's report (McpServersReady, one Warning Event, the failure's reason)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, WorkerSpec
from agentworkers.api.names import mcp_tool_name, mcp_tool_of
from agentworkers.core.effective import resolve
from agentworkers.errors import describe
from agentworkers.virtualagent import Overlay, Profile
from tests.unit.controller.memory import Memory
from tests.unit.controller.test_worker_reconcile import (
    CONFIG,
    _pod_config,
    planner,
    reconcile,
    started,
    worker,
)

SERVERS: list[dict[str, Any]] = [
    {
        "name": "search",
        "url": "http://search-mcp.tools:8080/mcp",
        "tools": ["web_search"],
        "headersFrom": [
            {
                "name": "Authorization",
                "prefix": "Bearer ",
                "secretKeyRef": {"name": "search-token", "key": "token"},
            }
        ],
        "required": True,
        "timeoutSeconds": 5,
    },
    {
        "name": "git_hub",
        "url": "http://git-mcp/mcp",
        "headersFrom": [{"name": "X-Key", "secretKeyRef": {"name": "git-token", "key": "k"}}],
    },
]
ALLOWED = ["search-token", "git-token"]


def spec(**changes: Any) -> dict[str, Any]:
    return {**CONFIG["spec"], "mcpServers": SERVERS, "allowedSecrets": ALLOWED, **changes}


@pytest.mark.parametrize(
    ("server", "tool"),
    [("search", "web_search"), ("git_hub", "list__repos"), ("a-b", "x")],
)
def test_one_naming_rule_and_its_inverse(server: str, tool: str) -> None:
    assert mcp_tool_of(mcp_tool_name(server, tool)) == (server, tool)


@pytest.mark.parametrize("name", ["read_file", "__x", "x__", "web.get"])
def test_a_name_that_is_no_mcp_tool_s(name: str) -> None:
    assert mcp_tool_of(name) is None


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"allowedSecrets": ["search-token"]},
         "spec.mcpServers[1].headersFrom[0].secretKeyRef.name",
         "Secret 'git-token' is not in spec.allowedSecrets"),
        ({"mcpServers": [{**SERVERS[1], "name": "git__hub"}]}, "spec.mcpServers[0].name",
         "should match pattern"),
        ({"mcpServers": [{**SERVERS[1], "name": "git.hub"}]}, "spec.mcpServers[0].name",
         "should match pattern"),
        ({"mcpServers": [{"name": "x"}]}, "spec.mcpServers[0].url", "Field required"),
        ({"mcpServers": [{**SERVERS[1], "url": "git-mcp"}]}, "spec.mcpServers[0].url",
         "should match pattern"),
        ({"mcpServers": [SERVERS[1], SERVERS[1]]}, "spec.mcpServers",
         "names must be unique; git_hub repeat"),
        ({"mcpServers": [{**SERVERS[1], "headersFrom": [{"name": "X", "value": "s3cret"}]}]},
         "spec.mcpServers[0].headersFrom[0].secretKeyRef", "Field required"),
        ({"mcpServers": [{**SERVERS[1], "timeoutSeconds": 0}]},
         "spec.mcpServers[0].timeoutSeconds", "greater than or equal to 1"),
    ],
)  # fmt: skip
def test_a_bad_server_is_refused_naming_the_field(
    changes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        AgentConfigSpec.model_validate(spec(**changes))
    error = describe(refused.value)
    assert error.field == field and words in str(error), str(error)


def test_the_effective_config_carries_each_kept_server_whole() -> None:
    config = AgentConfigSpec.model_validate(spec())
    effective = resolve(config, WorkerSpec(agent="planner"))
    assert [s.name for s in effective.mcp_servers] == ["search", "git_hub"]
    search = effective.mcp_servers[0]
    assert (search.url, search.tools, search.required, search.timeout_seconds) == (
        "http://search-mcp.tools:8080/mcp",
        ("web_search",),
        True,
        5,
    )
    assert search.headers_from[0].secret_key_ref.name == "search-token"
    narrowed = resolve(config, WorkerSpec(agent="planner", mcps=("git_hub",)))
    assert [s.name for s in narrowed.mcp_servers] == ["git_hub"]
    assert narrowed.sources["mcp_servers"] == "worker"
    paused = Profile(parent="planner", key="k", overlay=Overlay(paused_servers=("search",)))
    profiled = resolve(config, WorkerSpec(agent="planner"), paused)
    assert [s.name for s in profiled.mcp_servers] == ["git_hub"]
    assert profiled.sources["mcp_servers"] == "profile"


def _secret_volumes(memory: Memory, name: str) -> list[str]:
    pod = memory.find("pods", name)
    assert pod is not None
    return sorted(v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v)


def test_a_pod_mounts_the_header_secrets_of_the_servers_it_keeps_and_no_other() -> None:
    memory = Memory()
    planner(memory, mcpServers=SERVERS, allowedSecrets=ALLOWED)
    started(memory, "both")
    assert _secret_volumes(memory, "both") == ["git-token", "search-token"]
    started(memory, "one", mcps=["git_hub"])
    assert _secret_volumes(memory, "one") == ["git-token"]
    decided = _pod_config(memory, "one")
    assert [s["name"] for s in decided["mcpServers"]] == ["git_hub"]
    assert "s3cret" not in str(decided)
    pod = memory.find("pods", "one")
    assert pod is not None
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert all(m["readOnly"] for m in mounts if m["mountPath"].startswith("/var/run/"))


def _report(memory: Memory, name: str, **status: Any) -> None:
    """What the runtime writes to its Worker's status."""
    memory.patch_status("workers", "ns", name, status)


def _ready(memory: Memory, name: str, type_: str) -> dict[str, Any]:
    body = memory.find("workers", name)
    assert body is not None
    return next(c for c in body["status"]["conditions"] if c["type"] == type_)


DOWN = {
    "name": "git_hub",
    "url": "http://git-mcp/mcp",
    "state": "Unavailable",
    "message": "ConnectError: All connection attempts failed",
}
UP = {"name": "search", "url": "http://search-mcp.tools:8080/mcp", "required": True,
      "state": "Connected", "tools": ["search__web_search"]}  # fmt: skip


def test_a_server_the_run_could_not_reach_gets_one_warning_event() -> None:
    memory = Memory()
    planner(memory, mcpServers=SERVERS, allowedSecrets=ALLOWED)
    started(memory, "w")
    _report(memory, "w", phase="Running", mcpServers=[UP, DOWN])
    for _ in range(3):
        reconcile(memory, "w")
    ready = _ready(memory, "w", "McpServersReady")
    message = (
        "MCP server git_hub (http://git-mcp/mcp) is unavailable: "
        "ConnectError: All connection attempts failed"
    )
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "McpServerUnavailable",
        message,
    )
    warnings = [e for e in memory.events if e[2] == "McpServerUnavailable"]
    assert warnings == [("w", "Warning", "McpServerUnavailable", message)]
    # The run goes on: Done is a completion, not a failure.
    _report(memory, "w", phase="Done", output="fine without it")
    reconcile(memory, "w")
    assert _ready(memory, "w", "Ready")["reason"] == "Completed"


def test_every_server_reached_is_said_once_in_a_condition() -> None:
    memory = Memory()
    planner(memory, mcpServers=SERVERS, allowedSecrets=ALLOWED)
    started(memory, "w")
    _report(memory, "w", mcpServers=[UP])
    reconcile(memory, "w")
    ready = _ready(memory, "w", "McpServersReady")
    assert (ready["status"], ready["reason"]) == ("True", "Connected")
    assert not [e for e in memory.events if e[2] == "McpServerUnavailable"]


def test_a_run_without_its_required_server_fails_with_its_own_reason() -> None:
    memory = Memory()
    planner(memory, mcpServers=SERVERS, allowedSecrets=ALLOWED)
    started(memory, "w")
    down = {**UP, "state": "Unavailable", "tools": [], "message": "ConnectError: refused"}
    error = "McpServerUnavailable: required MCP server unavailable: search (...): refused"
    _report(memory, "w", phase="Failed", error=error, mcpServers=[down])
    reconcile(memory, "w")
    ready = _ready(memory, "w", "Ready")
    assert (ready["reason"], ready["message"]) == (
        "McpServerUnavailable",
        f"the run failed: {error}",
    )
    assert [e[2] for e in memory.events if e[1] == "Warning"] == [
        "McpServerUnavailable",
        "McpServerUnavailable",
    ]


def test_a_worker_without_servers_says_nothing_of_them() -> None:
    memory = Memory()
    planner(memory)
    memory.put("workers", worker("w"))
    reconcile(memory, "w")
    body = memory.find("workers", "w")
    assert body is not None
    assert "McpServersReady" not in {c["type"] for c in body["status"]["conditions"]}
