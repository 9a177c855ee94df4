"""OpenAI-compatible chat completions (OpenAI, Azure OpenAI, vLLM, Ollama, LiteLLM...)
through the ``openai`` SDK.

Each call streams (``stream=True``, usage asked for with ``stream_options.include_usage``),
so a long reply is many short reads, never one long wait: the timeout bounds silence,
not the length of a reply. One SDK client per run keeps its connections alive between
calls.

The reply's token limit goes out as ``max_completion_tokens`` to OpenAI's own API and
Azure OpenAI (their reasoning models refuse ``max_tokens``), and as ``max_tokens`` to any
other endpoint (vLLM, Ollama, LiteLLM and most servers read that one).
``reasoning_effort`` is sent unless it is ``off``; a server's reasoning text
(``reasoning_content`` or ``reasoning`` in the deltas) becomes the reply's reasoning.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletionChunk

from agentworkers.runtime.models import (
    Finish,
    Message,
    Params,
    Reply,
    ToolCall,
    ToolSpec,
    estimate_tokens,
    message_text,
    parse_arguments,
)
from agentworkers.runtime.providers.streaming import SdkErrors, SdkModel, StreamCut

OPENAI_BASE_URL = "https://api.openai.com/v1"
ERRORS = SdkErrors(
    openai.APIStatusError, openai.APITimeoutError, openai.APIConnectionError, openai.APIError
)


def limit_field(base_url: str) -> str:
    """The name the endpoint wants for a reply's token limit (see the module docstring)."""
    host = urlsplit(base_url).hostname or ""
    official = host == "api.openai.com" or host.endswith(".openai.azure.com")
    return "max_completion_tokens" if official else "max_tokens"


class OpenAIChat(SdkModel):
    """One run's client of an OpenAI-compatible endpoint; ``retries`` and ``timeout``
    go to the SDK (and to mid-stream retries, see ``streaming``)."""

    DEFAULT_URL, PATH, ERRORS = OPENAI_BASE_URL, "/chat/completions", ERRORS
    SDK, HTTPX = openai.OpenAI, openai.DefaultHttpxClient

    @staticmethod
    def _sdk_key(api_key: str | None) -> str:
        return api_key or "none"  # the SDK wants one; the header is left out (below)

    @property
    def _client(self) -> openai.OpenAI:
        return cast(openai.OpenAI, self._sdk)

    @property
    def _limit(self) -> str:
        return limit_field(self.base_url)

    @property
    def _headers(self) -> dict[str, Any]:
        # A keyless server (vLLM, Ollama) gets no Authorization header at all.
        return {} if self._api_key else {"Authorization": openai.Omit()}

    def request(
        self, messages: list[Message], tools: list[ToolSpec], params: Params
    ) -> dict[str, Any]:
        """The request body, as the endpoint receives it (streaming fields included)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
            body["tool_choice"] = "auto"
        if params.temperature is not None:
            body["temperature"] = params.temperature
        if params.max_tokens is not None:
            body[self._limit] = params.max_tokens
        if params.reasoning_effort and params.reasoning_effort != "off":
            body["reasoning_effort"] = params.reasoning_effort
        return body

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        body = self.request(messages, tools, params)
        return self._call(
            lambda retries: self._client.with_options(max_retries=retries).chat.completions.create(
                **body, extra_headers=self._headers
            ),
            lambda stream: _collect(stream, messages),
        )


def _wire(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    # As the model sent them, malformed or not: its own call, echoed.
                    "arguments": c.raw_arguments
                    if c.raw_arguments is not None
                    else json.dumps(c.arguments),
                },
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


def _collect(chunks: Iterable[ChatCompletionChunk], messages: list[Message]) -> Reply:
    """A streamed reply, assembled: choice 0's deltas, its finish_reason, the usage
    chunk. A stream without a finish_reason was cut."""
    content: list[str] = []
    reasoning: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    usage: Any = None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            content.append(delta.content or "")
            refusal.append(delta.refusal or "")
            # vLLM and DeepSeek say reasoning_content; others say reasoning.
            extra = delta.model_extra or {}
            thought = extra.get("reasoning_content") or extra.get("reasoning")
            reasoning.append(thought if isinstance(thought, str) else "")
            for part in delta.tool_calls or ():
                slot = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = slot["id"] or part.id or ""
                if part.function is not None:
                    slot["name"] = slot["name"] or part.function.name or ""
                    slot["arguments"] += part.function.arguments or ""
            finish = choice.finish_reason or finish
    if finish is None:
        raise StreamCut("the stream ended before the reply's finish_reason")
    tool_calls = tuple(
        parse_arguments(c["id"] or f"call_{i}", c["name"], c["arguments"])
        for i, c in sorted(calls.items())
    )
    text = "".join(content) or None
    refused = "".join(refusal)
    ending: Finish
    if finish == "length":
        ending = "length"
    elif finish == "content_filter" or refused:
        ending = "refused"
    else:
        ending = "tool_calls" if tool_calls else "stop"
    prompt = getattr(usage, "prompt_tokens", None) if usage is not None else None
    completion = getattr(usage, "completion_tokens", None) if usage is not None else None
    total = getattr(usage, "total_tokens", None) if usage is not None else None
    if completion is None and prompt is None and total is not None:
        completion, prompt = total, 0  # a provider that reports only a total
    estimated = prompt is None or completion is None
    if prompt is None:
        prompt = estimate_tokens(*(message_text(m) for m in messages))
    if completion is None:
        completion = estimate_tokens(text, "".join(reasoning), *map(_call_text, tool_calls))
    return Reply(
        content=text,
        tool_calls=tool_calls,
        reasoning="".join(reasoning) or None,
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        finish=ending,
        stop_detail=refused or finish,
        usage_estimated=estimated,
    )


def _call_text(call: ToolCall) -> str:
    return call.name + (call.raw_arguments or "")
