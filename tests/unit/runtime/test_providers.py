"""The OpenAI and Anthropic drivers, through the vendors' real SDKs, against loopback
servers that speak their wire protocols (tests/model_servers.py), and the agent loop
over them: streaming, tool calls, finish and stop reasons, usage, thinking, faults."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentworkers.core.effective import EffectiveConfig, ModelEndpoint
from agentworkers.runtime.events import EventBus, EventKind
from agentworkers.runtime.loop import FAILED, AgentLoop, ModelRefused, ReplyCut
from agentworkers.runtime.models import Message, ModelClient, ModelError, Params, ToolCall
from agentworkers.runtime.providers import client_for, prepare
from agentworkers.runtime.providers.anthropic_messages import AnthropicMessages, conversation
from agentworkers.runtime.providers.openai_chat import OpenAIChat, limit_field
from agentworkers.runtime.tools import Sandbox, Toolbox
from tests.model_servers import SIGNATURE, Call, ModelServer, Turn

PROVIDERS = ("openai", "anthropic")


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


def driver(provider: str, server: ModelServer, timeout: float = 5, retries: int = 2) -> Any:
    if provider == "openai":
        return OpenAIChat(server.openai_url, "sk-test", "m", timeout, retries, backoff=0.01)
    return AnthropicMessages(server.anthropic_url, "sk-ant", "m", timeout, retries, backoff=0.01)


def loop_for(
    provider: str, model: ModelClient, sandbox: Path, **config: Any
) -> tuple[AgentLoop, EventBus, list[tuple[str, str | None, str | None]]]:
    cfg = EffectiveConfig(agent="a", provider=provider, model="m", tools=("read_file",), **config)  # type: ignore[arg-type]
    bus = EventBus("w")
    statuses: list[tuple[str, str | None, str | None]] = []
    box = Toolbox.for_config(cfg, Sandbox(str(sandbox)).tools())
    return AgentLoop(cfg, model, box, bus, lambda *s: statuses.append(s)), bus, statuses


def ask(model: ModelClient, text: str = "hi") -> Any:
    return model.complete([Message("user", text)], [], Params())


READ = Call("read_file", '{"path": "notes.txt"}', id="call_abc")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_tool_call_round_trip_streamed_through_the_loop(
    provider: str, server: ModelServer, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello from the sandbox")
    server.turns = [
        Turn(calls=(READ,), thinking="look at the notes", usage=(20, 5)),
        Turn(text="It says hello.", usage=(40, 4)),
    ]
    loop, bus, _ = loop_for(
        provider,
        driver(provider, server),
        tmp_path,
        instructions="Be brief.",
        temperature=0.2,
        max_tokens=100,
    )

    assert loop.run_turn("What do the notes say?") == "It says hello."
    assert (loop.tokens, loop.estimated_tokens) == (69, 0)

    first, second = server.bodies()
    assert first["stream"] is True and first["model"] == "m"
    kinds = [e.kind for e in bus.recent()]
    assert EventKind.THOUGHT in kinds
    result = next(e.payload for e in bus.recent() if e.kind == EventKind.TOOL_RESULT)
    assert result["result"]["content"] == "hello from the sandbox"
    if provider == "openai":
        assert server.seen[0].path == "/v1/chat/completions"
        assert server.seen[0].headers["authorization"] == "Bearer sk-test"
        assert first["stream_options"] == {"include_usage": True}
        assert (first["temperature"], first["max_tokens"], first["tool_choice"]) == (
            0.2,
            100,
            "auto",
        )
        assert first["tools"][0]["function"]["parameters"]["required"] == ["path"]
        assert first["messages"][0] == {"role": "system", "content": "Be brief."}
        assistant, tool = second["messages"][2:]
        assert assistant["tool_calls"][0]["id"] == "call_abc"
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {
            "path": "notes.txt"
        }
        assert (tool["role"], tool["tool_call_id"]) == ("tool", "call_abc")
    else:
        assert server.seen[0].path == "/v1/messages"
        assert "sk-ant" in (server.seen[0].headers.get("x-api-key") or "") + (
            server.seen[0].headers.get("authorization") or ""
        )
        assert (first["system"], first["max_tokens"], first["temperature"]) == (
            "Be brief.",
            100,
            0.2,
        )
        assert first["tools"][0]["name"] == "read_file"
        assert first["tools"][0]["input_schema"]["required"] == ["path"]
        assert first["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "What do the notes say?"}]}
        ]
        assistant, results = second["messages"][1:]
        # The signed thinking block goes back first, verbatim, then the tool_use.
        assert assistant["role"] == "assistant"
        thinking, use = assistant["content"]
        assert (thinking["type"], thinking["thinking"], thinking["signature"]) == (
            "thinking",
            "look at the notes",
            SIGNATURE,
        )
        assert use == {
            "type": "tool_use",
            "id": "call_abc",
            "name": "read_file",
            "input": {"path": "notes.txt"},
        }
        (block,) = results["content"]
        assert (results["role"], block["type"], block["tool_use_id"]) == (
            "user",
            "tool_result",
            "call_abc",
        )
        assert "hello from the sandbox" in block["content"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("arguments", ["{oops", "[1, 2]"])
def test_a_malformed_tool_call_goes_back_to_the_model_and_the_run_goes_on(
    provider: str, arguments: str, server: ModelServer, tmp_path: Path
) -> None:
    server.turns = [
        Turn(calls=(Call("read_file", arguments, id="call_bad"),)),
        Turn(text="sorry, fixed"),
    ]
    loop, bus, _ = loop_for(provider, driver(provider, server), tmp_path)
    assert loop.run_turn("go") == "sorry, fixed"
    result = next(e.payload for e in bus.recent() if e.kind == EventKind.TOOL_RESULT)
    assert "read_file was not run: the arguments are not" in result["error"]
    call = next(e.payload for e in bus.recent() if e.kind == EventKind.TOOL_CALL)
    assert call["args"] == arguments
    wire = json.dumps(server.bodies()[1]["messages"])
    assert "was not run" in wire


@pytest.mark.parametrize(
    ("provider", "finish"), [("openai", "length"), ("anthropic", "max_tokens")]
)
def test_a_reply_cut_at_the_token_limit_fails_the_run_and_is_not_the_answer(
    provider: str, finish: str, server: ModelServer, tmp_path: Path
) -> None:
    server.turns = [Turn(text="The answer is", finish=finish, usage=(10, 50))]
    loop, _, statuses = loop_for(provider, driver(provider, server), tmp_path, max_tokens=50)
    with pytest.raises(ReplyCut, match=f"cut at its token limit of 50 \\({finish}\\)"):
        loop.run_turn("go")
    assert statuses[-1][0] == FAILED and loop.output() == ""
    assert loop.tokens == 60  # what it spent still counts


@pytest.mark.parametrize(
    ("provider", "turn", "said"),
    [
        ("openai", Turn(text="", finish="content_filter"), "content_filter"),
        ("openai", Turn(refusal="I can't help with that."), "I can't help with that."),
        ("anthropic", Turn(text="No.", finish="refusal"), "refusal"),
    ],
)
def test_a_refusal_fails_the_run_saying_so(
    provider: str, turn: Turn, said: str, server: ModelServer, tmp_path: Path
) -> None:
    server.turns = [turn]
    loop, _, _ = loop_for(provider, driver(provider, server), tmp_path)
    with pytest.raises(ModelRefused, match=f"refused to answer \\({said}\\)"):
        loop.run_turn("go")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_missing_usage_is_estimated_and_said(
    provider: str, server: ModelServer, tmp_path: Path
) -> None:
    server.turns = [Turn(text="x" * 400, usage=None)]
    loop, _, _ = loop_for(provider, driver(provider, server), tmp_path, token_budget=50)
    with pytest.raises(Exception, match="token_budget \\(50\\) exceeded"):
        loop.run_turn("y" * 40)
    # 400 characters of answer: about 100 tokens, not 0; the prompt's too.
    assert loop.tokens >= 110 and loop.estimated_tokens == loop.tokens


def test_usage_reported_in_a_stream_is_used_as_is(server: ModelServer) -> None:
    server.turns = [Turn(text="fine", usage=(3, 2))] * 2
    for provider in PROVIDERS:
        reply = ask(driver(provider, server))
        assert (reply.prompt_tokens, reply.completion_tokens, reply.usage_estimated) == (
            3,
            2,
            False,
        )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_500_then_a_429_are_retried_by_the_sdk(provider: str, server: ModelServer) -> None:
    server.turns = [
        Turn(status=500),
        Turn(status=429, headers={"Retry-After": "0.1"}),
        Turn(text="fine"),
    ]
    assert ask(driver(provider, server)).content == "fine"
    assert len(server.seen) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retries_are_bounded_and_the_error_names_status_and_attempts(
    provider: str, server: ModelServer
) -> None:
    server.turns = [Turn(status=503, error="down for maintenance")] * 5
    with pytest.raises(ModelError, match=r"HTTP 503 \(after 2 attempts\): .*down for maint"):
        ask(driver(provider, server, retries=1))
    assert len(server.seen) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_401_fails_at_once_with_status_and_body(provider: str, server: ModelServer) -> None:
    server.turns = [Turn(status=401, error="Incorrect API key provided")]
    with pytest.raises(ModelError, match=r"returned HTTP 401: .*Incorrect API key") as failure:
        ask(driver(provider, server))
    assert failure.value.status == 401 and len(server.seen) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_long_retry_after_is_cut_to_the_cap(provider: str, server: ModelServer) -> None:
    """An hour's Retry-After: waited for only ``max_retry_after`` (the anthropic SDK would
    sleep the hour, the openai SDK give up at once)."""
    server.turns = [Turn(status=429, headers={"Retry-After": "3600"}), Turn(text="later")]
    cls = OpenAIChat if provider == "openai" else AnthropicMessages
    url = server.openai_url if provider == "openai" else server.anthropic_url
    model = cls(url, "k", "m", 5, 2, max_retry_after=0.3)
    started = time.monotonic()
    assert ask(model).content == "later"
    assert 0.3 <= time.monotonic() - started < 3
    assert len(server.seen) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_cut_mid_reply_is_retried(provider: str, server: ModelServer) -> None:
    server.turns = [Turn(text="a long answer " * 4, cut_after=3), Turn(text="whole")]
    assert ask(driver(provider, server)).content == "whole"
    assert len(server.seen) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("clean", "said"),
    [
        (False, r"connection lost: RemoteProtocolError: .*incomplete chunked read"),
        (True, r"the (stream|event stream) ended before (the reply's finish_reason|message_stop)"),
    ],
)
def test_a_stream_cut_every_time_fails_naming_it(
    provider: str, clean: bool, said: str, server: ModelServer
) -> None:
    server.turns = [Turn(text="a long answer " * 4, cut_after=3, clean_cut=clean)] * 3
    with pytest.raises(ModelError, match=rf"cut its reply short \({said}.*\(after 3 attempts\)"):
        ask(driver(provider, server))
    assert len(server.seen) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_silence_mid_stream_is_a_timeout_retried(provider: str, server: ModelServer) -> None:
    server.turns = [Turn(text="thinking hard " * 4, cut_after=3, stall=3), Turn(text="fine")]
    assert ask(driver(provider, server, timeout=0.3)).content == "fine"
    server.turns = [Turn(text="thinking hard " * 4, cut_after=3, stall=3)] * 2
    with pytest.raises(ModelError, match=r"nothing for 0.3 s mid-reply\) \(after 2 attempts"):
        ask(driver(provider, server, timeout=0.3, retries=1))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_slow_stream_is_no_timeout(provider: str, server: ModelServer) -> None:
    """Each event within the timeout, the whole reply well past it: streaming's point."""
    server.turns = [Turn(text="word " * 8, gap=0.1)]
    assert ask(driver(provider, server, timeout=0.3)).content == "word " * 8
    assert len(server.seen) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_silent_endpoint_fails_saying_it_did_not_answer(
    provider: str, server: ModelServer
) -> None:
    server.turns = [Turn(hang=2)] * 2
    with pytest.raises(ModelError, match=r"did not answer within 0.3 s \(after 2 attempts\)"):
        ask(driver(provider, server, timeout=0.3, retries=1))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unreachable_endpoint_is_a_model_error(provider: str) -> None:
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    model = (
        OpenAIChat("http://127.0.0.1:9/v1", "k", "m", 1, 1)
        if provider == "openai"
        else AnthropicMessages("http://127.0.0.1:9", "k", "m", 1, 1)
    )
    with pytest.raises(ModelError, match=r"unreachable: .*\(after 2 attempts\)"):
        ask(model)


