"""The agent loop: one run's conversation with its model (the seed's Driver).

A turn takes one user message and alternates model calls and tool calls until the model
answers without tool calls; that answer is the run's output. The conversation carries
over from turn to turn (queries continue the run), and so do the limits:

- ``max_steps`` counts every model call of the run, over all its turns; the call
  after the last allowed one fails the run with ``max_steps (N) exhausted``.
- ``token_budget`` (0: none) caps the tokens the provider reports, summed over the run;
  the run fails once the sum passes it. A reply without usage counts an estimate
  (``estimated_tokens`` says how much of the sum is estimated).
- ``output_schema`` (JSON Schema) must accept every final answer, parsed as JSON
  (one surrounding Markdown code fence is tolerated).

A reply cut at the model's token limit is never taken as an answer: the run fails with
ReplyCut, saying so (a cut tool call's arguments are incomplete, a cut answer is not the
answer). A refusal or a content filter fails it with ModelRefused. A tool call whose
arguments are not a JSON object is not run: the model reads the error as the call's
result, and the run goes on.

A failure is final: the status goes to ``failed`` and the loop takes no more messages.
Statuses go to ``on_status`` (running, idle, done, failed) and, with every step, onto
the event bus, whose subscribers cannot slow the loop down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]

from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.events import EventBus, EventKind
from agentworkers.runtime.models import Message, ModelClient, ModelError, Params, Reply, ToolSpec
from agentworkers.runtime.skills import SKILL_FILE, Skill
from agentworkers.runtime.tools import Toolbox
from agentworkers.runtime.tracing import RunSpans

log = logging.getLogger(__name__)

RUNNING, IDLE, DONE, FAILED = "running", "idle", "done", "failed"

StatusCallback = Callable[[str, str | None, str | None], None]
"""``(status, output, error)``: output with idle and done, error with failed."""


class RunError(Exception):
    """A limit of the run was hit; the run fails with this message."""


class StepLimitExceeded(RunError):
    pass


class TokenBudgetExceeded(RunError):
    pass


class OutputSchemaError(RunError):
    pass


class ReplyCut(RunError):
    pass


class ModelRefused(RunError):
    pass


class LoopClosed(RuntimeError):
    """The loop was closed, finished or failed: it takes no more messages."""


def system_prompt(config: EffectiveConfig, skills: Sequence[Skill] = ()) -> str:
    """The instructions, then each block under a header with its exact name, then the
    skills the run has, then the output schema the final answer must match."""
    parts = [config.instructions.strip()] if config.instructions.strip() else []
    parts += [f"## {block.name}\n\n{block.text.strip()}" for block in config.blocks]
    if skills:
        # How to use them, with the tools this run has.
        how = ["Skills are folders of instructions and scripts, read-only in your sandbox."]
        if "read_file" in config.tools:
            example = f"{skills[0].folder}/{SKILL_FILE}"
            how.append(f'Before you use one, read its {SKILL_FILE} (read_file "{example}").')
        if "run_command" in config.tools:
            how.append("Run its scripts with run_command, by their path from the sandbox.")
        listed = "\n".join(f"- {s.name} ({s.folder}/): {s.description}" for s in skills)
        parts.append(f"## skills\n\n{' '.join(how)}\n\n{listed}")
    if config.output_schema is not None:
        schema = json.dumps(config.output_schema, indent=2, sort_keys=True)
        parts.append(
            "## output_schema\n\nYour final answer must be only a JSON document that "
            f"matches this JSON Schema:\n\n{schema}"
        )
    return "\n\n".join(parts)


def check_output(text: str, schema: dict[str, Any]) -> None:
    """Raise OutputSchemaError, naming the failing JSON path, unless ``text`` is a JSON
    document the schema accepts."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and body.count("\n") >= 1:
        body = body[body.index("\n") + 1 : -3]
    try:
        document = json.loads(body)
    except ValueError as e:
        raise OutputSchemaError(f"output is not JSON (at $): {e}") from e
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        raise OutputSchemaError(
            f"output does not match the output schema at {error.json_path}: {error.message}"
        )


