"""The scripted driver: replies from a script, for tests and demos, without a network.

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

import json
import re
import threading
from collections.abc import Sequence
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter, model_validator

from agentworkers.runtime.models import Message, ModelError, Params, Reply, ToolCall, ToolSpec


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
        return Reply(
            reply.content, reply.tool_calls, reply.reasoning, prompt, completion, reply.finish
        )

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
                return Reply(None, (call,), reasoning, finish="tool_calls")
            return Reply(step.reply, (), reasoning)
        raise ModelError(f"scripted model: script exhausted after {len(self._ordered)} steps")


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0
