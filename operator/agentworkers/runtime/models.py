"""Model clients: what the agent loop asks for its next step.

``OpenAIChatClient`` speaks any OpenAI-compatible chat-completions endpoint (OpenAI,
vLLM, Ollama, LiteLLM...). ``ScriptedModel`` replies from a script, for tests and
demos, without a network.

Script format (provider ``scripted``): a JSON list of steps, each an object with
exactly one of these forms, and no other keys:

- ``{"reply": "text"}``: a final answer (no tool calls).
- ``{"tool": "name", "args": {...}}``: one tool call (``args`` defaults to ``{}``).
- ``{"thought": "text"}``: reasoning, attached to the next reply or tool step.
- ``{"match": "regex", "reply": "text"}``: a keyed reply, for queries.

Each model call first looks at the latest message: when it is the user's, the first
``match`` step whose regex it contains (``re.search``) answers, and stays for later
calls. Otherwise the call takes the next ordered steps (thoughts, then one reply or
tool step); the ordered steps are used once each, and an exhausted script is a
ModelError. For example, ``[{"thought": "look first"}, {"tool": "list_files"},
{"reply": "done"}, {"match": "status", "reply": "all good"}]``.

A scripted call's usage is plausible and testable: its prompt tokens are the
whitespace-separated words of the input messages' text, its completion tokens those of the
reply (a tool call counts its name and JSON arguments).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, model_validator

from agentworkers.core.effective import EffectiveConfig

Role = Literal["system", "user", "assistant", "tool"]
OPENAI_BASE_URL = "https://api.openai.com/v1"
BODY_EXCERPT = 500
MAX_RETRY_AFTER = 30.0


class ModelError(Exception):
    """The model could not answer: an HTTP error (``status``), a malformed reply, or a
    script at its end."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Message:
    """One conversation entry: ``tool_calls`` on assistant messages, ``tool_call_id``
    on tool results."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            wire["tool_call_id"] = self.tool_call_id
        return wire


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to the model: ``parameters`` is a JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class Params:
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None  # "off" or None: not sent

    @classmethod
    def from_config(cls, config: EffectiveConfig) -> Params:
        return cls(config.temperature, config.max_tokens, config.reasoning_effort)


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    # The model's usage for this call, as the provider reported it.
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def usage_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ModelClient(Protocol):
    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        """The model's next step. Raises ModelError."""
        ...


class OpenAIChatClient:
    """POSTs to ``{base_url}/chat/completions``; retries 429, 5xx, connection failures,
    timeouts (no answer, or a body still coming, ``timeout`` after the attempt began) and
    replies cut short, up to ``retries`` times, with exponential backoff (or the server's
    Retry-After, capped at ``max_retry_after``). The error after the last attempt says
    which: ``returned HTTP 503``, ``did not answer within 120 s``, ``cut its reply
    short``, ``unreachable``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._api_key = api_key
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._sleep = sleep
        self._max_retry_after = max_retry_after

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in messages],
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
            body["max_tokens"] = params.max_tokens
        if params.reasoning_effort and params.reasoning_effort != "off":
            body["reasoning_effort"] = params.reasoning_effort
        return _parse_reply(self._post(json.dumps(body).encode()))

    def _post(self, data: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        for attempt in range(self._retries + 1):
            last = attempt == self._retries
            tried = f" (after {attempt + 1} attempts)" if attempt else ""
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                raw = self._exchange(request)
            except urllib.error.HTTPError as e:
                text = ""
                with contextlib.suppress(OSError, http.client.HTTPException):
                    text = e.read().decode("utf-8", "replace")  # a cut body: what came
                if not (e.code == 429 or e.code >= 500) or last:
                    raise ModelError(
                        f"model endpoint {self.url} returned HTTP {e.code}{tried}: "
                        f"{text[:BODY_EXCERPT]}",
                        status=e.code,
                        body=text,
                    ) from e
                self._sleep(self._delay(attempt, e.headers.get("Retry-After")))
                continue
            except (_Cut, OSError) as e:  # URLError, a timeout, a reset...
                if last:
                    raise ModelError(
                        f"model endpoint {self.url} {_failure(e, self._timeout)}{tried}"
                    ) from e
                self._sleep(self._delay(attempt, None))
                continue
            try:
                decoded: Any = json.loads(raw)
            except ValueError as e:
                raise ModelError(
                    f"model endpoint {self.url} returned non-JSON: "
                    f"{raw[:BODY_EXCERPT].decode('utf-8', 'replace')}"
                ) from e
            if not isinstance(decoded, dict):
                raise ModelError(f"model endpoint {self.url} returned {type(decoded).__name__}")
            return decoded
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _exchange(self, request: urllib.request.Request) -> bytes:
        """One attempt's whole reply body. The socket's timeout bounds each read, not a
        body that trickles in: the attempt gives up at the first read past ``timeout``
        from its start (so it takes at most about twice ``timeout``). Raises TimeoutError,
        _Cut (the connection closed before the body's end), HTTPError, OSError."""
        deadline = time.monotonic() + self._timeout
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                chunks: list[bytes] = []
                while chunk := response.read1(65536):
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise TimeoutError("timed out")
                if response.length:  # fewer bytes than its Content-Length said
                    got = sum(map(len, chunks))
                    raise _Cut(f"{got} of {got + response.length} bytes")
                return b"".join(chunks)
        except ConnectionError:  # RemoteDisconnected too: closed before any reply
            raise
        except http.client.IncompleteRead as e:  # a chunked body cut short
            raise _Cut(f"{len(e.partial)} bytes, then the connection closed") from e
        except http.client.HTTPException as e:  # a status line or headers cut short
            raise _Cut(f"{type(e).__name__}: {e}") from e

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), self._max_retry_after)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        return float(self._backoff * 2**attempt)


