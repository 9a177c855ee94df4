"""OpenAIChatClient against a local chat-completions server (127.0.0.1, random port)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.events import EventBus, EventKind
from agentworkers.runtime.loop import AgentLoop
from agentworkers.runtime.models import Message, ModelError, OpenAIChatClient, Params
from agentworkers.runtime.tools import Sandbox, Toolbox


@dataclass
class FakeEndpoint:
    """Answers each POST with the next canned (status, body, headers); records requests."""

    responses: list[tuple[int, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    state = FakeEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            state.bodies.append(json.loads(self.rfile.read(length)))
            state.headers.append(dict(self.headers))
            state.paths.append(self.path)
            status, body, headers = (
                state.responses.pop(0) if state.responses else (599, {"error": "none left"}, {})
            )
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def completion(message: dict[str, Any], tokens: int = 10) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", **message}}],
        "usage": {"total_tokens": tokens},
    }


def client(url: str, sleeps: list[float] | None = None) -> OpenAIChatClient:
    return OpenAIChatClient(
        url,
        "sk-test",
        "test-model",
        timeout=5,
        retries=2,
        backoff=0.25,
        sleep=(sleeps if sleeps is not None else []).append,
    )


def test_a_tool_call_round_trip_through_the_loop(endpoint: FakeEndpoint, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello from the sandbox")
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
    }
    endpoint.responses = [
        (200, completion({"content": None, "tool_calls": [call], "reasoning_content": "hm"}), {}),
        (200, completion({"content": "It says hello."}, tokens=30), {}),
    ]
    config = EffectiveConfig(
        agent="a",
        provider="openai",
        model="test-model",
        tools=("read_file",),
        temperature=0.2,
        max_tokens=100,
        reasoning_effort="low",
        instructions="Be brief.",
    )
    bus = EventBus("w1")
    loop = AgentLoop(
        config,
        client(endpoint.url),
        Toolbox.for_config(config, Sandbox(str(tmp_path)).tools()),
        bus,
    )

    assert loop.run_turn("What do the notes say?") == "It says hello."
    assert loop.tokens == 40

    first, second = endpoint.bodies
    assert endpoint.paths == ["/v1/chat/completions"] * 2
    assert endpoint.headers[0]["Authorization"] == "Bearer sk-test"
    assert first["model"] == "test-model"
    assert first["tool_choice"] == "auto"
    assert (first["temperature"], first["max_tokens"], first["reasoning_effort"]) == (
        0.2,
        100,
        "low",
    )
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file"]
    assert first["tools"][0]["type"] == "function"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["path"]
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What do the notes say?"},
    ]
    assistant, tool = second["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_abc"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "notes.txt"}
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_abc"
    assert json.loads(tool["content"])["result"]["content"] == "hello from the sandbox"
    kinds = [e.kind for e in bus.recent()]
    assert EventKind.THOUGHT in kinds and EventKind.TOOL_RESULT in kinds


def test_off_reasoning_and_no_tools_are_not_sent(endpoint: FakeEndpoint) -> None:
    endpoint.responses = [(200, completion({"content": "hi"}), {})]
    client(endpoint.url).complete([Message("user", "hi")], [], Params(reasoning_effort="off"))
    assert set(endpoint.bodies[0]) == {"model", "messages"}


def test_a_500_is_retried_after_a_backoff(endpoint: FakeEndpoint) -> None:
    sleeps: list[float] = []
    endpoint.responses = [
        (500, {"error": "overloaded"}, {}),
        (429, {"error": "slow down"}, {"Retry-After": "2"}),
        (200, completion({"content": "fine"}, tokens=7), {}),
    ]

    reply = client(endpoint.url, sleeps).complete([Message("user", "hi")], [], Params())

    assert (reply.content, reply.usage_tokens) == ("fine", 7)
    assert len(endpoint.bodies) == 3
    assert sleeps == [0.25, 2.0]  # our backoff, then the server's Retry-After


def test_retries_are_bounded(endpoint: FakeEndpoint) -> None:
    endpoint.responses = [(503, {"error": "down"}, {})] * 5
    with pytest.raises(ModelError) as failure:
        client(endpoint.url).complete([Message("user", "hi")], [], Params())
    assert failure.value.status == 503
    assert len(endpoint.bodies) == 3  # the first try and two retries


def test_a_401_fails_at_once_with_status_and_body(endpoint: FakeEndpoint) -> None:
    endpoint.responses = [(401, {"error": {"message": "Incorrect API key provided"}}, {})]

    with pytest.raises(ModelError, match=r"HTTP 401: .*Incorrect API key provided") as failure:
        client(endpoint.url).complete([Message("user", "hi")], [], Params())

    assert failure.value.status == 401
    assert len(endpoint.bodies) == 1


def test_malformed_tool_arguments_are_a_model_error(endpoint: FakeEndpoint) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{oops"}}
    endpoint.responses = [(200, completion({"content": None, "tool_calls": [call]}), {})]
    with pytest.raises(ModelError, match="arguments are not JSON: \\{oops"):
        client(endpoint.url).complete([Message("user", "hi")], [], Params())


def test_an_unreachable_endpoint_is_a_model_error() -> None:
    sleeps: list[float] = []
    with pytest.raises(ModelError, match="unreachable"):
        # Port 9 on loopback: nothing listens, the connection is refused at once.
        client("http://127.0.0.1:9/v1", sleeps).complete([Message("user", "hi")], [], Params())
    assert sleeps == [0.25, 0.5]
