"""Anthropic's Messages API through the ``anthropic`` SDK, streamed.

The conversation is translated to the API's shape: system messages become ``system``;
an assistant turn becomes its thinking blocks (signed, given back verbatim as the API
requires), its text and its ``tool_use`` blocks; tool results become ``tool_result``
blocks of the next user turn (consecutive turns of one role are merged).

``reasoningAPI`` (Worker ``spec.reasoningAPI`` or AgentConfig ``spec.model.reasoningAPI``):

- ``enabled``: extended thinking with ``budget_tokens``, a share of the reply's
  ``max_tokens`` by reasoning effort (low 1/4, medium, the default, 1/2, high 4/5), at
  least 1024 (the API's minimum) and below ``max_tokens``; a ``max_tokens`` too small
  for that fails the call saying so.
- ``adaptive``: ``{"type": "adaptive"}``: the model decides when and how much to
  think; a reasoning effort goes out as ``output_config.effort``.

Without it, no ``thinking`` is sent (the model's default) and a reasoning effort goes
out as ``output_config.effort``; effort ``off`` sends no thinking at all. While thinking
is on, ``temperature`` is not sent (the API accepts only its default then); otherwise it
goes in the body as the API documents it (the SDK's ``create`` no longer names it).
``max_tokens`` is required by the API: ``DEFAULT_MAX_TOKENS`` when the config sets none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import anthropic
from anthropic.types import RawMessageStreamEvent

from agentworkers.runtime.models import (
    Finish,
    Message,
    ModelError,
    Params,
    Reply,
    ToolSpec,
    estimate_tokens,
    message_text,
    parse_arguments,
)
from agentworkers.runtime.providers.streaming import SdkErrors, SdkModel, StreamCut

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
MIN_THINKING_BUDGET = 1024
THINKING_SHARE = {"low": 0.25, "medium": 0.5, "high": 0.8}
ERRORS = SdkErrors(
    anthropic.APIStatusError,
    anthropic.APITimeoutError,
    anthropic.APIConnectionError,
    anthropic.APIError,
)
STOPS: dict[str, Finish] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refused",
}


class AnthropicMessages(SdkModel):
    """One run's client of the Messages API (``base_url`` without ``/v1``)."""

    DEFAULT_URL, PATH, ERRORS = ANTHROPIC_BASE_URL, "/v1/messages", ERRORS
    SDK, HTTPX = anthropic.Anthropic, anthropic.DefaultHttpxClient

    @property
    def _client(self) -> anthropic.Anthropic:
        return cast(anthropic.Anthropic, self._sdk)

    def request(
        self, messages: list[Message], tools: list[ToolSpec], params: Params
    ) -> dict[str, Any]:
        """The request's parameters, as the SDK sends them (``stream`` included)."""
        max_tokens = params.max_tokens or DEFAULT_MAX_TOKENS
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": conversation(messages),
            "stream": True,
        }
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        effort = params.reasoning_effort
        thinking = _thinking(params.reasoning_api, effort, max_tokens)
        if thinking is not None:
            body["thinking"] = thinking
        elif params.temperature is not None:
            # The SDK's create() names no temperature; the API still reads it.
            body["extra_body"] = {"temperature": params.temperature}
        if effort in THINKING_SHARE and params.reasoning_api != "enabled":
            body["output_config"] = {"effort": effort}
        return body

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        if not self._api_key:
            raise ModelError(
                "provider anthropic needs an API key: set the AgentConfig's (or the "
                "ModelProvider's) apiKeySecret, a Secret with key apiKey"
            )
        body = self.request(messages, tools, params)
        return self._call(
            # cast: create's overloads want a literal `stream`.
            lambda retries: cast(
                Any, self._client.with_options(max_retries=retries)
            ).messages.create(**body),
            lambda stream: _collect(stream, messages),
        )