def test_one_client_per_run_reuses_its_connection(server: ModelServer) -> None:
    """Three streamed calls of one anthropic run, one TCP connection (the SDK's pool).
    The openai SDK closes a stream's response at ``[DONE]``, before the body's end, so
    its connection is not reused after a streamed call (see docs/agents.md)."""
    server.turns = [Turn(text=str(i)) for i in range(3)]
    model = driver("anthropic", server)
    assert [ask(model).content for _ in range(3)] == ["0", "1", "2"]
    assert len({seen.port for seen in server.seen}) == 1


def test_the_token_limit_field_fits_the_endpoint(server: ModelServer) -> None:
    assert limit_field("https://api.openai.com/v1") == "max_completion_tokens"
    assert limit_field("https://me.openai.azure.com/openai/v1") == "max_completion_tokens"
    assert limit_field("http://vllm.models:8000/v1") == "max_tokens"
    assert limit_field("http://ollama:11434/v1") == "max_tokens"
    server.turns = [Turn(text="hi")]
    OpenAIChat(server.openai_url, None, "m").complete(
        [Message("user", "hi")], [], Params(max_tokens=9, reasoning_effort="off")
    )
    body = server.bodies()[0]
    assert body["max_tokens"] == 9 and "reasoning_effort" not in body
    assert "authorization" not in server.seen[0].headers  # a keyless server gets no key


