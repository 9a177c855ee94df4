"""Toolbox filtering, the sandbox's confinement, and the planner tools."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentworkers.api.agentconfig import BUILTIN_TOOLS, AgentConfigSpec
from agentworkers.api.mcp import McpServer
from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.tools import (
    MAX_READ_BYTES,
    Sandbox,
    Tool,
    Toolbox,
    planner_tools,
)

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def recording_tool(name: str, calls: list[str]) -> Tool:
    def handler(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(name)
        return {"ran": name}

    return Tool(name, f"the {name} tool", ANY_OBJECT, handler)


def test_hidden_tools_are_never_offered_and_never_run() -> None:
    calls: list[str] = []
    names = ["read_file", "write_file", "list_files", "unlisted"]
    config = EffectiveConfig(
        agent="a",
        provider="scripted",
        model="m",
        tools=("read_file", "write_file", "list_files"),
        disabled_tools=("write_file",),
    )
    box = Toolbox.for_config(config, [recording_tool(n, calls) for n in names])

    assert box.names() == ["list_files", "read_file"]
    assert [s.name for s in box.specs()] == ["list_files", "read_file"]
    for hidden in ("write_file", "unlisted", "nonexistent"):
        result = box.call(hidden, {})
        assert result.error == f"tool {hidden!r} is not available to this run"
        assert result.result is None
    assert calls == []
    assert box.call("read_file", {}).result == {"ran": "read_file"}
    assert calls == ["read_file"]


def test_mcp_tools_are_offered_by_server_allow_list_pause_and_disabled_tools() -> None:
    calls: list[str] = []
    fs = McpServer(name="fs", url="http://fs/mcp")
    web = McpServer(name="web", url="http://web/mcp", tools=("get", "head"))
    every = McpServer(name="any", url="http://any/mcp")
    listed = ["fs__read", "web__get", "web__head", "web__post", "git__log", "any__ok", "any__x.y"]
    listed.append("read_file")
    config = EffectiveConfig(
        agent="a",
        provider="scripted",
        model="m",
        mcp_servers=(fs, web, every),  # git: not kept (a Worker's mcps left it out)
        disabled_tools=("web__head", "read_file"),
        paused_servers=("fs",),
    )
    box = Toolbox.for_config(config, [], lambda: [recording_tool(n, calls) for n in listed])
    # fs paused, web__post not in the allow-list, web__head disabled, git not kept, a name
    # the model APIs refuse, and a built-in name no server may stand in for.
    assert box.names() == ["any__ok", "web__get"]
    for hidden in ("fs__read", "web__head", "web__post", "git__log", "any__x.y", "read_file"):
        assert box.call(hidden, {}).error == f"tool {hidden!r} is not available to this run"
    assert calls == []
    assert box.call("web__get", {}).result == {"ran": "web__get"}


def test_arguments_are_checked_against_the_schema_and_failures_become_results() -> None:
    def broken(args: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("boom")

    tools = [
        Tool("strict", "", {"type": "object", "properties": {"n": {"type": "integer"}}}, dict),
        Tool("broken", "", ANY_OBJECT, broken),
    ]
    box = Toolbox(tools, allowed=["strict", "broken"])

    assert box.call("strict", {"n": "x"}).error == (
        "invalid arguments for strict at $.n: 'x' is not of type 'integer'"
    )
    assert box.call("strict", {"n": 1}).result == {"n": 1}
    assert box.call("broken", {}).error == "broken failed: KeyError: 'boom'"
    assert box.call("broken", {}).payload() == {"error": "broken failed: KeyError: 'boom'"}


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    root = tmp_path / "sandbox"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha")
    return Sandbox(str(root))


def sandbox_box(sandbox: Sandbox) -> Toolbox:
    return Toolbox(sandbox.tools(), allowed=["list_files", "read_file", "write_file"])


def test_sandbox_tools_read_write_and_list_inside(sandbox: Sandbox) -> None:
    box = sandbox_box(sandbox)

    assert box.call("write_file", {"path": "out/b.txt", "content": "beta"}).result == {
        "path": "out/b.txt",
        "bytes": 4,
    }
    assert box.call("read_file", {"path": "out/../out/b.txt"}).result == {
        "path": "out/../out/b.txt",
        "content": "beta",
        "truncated": False,
    }
    listing = box.call("list_files", {}).result
    assert listing is not None
    assert listing["entries"] == [{"name": "docs", "dir": True}, {"name": "out", "dir": True}]
    assert box.call("read_file", {"path": "docs"}).error == "'docs' is a directory"
    assert box.call("read_file", {"path": "nope.txt"}).error == "'nope.txt' does not exist"
    assert box.call("write_file", {"path": "docs", "content": ""}).error == "'docs' is a directory"
    os.mkfifo(os.path.join(sandbox.root, "fifo"))  # refused at once, never a hang
    assert box.call("read_file", {"path": "fifo"}).error == "'fifo' is not a regular file"


def test_reads_are_bounded(sandbox: Sandbox) -> None:
    with open(os.path.join(sandbox.root, "big.txt"), "w") as f:
        f.write("x" * (MAX_READ_BYTES + 10))
    result = sandbox_box(sandbox).call("read_file", {"path": "big.txt"}).result
    assert result is not None
    assert len(result["content"]) == MAX_READ_BYTES
    assert result["truncated"] is True


def test_escapes_are_refused_naming_the_path(sandbox: Sandbox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, os.path.join(sandbox.root, "link"))
    box = sandbox_box(sandbox)

    assert box.call("read_file", {"path": "../outside/secret.txt"}).error == (
        "path '../outside/secret.txt' is outside the sandbox"
    )
    assert box.call("read_file", {"path": "/etc/passwd"}).error == (
        "path '/etc/passwd' is absolute; use a path relative to the sandbox"
    )
    assert box.call("read_file", {"path": "link/secret.txt"}).error == (
        "path 'link/secret.txt' is outside the sandbox"
    )
    assert box.call("list_files", {"path": "link"}).error == "path 'link' is outside the sandbox"
    assert box.call("write_file", {"path": "link/new.txt", "content": "x"}).error == (
        "path 'link/new.txt' is outside the sandbox"
    )
    assert box.call("write_file", {"path": "../x", "content": "x"}).error is not None
    assert box.call("list_files", {"path": "docs/../../outside"}).error == (
        "path 'docs/../../outside' is outside the sandbox"
    )
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert not (tmp_path / "x").exists()


class FakeWorkerOps:
    """In-memory children: enough to see the planner tools call through."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def spawn(
        self, name: str, message: str, profile: str | None, inputs: list[str], description: str
    ) -> dict[str, Any]:
        self.calls.append(("spawn", name, message, str(profile), description, *inputs))
        return {"name": name, "phase": "Running"}

    def inspect(self, name: str, since: int) -> dict[str, Any]:
        self.calls.append(("inspect", name, str(since)))
        return {"name": name, "events": []}

    def collect(self, name: str, timeout: float) -> dict[str, Any]:
        self.calls.append(("collect", name, str(timeout)))
        return {"name": name, "output": "done"}

    def kill(self, name: str, reason: str) -> dict[str, Any]:
        self.calls.append(("kill", name, reason))
        return {"name": name, "phase": "Killed"}


