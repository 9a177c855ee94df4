"""MCP servers in real runs: worker pods (through the local pod runner) reach real MCP
servers on loopback, the SDK-built fixture and the published mcp-server-time behind
mcp-proxy, as their effective config allows, with scripted models driving the tools."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client
from tests.e2e.support import CONFIG, PROFILES, Cluster, first_revision, reached, wait_until
from tests.mcp_servers import fixture_server, free_port, serving, time_server

pytestmark = pytest.mark.usefixtures("operator", "podrunner")

TOKEN_SECRET = "search-token"


@pytest.fixture(scope="module")
def fixture_url() -> Iterator[str]:
    with serving(fixture_server()) as url:
        yield url


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def _agent(
    cluster: Cluster, namespace: str, servers: list[dict[str, Any]], name: str = "planner"
) -> None:
    """The example agent (as `name`) with `servers` (its reviewer profile pauses `search`),
    and the Secret their headers come from."""
    config = copy.deepcopy(CONFIG)
    config["metadata"]["name"] = name
    config["spec"]["mcpServers"] = servers
    config["spec"]["allowedSecrets"] = [TOKEN_SECRET]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": TOKEN_SECRET},
        "data": {"token": base64.b64encode(b"s3cret-token").decode()},
    }
    cluster.apply(namespace, secret, *PROFILES, config)
    first_revision(cluster, namespace, name)


def _search(url: str, **more: Any) -> dict[str, Any]:
    return {
        "name": "search",
        "url": url,
        "tools": ["echo", "whoami", "fail"],
        "headersFrom": [
            {
                "name": "Authorization",
                "prefix": "Bearer ",
                "secretKeyRef": {"name": TOKEN_SECRET, "key": "token"},
            }
        ],
        "timeoutSeconds": 10,
        **more,
    }


def _lines(cluster: Cluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    """The run's events, whole, as its pod logged them."""
    logs = cluster.kubectl("logs", pod, "-n", namespace).stdout.splitlines()
    return [json.loads(line) for line in logs if line.startswith("{")]


def _results(cluster: Cluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in _lines(cluster, namespace, pod) if e["kind"] == "tool_result"]


def _warnings(cluster: Cluster, namespace: str, name: str, reason: str) -> list[str]:
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace,
        "--field-selector", f"involvedObject.name={name},reason={reason}",
    )["items"]  # fmt: skip
    return [e["message"] for e in events if e["type"] == "Warning"]


def test_a_run_calls_an_mcp_tool_and_gets_the_server_s_real_answer(
    cluster: Cluster, namespace: str, client: Client, fixture_url: str
) -> None:
    _agent(cluster, namespace, [_search(fixture_url)])
    script = [
        {"tool": "search__echo", "args": {"text": "ping"}},
        {"tool": "search__whoami", "args": {}},
        {"tool": "search__fail", "args": {"why": "on purpose"}},
        {"tool": "search__slow", "args": {"seconds": 1}},  # not in the allow-list
        {"reply": "searched"},
    ]
    client.spawn("asker", WorkerSpec(agent="planner", initial_message="go", script=script))
    info = reached(client, "asker", "Done")
    assert info.status.output == "searched"
    [server] = info.status.mcp_servers or ()
    assert (server.name, server.state, server.url) == ("search", "Connected", fixture_url)
    assert server.tools == ("search__echo", "search__fail", "search__whoami")

    echo, whoami, fail, slow = _results(cluster, namespace, "asker")
    assert echo["result"]["content"] == [{"type": "text", "text": "fixture says: ping"}]
    # The header from the allowed Secret reached the server, and only the server.
    assert whoami["result"]["structuredContent"] == {"result": "authorization=Bearer s3cret-token"}
    assert "failed on purpose: on purpose" in fail["error"]
    assert slow["error"] == "tool 'search__slow' is not available to this run"
    pod = cluster.kubectl_json("get", "pod", "asker", "-n", namespace)
    assert "s3cret-token" not in json.dumps(pod)
    mcp_events = [e for e in _lines(cluster, namespace, "asker") if e["kind"] == "mcp_server"]
    assert [e["payload"]["state"] for e in mcp_events] == ["Connected"]
    # The operator derives the condition from the run's report, which may come after Done.
    ready = wait_until(
        "the operator's McpServersReady condition",
        lambda: next(
            (c for c in client.get("asker").status.conditions if c.type == "McpServersReady"),
            None,
        ),
    )
    assert (ready.status, ready.reason) == ("True", "Connected")

    # explain shows the server and the tools the run got.
    found = client.explain("asker")
    rows = {f.field: f.value for f in found.mcp}
    assert rows == {"mcp.search": f"{fixture_url}: search__echo, search__fail, search__whoami"}