@pytest.mark.parametrize(
    ("api", "effort", "max_tokens", "thinking", "output_config"),
    [
        ("enabled", None, 8000, {"type": "enabled", "budget_tokens": 4000}, None),
        ("enabled", "low", 8000, {"type": "enabled", "budget_tokens": 2000}, None),
        ("enabled", "high", 8000, {"type": "enabled", "budget_tokens": 6400}, None),
        ("enabled", "low", 2000, {"type": "enabled", "budget_tokens": 1024}, None),
        ("adaptive", "high", 8000, {"type": "adaptive"}, {"effort": "high"}),
        ("adaptive", None, 8000, {"type": "adaptive"}, None),
        (None, "medium", 8000, None, {"effort": "medium"}),
        ("enabled", "off", 8000, None, None),
    ],
)
def test_anthropic_thinking_follows_reasoning_api_and_effort(
    api: str | None,
    effort: str | None,
    max_tokens: int,
    thinking: dict[str, Any] | None,
    output_config: dict[str, Any] | None,
    server: ModelServer,
) -> None:
    server.turns = [Turn(text="ok", thinking="hmm")]
    model = AnthropicMessages(server.anthropic_url, "k", "m")
    params = Params(
        temperature=0.5, max_tokens=max_tokens, reasoning_effort=effort, reasoning_api=api
    )
    reply = model.complete([Message("user", "hi")], [], params)
    body = server.bodies()[0]
    assert body.get("thinking") == thinking
    assert body.get("output_config") == output_config
    # The API takes only its default temperature while thinking.
    assert ("temperature" in body) == (thinking is None)
    assert reply.reasoning == "hmm" and reply.thinking[0]["signature"] == SIGNATURE