def test_planner_tools_call_worker_ops() -> None:
    ops = FakeWorkerOps()
    names = ["spawn_worker", "inspect_worker", "collect_worker", "kill_worker"]
    box = Toolbox(planner_tools(ops), allowed=names)

    assert box.call("spawn_worker", {"name": "c1", "message": "go", "profile": "reviewer"}).result
    assert box.call("spawn_worker", {"name": "c2", "message": "go"}).result
    spawned = {"name": "c3", "message": "go", "inputs": ["a.md"], "description": "reads a.md"}
    assert box.call("spawn_worker", spawned).result
    assert box.call("inspect_worker", {"name": "c1", "since": 3}).result
    assert box.call("collect_worker", {"name": "c1"}).result == {"name": "c1", "output": "done"}
    assert box.call("kill_worker", {"name": "c2", "reason": "enough"}).result
    assert box.call("collect_worker", {"name": "c1", "timeout": 10_000}).error is not None
    assert box.call("kill_worker", {"name": "c2", "reason": ""}).error is not None
    assert ops.calls == [
        ("spawn", "c1", "go", "reviewer", ""),
        ("spawn", "c2", "go", "None", ""),
        ("spawn", "c3", "go", "None", "reads a.md", "a.md"),
        ("inspect", "c1", "3"),
        ("collect", "c1", "60.0"),
        ("kill", "c2", "enough"),
    ]


def test_the_runtime_makes_exactly_the_builtin_tools_admission_knows(tmp_path: Path) -> None:
    made = [t.name for t in (*Sandbox(str(tmp_path)).tools(), *planner_tools(FakeWorkerOps()))]
    assert sorted(made) == sorted(BUILTIN_TOOLS)


def test_an_unknown_tool_name_is_refused_with_the_names_that_exist() -> None:
    with pytest.raises(pydantic.ValidationError) as refused:
        AgentConfigSpec.model_validate({"model": {"model": "m"}, "tools": ["web_search"]})
    (error,) = refused.value.errors()
    assert error["loc"] == ("tools", 0)
    assert all(repr(name) in error["msg"] for name in BUILTIN_TOOLS)