def _thinking(api: str | None, effort: str | None, max_tokens: int) -> dict[str, Any] | None:
    if api is None or effort == "off":
        return None
    if api == "adaptive":
        return {"type": "adaptive"}
    budget = max(MIN_THINKING_BUDGET, int(max_tokens * THINKING_SHARE[effort or "medium"]))
    if budget >= max_tokens:
        raise ModelError(
            f"reasoningAPI enabled: the thinking budget ({budget} tokens, at least "
            f"{MIN_THINKING_BUDGET}) must be below maxTokens ({max_tokens}); raise "
            "spec.model.maxTokens"
        )
    return {"type": "enabled", "budget_tokens": budget}


def conversation(messages: list[Message]) -> list[dict[str, Any]]:
    """The Messages API's ``messages`` for ours (see the module docstring)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            role = "user"
            blocks: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content or ""}
            ]
        elif m.role == "assistant":
            role = "assistant"
            blocks = [dict(b) for b in m.thinking]
            blocks += [{"type": "text", "text": m.content}] if m.content else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            ]
        else:
            role, blocks = "user", [{"type": "text", "text": m.content or ""}]
        if not blocks:
            continue  # an empty answer: the API takes no empty turn
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return turns


def _collect(events: Iterable[RawMessageStreamEvent], messages: list[Message]) -> Reply:
    """A streamed message, assembled from its events (message_start, content_block_start,
    _delta, _stop, message_delta, message_stop). A stream without message_stop was cut."""
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, str] = {}
    usage: dict[str, int | None] = {"input": None, "output": None}
    stop: str | None = None
    stopped = False
    for event in events:
        if event.type == "message_start":
            start = getattr(event.message, "usage", None)
            usage["input"] = getattr(start, "input_tokens", None)
            usage["output"] = getattr(start, "output_tokens", None)
        elif event.type == "content_block_start":
            blocks[event.index] = event.content_block.to_dict()
        elif event.type == "content_block_delta":
            block, delta = blocks.get(event.index), event.delta
            if block is None:
                continue
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
            elif delta.type == "input_json_delta":
                inputs[event.index] = inputs.get(event.index, "") + delta.partial_json
        elif event.type == "message_delta":
            stop = event.delta.stop_reason or stop
            delta_usage = getattr(event, "usage", None)
            for key, name in (("input", "input_tokens"), ("output", "output_tokens")):
                value = getattr(delta_usage, name, None)
                usage[key] = value if value is not None else usage[key]
        elif event.type == "message_stop":
            stopped = True
    if not stopped or stop is None:
        raise StreamCut("the event stream ended before message_stop")
    ordered = [blocks[i] for i in sorted(blocks)]
    text = "".join(b["text"] for b in ordered if b["type"] == "text") or None
    thinking = tuple(b for b in ordered if b["type"] in ("thinking", "redacted_thinking"))
    reasoning = "".join(b.get("thinking", "") for b in thinking) or None
    calls = tuple(
        # A block's input comes as JSON deltas; a block that had none carries it whole.
        parse_arguments(b["id"], b["name"], inputs.get(i, b.get("input") or ""))
        for i, b in sorted(blocks.items())
        if b["type"] == "tool_use"
    )
    if stop not in STOPS:
        raise ModelError(f"the model stopped for a reason this runtime does not handle: {stop}")
    finish = STOPS[stop]
    estimated = usage["input"] is None or usage["output"] is None
    prompt = usage["input"]
    if prompt is None:
        prompt = estimate_tokens(*(message_text(m) for m in messages))
    completion = usage["output"]
    if completion is None:
        completion = estimate_tokens(
            text, reasoning, *(c.name + (c.raw_arguments or "") for c in calls)
        )
    return Reply(
        content=text,
        tool_calls=calls,
        reasoning=reasoning,
        prompt_tokens=prompt,
        completion_tokens=completion,
        finish=finish,
        stop_detail=stop,
        usage_estimated=estimated,
        thinking=thinking,
    )
