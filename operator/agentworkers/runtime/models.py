"""What the agent loop asks of a model, whichever provider answers.

The loop speaks only these types; each provider's driver (``runtime/providers/``)
translates them to its vendor's wire protocol and back.

A reply says how it ended (``finish``): ``stop`` (an answer), ``tool_calls``,
``length`` (cut at the token limit: never taken as an answer) or ``refused`` (a refusal
or a content filter). A tool call whose arguments are not a JSON object keeps the
model's raw text and an ``error``, which the loop sends back to the model as the call's
result. Usage a provider did not report is estimated (``usage_estimated``), never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agentworkers.core.effective import EffectiveConfig

Role = Literal["system", "user", "assistant", "tool"]
Finish = Literal["stop", "tool_calls", "length", "refused"]
BODY_EXCERPT = 500
CHARS_PER_TOKEN = 4  # the usual rough rule for English text and JSON


class ModelError(Exception):
    """The model could not answer: an HTTP error (``status``), a timeout, an endpoint
    out of reach, a reply cut short, a malformed reply, or a script at its end."""

    def __init__(self, message: str, status: int | None = None, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for. ``error``: its arguments were not a JSON object
    (``raw_arguments`` keeps what the model sent, to echo it back)."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Message:
    """One conversation entry: ``tool_calls`` and ``thinking`` on assistant messages,
    ``tool_call_id`` on tool results. ``thinking``: the provider's reasoning blocks,
    opaque, given back verbatim (Anthropic requires its signed thinking blocks back
    with the tool results that follow them)."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    thinking: tuple[dict[str, Any], ...] = ()


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
    reasoning_api: str | None = None  # Anthropic's thinking: "enabled" or "adaptive"

    @classmethod
    def from_config(cls, config: EffectiveConfig) -> Params:
        return cls(
            config.temperature, config.max_tokens, config.reasoning_effort, config.reasoning_api
        )


@dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    # The model's usage for this call, as the provider reported it (or estimated).
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish: Finish = "stop"
    stop_detail: str | None = None  # the vendor's own reason, and a refusal's text
    usage_estimated: bool = False
    thinking: tuple[dict[str, Any], ...] = ()

    @property
    def usage_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ModelClient(Protocol):
    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        """The model's next step. Raises ModelError."""
        ...


def parse_arguments(call_id: str, name: str, raw: Any) -> ToolCall:
    """A tool call from the model's arguments (JSON text or a decoded value): a JSON
    object, or the call with its ``error``."""
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if raw in (None, ""):
        return ToolCall(call_id, name, {}, text)
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        error = f"the arguments are not JSON: {text[:BODY_EXCERPT]}"
        return ToolCall(call_id, name, {}, text, error)
    if not isinstance(value, dict):
        error = f"the arguments are not a JSON object: {text[:BODY_EXCERPT]}"
        return ToolCall(call_id, name, {}, text, error)
    return ToolCall(call_id, name, value, text)


def estimate_tokens(*texts: str | None) -> int:
    """A rough count (characters / 4, at least 1 for any text) for a provider that
    reports no usage: the token budget stays near the truth instead of at 0."""
    return sum(-(-len(t) // CHARS_PER_TOKEN) for t in texts if t)


def message_text(message: Message) -> str:
    """Everything of a message a model reads, as text (for estimates)."""
    calls = "".join(
        c.name + (c.raw_arguments or json.dumps(c.arguments)) for c in message.tool_calls
    )
    return (message.content or "") + calls