def test_a_paused_server_is_out_of_reach_of_the_profile_run_and_the_runs_below_it(
    cluster: Cluster, namespace: str, client: Client, fixture_url: str
) -> None:
    _agent(cluster, namespace, [_search(fixture_url)])
    call = {"tool": "search__echo", "args": {"text": "anyone?"}}
    client.spawn(
        "p",
        WorkerSpec(
            agent="planner", initial_message="x", interactive=True, script=[call, {"reply": "up"}]
        ),
    )
    assert reached(client, "p", "Idle").status.mcp_servers[0].state == "Connected"
    # The reviewer profile pauses search: its run is given no tool of it, and a call anyway
    # is refused without reaching the server.
    client.spawn(
        "rev",
        WorkerSpec(
            agent="planner",
            parent="p",
            profile="reviewer",
            initial_message="review",
            interactive=True,
            script=[call, {"reply": '{"verdict": "approve"}'}],
        ),
    )
    rev = reached(client, "rev", "Idle")
    # Below the profile run, a child of its own inherits the pause.
    client.spawn(
        "below",
        WorkerSpec(
            agent="planner", parent="rev", initial_message="go", script=[call, {"reply": "ok"}]
        ),
    )
    below = reached(client, "below", "Done")
    for name, info in (("rev", rev), ("below", below)):
        assert info.status.mcp_servers is None, name  # nothing kept, nothing connected
        [result] = _results(cluster, namespace, name)
        assert result["error"] == "tool 'search__echo' is not available to this run", name
        decided = client.explain(name)
        assert {f.field: f.value for f in decided.fields}["mcpServers"] == [], name
        volumes = cluster.kubectl_json("get", "pod", name, "-n", namespace)["spec"]["volumes"]
        assert TOKEN_SECRET not in json.dumps(volumes), name  # its header Secret stays out
    [answer] = _results(cluster, namespace, "p")
    assert answer["result"]["content"][0]["text"] == "fixture says: anyone?"


def test_a_server_down_is_a_warning_and_a_required_one_fails_the_run(
    cluster: Cluster, namespace: str, client: Client, fixture_url: str
) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    _agent(cluster, namespace, [_search(fixture_url), {"name": "gone", "url": down}])
    client.spawn(
        "goes-on",
        WorkerSpec(
            agent="planner",
            initial_message="go",
            script=[{"tool": "search__echo", "args": {"text": "still here"}}, {"reply": "fine"}],
        ),
    )
    info = reached(client, "goes-on", "Done")
    states = {s.name: s.state for s in info.status.mcp_servers or ()}
    assert states == {"search": "Connected", "gone": "Unavailable"}
    [warning] = wait_until(
        "the Warning Event",
        lambda: _warnings(cluster, namespace, "goes-on", "McpServerUnavailable"),
    )
    assert warning.startswith(f"MCP server gone ({down}) is unavailable: ")
    stream = [e["payload"] for e in _lines(cluster, namespace, "goes-on")]
    assert any(p.get("name") == "gone" and p.get("state") == "Unavailable" for p in stream)

    strict = [_search(fixture_url), {"name": "gone", "url": down, "required": True}]
    _agent(cluster, namespace, strict, name="strict")
    client.spawn("stops", WorkerSpec(agent="strict", initial_message="go", script=[{"reply": "x"}]))
    failed = reached(client, "stops", "Failed")
    assert (failed.status.error or "").startswith(
        "McpServerUnavailable: required MCP server unavailable: gone"
    )
    ready = next(c for c in failed.status.conditions if c.type == "Ready")
    assert ready.reason == "McpServerUnavailable"
    assert not [e for e in _lines(cluster, namespace, "stops") if e["kind"] == "tool_call"]


def test_a_published_server_behind_mcp_proxy(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    with time_server() as url:
        _agent(cluster, namespace, [{"name": "time", "url": url, "timeoutSeconds": 30}])
        script = [
            {"tool": "time__get_current_time", "args": {"timezone": "Europe/Paris"}},
            {"reply": "it is time"},
        ]
        client.spawn("clock", WorkerSpec(agent="planner", initial_message="when?", script=script))
        info = reached(client, "clock", "Done")
    [server] = info.status.mcp_servers or ()
    assert "time__get_current_time" in server.tools
    [now] = _results(cluster, namespace, "clock")
    assert '"timezone": "Europe/Paris"' in now["result"]["content"][0]["text"]


@pytest.mark.parametrize(
    ("server", "allowed", "field"),
    [
        ({"name": "git__hub", "url": "http://git/mcp"}, [], "spec.mcpServers[0].name"),
        (_search("http://search/mcp"), [], "spec.mcpServers[0].headersFrom[0].secretKeyRef.name"),
        ({"name": "search"}, [], "spec.mcpServers[0].url"),
    ],
)
def test_a_bad_server_is_refused_at_admission_naming_the_field(
    cluster: Cluster, namespace: str, server: dict[str, Any], allowed: list[str], field: str
) -> None:
    config = copy.deepcopy(CONFIG)
    config["spec"]["mcpServers"] = [server]
    config["spec"]["allowedSecrets"] = allowed
    refused = cluster.apply(namespace, config, check=False)
    assert refused.returncode != 0 and field in refused.stderr, refused.stderr
    assert cluster.kubectl("get", "agentconfigs", "-n", namespace, "-o", "name").stdout == ""
