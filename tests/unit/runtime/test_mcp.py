"""The runtime's MCP client against a real server on loopback: the SDK-built fixture
(the published mcp-server-time behind mcp-proxy runs in tests/e2e/test_mcp.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentworkers.api.mcp import McpServer
from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.mcp import CONNECTED, UNAVAILABLE, Connection, McpServers, secret_headers
from agentworkers.runtime.tools import Toolbox, ToolError
from tests.mcp_servers import fixture_server, free_port, serving


@pytest.fixture(scope="module")
def fixture_url() -> Iterator[str]:
    with serving(fixture_server()) as url:
        yield url


def servers(*kept: McpServer, headers: dict[str, str] | None = None) -> Iterator[McpServers]:
    mcp = McpServers(kept, headers=lambda _: headers or {})
    try:
        mcp.start()
        yield mcp
    finally:
        mcp.close()


@pytest.fixture
def fixture(fixture_url: str) -> Iterator[McpServers]:
    yield from servers(
        McpServer(name="fx", url=fixture_url, timeout_seconds=2),
        headers={"Authorization": "Bearer s3cret"},
    )


def call(mcp: McpServers, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {t.name: t for t in mcp.tools()}[name].handler(args)


def test_tools_are_listed_under_the_one_naming_rule(fixture: McpServers) -> None:
    [connection] = fixture.connections
    assert (connection.state, connection.error) == (CONNECTED, "")
    names = sorted(t.name for t in fixture.tools())
    assert names == [f"fx__{n}" for n in ("add", "echo", "fail", "grow", "slow", "whoami")]
    echo = next(t for t in fixture.tools() if t.name == "fx__echo")
    assert echo.description == "Say `text` back."
    assert echo.parameters["required"] == ["text"]


def test_a_call_returns_the_server_s_own_answer(fixture: McpServers) -> None:
    assert call(fixture, "fx__add", {"a": 2, "b": 40})["structuredContent"] == {"result": 42}
    answer = call(fixture, "fx__echo", {"text": "hello"})
    assert answer["content"] == [{"type": "text", "text": "fixture says: hello"}]
    # The headers the run was given reach the server.
    whoami = call(fixture, "fx__whoami", {})
    assert whoami["content"][0]["text"] == "authorization=Bearer s3cret"


def test_an_is_error_result_comes_back_as_the_tool_s_error(fixture: McpServers) -> None:
    with pytest.raises(ToolError, match="failed on purpose: because"):
        call(fixture, "fx__fail", {"why": "because"})


def test_a_call_past_the_timeout_is_an_error_and_the_session_lives_on(
    fixture: McpServers,
) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"fx__slow timed out after 2 s \(timeoutSeconds\)"):
        call(fixture, "fx__slow", {"seconds": 30})
    assert time.monotonic() - started < 10
    assert call(fixture, "fx__add", {"a": 1, "b": 1})["structuredContent"] == {"result": 2}


def test_a_changed_tool_list_is_listed_again(fixture: McpServers) -> None:
    changed: list[Connection] = []
    fixture.on_change = changed.append
    assert call(fixture, "fx__grow", {"name": "sprout"})["structuredContent"] == {
        "result": "added sprout"
    }
    deadline = time.monotonic() + 10
    while not changed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert changed, "no tools/list_changed was acted on"
    assert call(fixture, "fx__sprout", {})["structuredContent"] == {"result": "sprout is new"}


def test_a_server_down_is_unavailable_and_only_a_required_one_counts(
    fixture_url: str,
) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    for mcp in servers(
        McpServer(name="fx", url=fixture_url),
        McpServer(name="gone", url=down),
        McpServer(name="needed", url=down, required=True),
    ):
        fx, gone, needed = mcp.connections
        assert fx.state == CONNECTED
        assert (gone.state, needed.state) == (UNAVAILABLE, UNAVAILABLE)
        assert "ConnectError" in gone.error
        assert mcp.required_down() == [needed]
        assert {t.name.split("__")[0] for t in mcp.tools()} == {"fx"}
        status = gone.status()
        assert (status.state, status.tools, status.url) == ("Unavailable", (), down)


def test_a_server_that_does_not_answer_is_unavailable_within_its_timeout() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        started = time.monotonic()
        for mcp in servers(McpServer(name="mute", url=url, timeout_seconds=1)):
            [mute] = mcp.connections
            assert mute.state == UNAVAILABLE
            assert mute.error == "no answer within 1 s (timeoutSeconds)"
        assert time.monotonic() - started < 10


def test_the_toolbox_offers_only_what_the_config_keeps(fixture_url: str) -> None:
    kept = McpServer(name="fx", url=fixture_url, tools=("echo", "add", "whoami"))
    paused = McpServer(name="px", url=fixture_url)
    for mcp in servers(kept, paused):
        config = EffectiveConfig(
            agent="a",
            provider="scripted",
            model="m",
            mcp_servers=(kept, paused),
            disabled_tools=("fx__whoami",),
            paused_servers=("px",),
        )
        box = Toolbox.for_config(config, [], mcp.tools)
        assert box.names() == ["fx__add", "fx__echo"]
        for hidden in ("fx__whoami", "fx__fail", "px__echo"):
            result = box.call(hidden, {"text": "x"})
            assert result.error == f"tool {hidden!r} is not available to this run"
        assert box.call("fx__echo", {"text": "x"}).result == {
            "content": [{"type": "text", "text": "fixture says: x"}],
            "structuredContent": {"result": "fixture says: x"},
        }
        assert box.call("fx__add", {"a": "two"}).error is not None  # the server's schema holds


def _with_headers(*headers: tuple[str, str, str]) -> McpServer:
    return McpServer.model_validate(
        {
            "name": "fx",
            "url": "http://x/mcp",
            "headersFrom": [
                {"name": name, "prefix": prefix, "secretKeyRef": {"name": "tok", "key": key}}
                for name, prefix, key in headers
            ],
        }
    )


def test_header_values_come_from_the_mounted_secret_keys(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "token").write_text("s3cret\n")
    server = _with_headers(("Authorization", "Bearer ", "token"), ("X-Team", "", "token"))
    assert secret_headers(server, tmp_path) == {
        "Authorization": "Bearer s3cret",
        "X-Team": "s3cret",
    }
    with pytest.raises(ToolError, match="Secret tok has no key nope mounted"):
        secret_headers(_with_headers(("Authorization", "", "nope")), tmp_path)