class AgentLoop:
    """Runs turns on a background thread (``send``) or the caller's (``run_turn``)."""

    def __init__(
        self,
        config: EffectiveConfig,
        model: ModelClient,
        toolbox: Toolbox,
        bus: EventBus,
        on_status: StatusCallback | None = None,
        skills: Sequence[Skill] = (),
    ) -> None:
        if config.output_schema is not None:
            schema = config.output_schema
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ValueError(f"output_schema is not a valid JSON Schema: {e.message}") from e
        self._config = config
        self._model = model
        self._toolbox = toolbox
        self._bus = bus
        self._on_status = on_status
        self._params = Params.from_config(config)
        prompt = system_prompt(config, skills)
        self._messages = [Message("system", prompt)] if prompt else []
        self._steps = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._estimated_tokens = 0
        self.on_usage: Callable[[int, int], None] | None = None  # (prompt, completion) so far
        self.spans = RunSpans()  # the run's spans (runtime.tracing); none by default
        self._turns = 0
        self._output = ""
        self._status = ""
        self._turn_lock = threading.Lock()  # one turn at a time, whoever calls
        self._cond = threading.Condition()  # guards inbox, busy, thread
        self._inbox: deque[str] = deque()
        self._busy = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def status(self) -> str:
        """The last status reported; empty before the first turn."""
        return self._status

    @property
    def steps(self) -> int:
        """Model calls so far, over the run."""
        return self._steps

    @property
    def tokens(self) -> int:
        """Tokens the model reported so far, over the run."""
        return self._prompt_tokens + self._completion_tokens

    @property
    def estimated_tokens(self) -> int:
        """How many of ``tokens`` are estimates, for replies the provider sent no usage with."""
        return self._estimated_tokens

    def output(self) -> str:
        """The final answer of the last turn that completed."""
        return self._output

    def send(self, message: str) -> None:
        """Queue a message for the background thread; returns once accepted. Messages
        run in order, one turn each."""
        with self._cond:
            self._check_open()
            self._inbox.append(message)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name=f"agent-loop-{self._bus.worker_id}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every sent message has had its turn; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._busy or self._inbox), timeout)

    def finish(self, timeout: float | None = None) -> None:
        """End the run normally: wait for idle, report ``done`` with the output, close.
        A failed run stays failed."""
        if not self.wait_idle(timeout):
            raise TimeoutError("the run is still busy")
        with self._turn_lock:
            if self._status != FAILED and not self._stop.is_set():
                self._report(DONE, output=self._output)
        self.close()

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking messages and stop the turn in progress at its next step, waiting
        up to ``timeout`` for it (a model call in flight ends first). An interrupted turn
        reports no status: whoever closes (a kill, a deadline) reports the final one."""
        with self._cond:
            self._stop.set()
            self._inbox.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def run_turn(self, message: str) -> str:
        """One turn, on the caller's thread: returns the final answer, or reports
        ``failed`` and raises (RunError, ModelError, ...)."""
        with self._turn_lock:
            self._check_open()
            self._report(RUNNING)
            self._turns += 1
            try:
                with self.spans.turn(self._turns - 1):
                    text = self._converse(message)
            except LoopClosed:
                raise
            except Exception as e:
                known = isinstance(e, RunError | ModelError)
                self._report(FAILED, error=str(e) if known else f"{type(e).__name__}: {e}")
                raise
            self._output = text
            self._report(IDLE, output=text)
            return text

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._inbox or self._stop.is_set())
                if self._stop.is_set():
                    return
                message = self._inbox.popleft()
                self._busy = True
            with contextlib.suppress(Exception):  # run_turn has reported it
                self.run_turn(message)
            with self._cond:
                self._busy = False
                if self._status == FAILED:
                    self._inbox.clear()
                self._cond.notify_all()
                if self._status == FAILED:
                    return

    def _converse(self, message: str) -> str:
        self._messages.append(Message("user", message))
        while True:  # ends with a final answer, or at max_steps
            # Asked each step: an MCP server may have changed its tools meanwhile.
            reply = self._step(self._toolbox.specs())
            if reply.reasoning:
                self._bus.publish(EventKind.THOUGHT, {"text": reply.reasoning})
            self._messages.append(
                Message("assistant", reply.content, reply.tool_calls, thinking=reply.thinking)
            )
            if reply.content or not reply.tool_calls:
                self._bus.publish(EventKind.ASSISTANT_MESSAGE, {"text": reply.content or ""})
            if not reply.tool_calls:
                text = reply.content or ""
                if self._config.output_schema is not None:
                    check_output(text, self._config.output_schema)
                return text
            for call in reply.tool_calls:
                self._check_stop()
                self._bus.publish(
                    EventKind.TOOL_CALL,
                    # A malformed call's args: the model's raw text, as it sent them.
                    {
                        "name": call.name,
                        "id": call.id,
                        "args": call.arguments if call.error is None else call.raw_arguments,
                    },
                )
                with self.spans.tool_call(call) as seen:
                    result = (
                        {"error": f"{call.name} was not run: {call.error}"}
                        if call.error is not None
                        else self._toolbox.call(call.name, call.arguments).payload()
                    )
                    seen(result)
                self._bus.publish(
                    EventKind.TOOL_RESULT, {"name": call.name, "id": call.id, **result}
                )
                content = json.dumps(result, ensure_ascii=False, default=str)
                self._messages.append(Message("tool", content, tool_call_id=call.id))

    def _step(self, tools: list[ToolSpec]) -> Reply:
        self._check_stop()
        limit, budget = self._config.max_steps, self._config.token_budget
        if self._steps >= limit:
            raise StepLimitExceeded(f"max_steps ({limit}) exhausted")
        if budget > 0 and self.tokens >= budget:
            raise TokenBudgetExceeded(f"token_budget ({budget}) spent: {self.tokens} tokens")
        self._steps += 1
        with self.spans.model_call(self._params) as seen:
            reply = self._model.complete(list(self._messages), tools, self._params)
            seen(reply)
        self._prompt_tokens += reply.prompt_tokens
        self._completion_tokens += reply.completion_tokens
        if reply.usage_estimated:
            self._estimated_tokens += reply.usage_tokens
        if self.on_usage is not None:
            self.on_usage(self._prompt_tokens, self._completion_tokens)
        if budget > 0 and self.tokens > budget:
            raise TokenBudgetExceeded(
                f"token_budget ({budget}) exceeded: {self.tokens} tokens used"
            )
        if reply.finish == "length":
            cap = self._params.max_tokens
            raise ReplyCut(
                "the model's reply was cut at its token limit"
                f"{f' of {cap}' if cap else ''} ({reply.stop_detail or 'length'}): a cut "
                "reply is never taken as the answer; raise spec.model.maxTokens"
            )
        if reply.finish == "refused":
            raise ModelRefused(f"the model refused to answer ({reply.stop_detail or 'refused'})")
        return reply

    def _check_open(self) -> None:
        if self._stop.is_set() or self._status in (DONE, FAILED):
            state = "closed" if self._stop.is_set() else self._status
            raise LoopClosed(f"the run is {state}; it takes no more messages")

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise LoopClosed("the run was closed")

    def _report(self, status: str, output: str | None = None, error: str | None = None) -> None:
        self._status = status
        payload = {"status": status} | ({"error": error} if error else {})
        self._bus.publish(EventKind.STATUS_CHANGE, payload)
        if self._on_status is not None:
            try:
                self._on_status(status, output, error)
            except Exception:  # a reporting hiccup must not end the run
                log.exception("status callback failed for status %s", status)