class _Cut(Exception):
    """A reply cut short: the connection closed before its body's end."""


def _failure(e: Exception, timeout: float) -> str:
    """What went wrong with an attempt that got no HTTP status, for the run's error."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, TimeoutError):
        return f"did not answer within {timeout:g} s"
    if isinstance(e, _Cut):
        return f"cut its reply short ({e})"
    return f"unreachable: {reason}"


def _parse_reply(body: dict[str, Any]) -> Reply:
    try:
        message = body["choices"][0]["message"]
        calls = tuple(
            ToolCall(c["id"], c["function"]["name"], _arguments(c["function"].get("arguments")))
            for c in message.get("tool_calls") or ()
        )
        usage = body.get("usage") or {}
        return Reply(
            content=message.get("content"),
            tool_calls=calls,
            # vLLM and DeepSeek say reasoning_content; others say reasoning.
            reasoning=message.get("reasoning_content") or message.get("reasoning"),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            # A provider that reports only a total: counted as completion.
            completion_tokens=int(
                usage.get("completion_tokens")
                or (0 if "prompt_tokens" in usage else usage.get("total_tokens") or 0)
            ),
        )
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ModelError(
            f"malformed chat completion ({e!r}): {json.dumps(body)[:BODY_EXCERPT]}"
        ) from e


def _arguments(raw: Any) -> dict[str, Any]:
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as e:
        raise ModelError(f"tool call arguments are not JSON: {str(raw)[:BODY_EXCERPT]}") from e
    if not isinstance(value, dict):
        raise ModelError(f"tool call arguments are not a JSON object: {str(raw)[:BODY_EXCERPT]}")
    return value


class ScriptStep(BaseModel):
    """One step of a script; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reply: StrictStr | None = None
    tool: StrictStr | None = Field(default=None, min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    thought: StrictStr | None = None
    match: StrictStr | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        forms = [k for k in ("reply", "tool", "thought") if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError("a step has exactly one of reply, tool or thought")
        if self.args and self.tool is None:
            raise ValueError("args goes with tool")
        if self.match is not None:
            if self.reply is None:
                raise ValueError("match goes with reply")
            try:
                re.compile(self.match)
            except re.error as e:
                raise ValueError(f"match is not a valid regex: {e}") from e
        return self


_SCRIPT = TypeAdapter(list[ScriptStep])


def parse_script(script: str | bytes | Sequence[Any]) -> list[ScriptStep]:
    """A script from its JSON text or its decoded list. Raises pydantic.ValidationError."""
    if isinstance(script, str | bytes):
        return _SCRIPT.validate_json(script)
    return _SCRIPT.validate_python(list(script))


class ScriptedModel:
    """Deterministic replies from a script (see the module docstring)."""

    def __init__(self, script: str | bytes | Sequence[Any]) -> None:
        steps = parse_script(script)
        self._keyed = [(re.compile(s.match), s) for s in steps if s.match is not None]
        self._ordered = [s for s in steps if s.match is None]
        self._next = 0
        self._calls = 0
        self._lock = threading.Lock()

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        with self._lock:
            reply = self._keyed_reply(messages) or self._ordered_reply()
        prompt = sum(_words(m.content) for m in messages)
        completion = _words(reply.content) + sum(
            _words(c.name) + _words(json.dumps(c.arguments)) for c in reply.tool_calls
        )
        return Reply(reply.content, reply.tool_calls, reply.reasoning, prompt, completion)

    def _keyed_reply(self, messages: list[Message]) -> Reply | None:
        if not messages or messages[-1].role != "user":
            return None
        for pattern, step in self._keyed:
            if pattern.search(messages[-1].content or ""):
                return Reply(step.reply)
        return None

    def _ordered_reply(self) -> Reply:
        thoughts: list[str] = []
        while self._next < len(self._ordered):
            step = self._ordered[self._next]
            self._next += 1
            if step.thought is not None:
                thoughts.append(step.thought)
                continue
            reasoning = "\n".join(thoughts) or None
            if step.tool is not None:
                self._calls += 1
                call = ToolCall(f"call_{self._calls}", step.tool, dict(step.args))
                return Reply(None, (call,), reasoning)
            return Reply(step.reply, (), reasoning)
        raise ModelError(f"scripted model: script exhausted after {len(self._ordered)} steps")


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def client_for(
    config: EffectiveConfig,
    api_key: str | None = None,
    script: str | bytes | Sequence[Any] | None = None,
    timeout: float = 120.0,
) -> ModelClient:
    """The client for the configuration's provider: ``openai`` (with the key read from
    the api-key secret) or ``scripted`` (with its script)."""
    if config.provider == "openai":
        return OpenAIChatClient(config.base_url or OPENAI_BASE_URL, api_key, config.model, timeout)
    if config.provider == "scripted":
        if script is None:
            raise ValueError("provider scripted needs a script")
        return ScriptedModel(script)
    raise ValueError(f"unknown provider {config.provider!r}: expected openai or scripted")