def test_anthropic_thinking_needs_room_below_max_tokens() -> None:
    model = AnthropicMessages("http://127.0.0.1:9", "k", "m")
    with pytest.raises(ModelError, match=r"thinking budget \(1024 .*below maxTokens \(1000\)"):
        model.complete(
            [Message("user", "hi")], [], Params(max_tokens=1000, reasoning_api="enabled")
        )


def test_anthropic_needs_a_key() -> None:
    with pytest.raises(ModelError, match="provider anthropic needs an API key"):
        ask(AnthropicMessages("http://127.0.0.1:9", None, "m"))


def test_the_anthropic_conversation_merges_turns_and_keeps_thinking() -> None:
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    messages = [
        Message("system", "rules"),
        Message("user", "go"),
        Message(
            "assistant",
            "on it",
            (ToolCall("c1", "a", {"x": 1}), ToolCall("c2", "b", {})),
            thinking=(thinking,),
        ),
        Message("tool", '{"result": 1}', tool_call_id="c1"),
        Message("tool", '{"result": 2}', tool_call_id="c2"),
        Message("assistant", ""),
        Message("user", "and now?"),
    ]
    turns = conversation(messages)
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["type"] for b in turns[1]["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result", "text"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_json_protocol_of_the_fake_server_is_the_vendors(
    provider: str, server: ModelServer
) -> None:
    """The fake's non-streaming answers parse with the SDKs' own types."""
    server.turns = [Turn(text="plain", calls=(READ,))]
    if provider == "openai":
        model = OpenAIChat(server.openai_url, "k", "m")
        completion = model._client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert completion.choices[0].message.tool_calls[0].function.name == "read_file"  # type: ignore[union-attr]
        assert completion.usage is not None and completion.usage.total_tokens == 18
    else:
        anthropic_model = AnthropicMessages(server.anthropic_url, "k", "m")
        message = anthropic_model._client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        assert [b.type for b in message.content] == ["text", "tool_use"]
        assert message.stop_reason == "tool_use" and message.usage.output_tokens == 7


def test_client_for_picks_the_driver(server: ModelServer) -> None:
    config = EffectiveConfig(agent="a", provider="openai", model="m", base_url="http://x/v1/")
    openai_model = client_for(config, api_key="k")
    assert isinstance(openai_model, OpenAIChat) and openai_model.base_url == "http://x/v1"
    anthropic_config = config.model_copy(update={"provider": "anthropic", "base_url": None})
    anthropic_model = client_for(anthropic_config, api_key="k")
    assert isinstance(anthropic_model, AnthropicMessages)
    assert anthropic_model.base_url == "https://api.anthropic.com"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_client_built_ahead_serves_a_run_of_its_endpoint_and_key_with_the_run_s_model(
    provider: str, server: ModelServer
) -> None:
    """A warm pod builds its model client before its claim; the run that claims it uses
    that client, with its own model, when its endpoint and key are the same."""
    url = server.openai_url if provider == "openai" else server.anthropic_url
    endpoint = ModelEndpoint(provider=provider, base_url=url)  # type: ignore[arg-type]
    prepared = prepare(endpoint, "k")
    assert prepared is not None
    run = EffectiveConfig(agent="a", provider=provider, model="the-run-s", base_url=url)  # type: ignore[arg-type]
    client = client_for(run, api_key="k", prepared=prepared)
    assert client is prepared.client
    server.turns = [Turn(text="hello")]
    assert ask(client).content == "hello"
    assert server.bodies()[0]["model"] == "the-run-s"
    # Another endpoint or key: a client of its own.
    assert client_for(run, api_key="other", prepared=prepared) is not prepared.client
    elsewhere = run.model_copy(update={"base_url": url + "/elsewhere"})
    assert client_for(elsewhere, api_key="k", prepared=prepared) is not prepared.client


def test_a_scripted_agent_has_no_client_to_build_ahead() -> None:
    assert prepare(ModelEndpoint(provider="scripted"), None) is None
