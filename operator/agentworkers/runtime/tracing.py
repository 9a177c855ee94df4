"""A run's spans: its run span, one `invoke_agent` span per message it answers, a `chat`
span per model call and an `execute_tool` span per tool call (core.tracing names their
attributes). `RunSpans` does nothing, which is what a run without `spec.tracing` gets:
such a run never imports the OpenTelemetry SDK. `start` gives the real ones.

The run span covers the run's life: it starts when the Worker was created (queued), has
an event for each phase the run reports, and ends with the run, its status the outcome:
Done is ok; Failed carries the error, Killed the kill reason. Its ids are the ones the
operator derives too (core.tracing.run_context), so the operator's spans for the spawn
and the run's own land in one tree. A planner's spawn_worker span goes into the child's
`spec.traceparent`: the child's run span hangs below it, in the same trace.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agentworkers.api.tracing import Tracing
from agentworkers.core import clocks
from agentworkers.core import tracing as spans
from agentworkers.runtime.models import Params, Reply, ToolCall

if TYPE_CHECKING:
    from opentelemetry import trace

    from agentworkers.otel import Tracer

log = logging.getLogger(__name__)

ReplySeen = Callable[[Reply], None]
ResultSeen = Callable[[Mapping[str, Any]], None]
SERVICE = "agentworkers-run"


def _ignore(_: Any) -> None:
    pass


class RunSpans:
    """The hooks the agent loop and the runtime call; here they do nothing."""

    def turn(self, index: int) -> contextlib.AbstractContextManager[None]:
        """Around one message's turn (0: the first message, then each query)."""
        return contextlib.nullcontext()

    def model_call(self, params: Params) -> contextlib.AbstractContextManager[ReplySeen]:
        """Around one model call; call what it yields with the reply."""
        return contextlib.nullcontext(_ignore)

    def tool_call(self, call: ToolCall) -> contextlib.AbstractContextManager[ResultSeen]:
        """Around one tool call; call what it yields with the result payload."""
        return contextlib.nullcontext(_ignore)

    def traceparent(self) -> str | None:
        """The current span on this thread, for a child's spec.traceparent."""
        return None

    def observe(self, fields: Mapping[str, Any]) -> None:
        """A status report of the run (phase, error)."""

    def killed(self, reason: str) -> None:
        """The run was killed, for this reason."""

    def close(self) -> int:
        """End the run span and send what is left; the spans dropped."""
        return 0


class TracedRun(RunSpans):
    """A run's spans, through the SDK (`agentworkers.otel`)."""

    def __init__(
        self, tracer: Tracer, body: Mapping[str, Any], provider: str, model: str, config: Tracing
    ) -> None:
        meta, spec = body["metadata"], body["spec"]
        self._tracer, self._config = tracer, config
        self._provider, self._model = provider, model
        self._agent, self._name = spec["agent"], meta["name"]
        traceparent = spec.get("traceparent")
        ids = spans.run_context(traceparent, meta["uid"], config.sample_ratio)
        attributes: spans.Attributes = {
            spans.WORKER: meta["name"],
            spans.NAMESPACE: meta["namespace"],
            spans.AGENT_NAME: spec["agent"],
            spans.CONVERSATION: meta["name"],
        }
        for key in ("parent", "profile"):
            if spec.get(key):
                attributes[f"agentworkers.{key}"] = spec[key]
        created = _nanos(meta.get("creationTimestamp"))
        self._run = tracer.start(
            f"run {meta['name']}",
            spans.spawned_under(traceparent),
            fixed=ids,
            attributes=attributes,
            start_ns=created,
        )
        self._run.add_event("Pending", timestamp=created)
        self._run.add_event("pod started")
        self._phase, self._error = "", ""
        self._kill: str | None = None
        # Spans in progress (a turn, a tool call): a run that ends mid-way ends them too.
        self._open: dict[int, trace.Span] = {}
        self._lock = threading.Lock()  # the loop's thread opens them, the main one ends the run

    @contextlib.contextmanager
    def _span(
        self, name: str, parent: trace.Span | None, attributes: spans.Attributes, kind: str
    ) -> Iterator[trace.Span]:
        with self._tracer.span(name, parent, attributes, kind) as span:
            with self._lock:
                self._open[id(span)] = span
            try:
                yield span
            finally:
                with self._lock:
                    self._open.pop(id(span), None)

    @contextlib.contextmanager
    def turn(self, index: int) -> Iterator[None]:
        attributes: spans.Attributes = {
            spans.OPERATION: "invoke_agent",
            spans.AGENT_NAME: self._agent,
            spans.CONVERSATION: self._name,
            "agentworkers.query.index": index,
        }
        with self._span(f"invoke_agent {self._agent}", self._run, attributes, "internal"):
            yield

    @contextlib.contextmanager
    def model_call(self, params: Params) -> Iterator[ReplySeen]:
        attributes = spans.chat_attributes(
            self._provider, self._model, params.temperature, params.max_tokens
        )
        with self._span(f"chat {self._model}", None, attributes, "client") as span:

            def seen(reply: Reply) -> None:
                span.set_attributes(
                    spans.usage_attributes(
                        reply.prompt_tokens,
                        reply.completion_tokens,
                        reply.stop_detail or reply.finish,
                        reply.usage_estimated,
                    )
                )

            yield seen

    @contextlib.contextmanager
    def tool_call(self, call: ToolCall) -> Iterator[ResultSeen]:
        record, limit = self._config.record_content, self._config.max_content_bytes
        arguments = call.arguments if call.error is None else call.raw_arguments
        attributes = spans.tool_attributes(call.name, call.id, arguments, record, limit)
        with self._span(f"execute_tool {call.name}", None, attributes, "internal") as span:

            def seen(result: Mapping[str, Any]) -> None:
                span.set_attributes(spans.tool_result_attributes(result, record, limit))
                if "error" in result:
                    from agentworkers.otel import failed  # noqa: PLC0415

                    # The run goes on (the model reads the error); the span says it failed.
                    failed(span, spans.bounded(str(result["error"]), spans.MAX_STATUS_BYTES))

            yield seen

    def traceparent(self) -> str | None:
        current = self._tracer.current()
        return current.header() if current is not None else None

    def observe(self, fields: Mapping[str, Any]) -> None:
        phase, error = fields.get("phase"), fields.get("error")
        if error:
            self._error = str(error)
        if phase and phase != self._phase:
            self._phase = str(phase)
            self._run.add_event(self._phase)

    def killed(self, reason: str) -> None:
        self._kill = reason

    def close(self) -> int:
        from agentworkers.otel import end  # noqa: PLC0415

        if self._kill is not None:
            phase, error = "Killed", self._kill
        elif self._phase in ("Done", "Failed"):
            phase, error = self._phase, self._error
        else:
            phase, error = "Ended", "the run's pod stopped before the run finished"
        ok, description = spans.run_outcome(phase, error)
        with self._lock:
            cut = list(self._open.values())
        for span in cut:  # cut short by the run's end
            end(span, False, f"cut short: the run ended ({phase})")
        self._run.set_attribute("agentworkers.phase", phase)
        end(self._run, ok, spans.bounded(description, spans.MAX_STATUS_BYTES))
        dropped = self._tracer.close()
        if dropped:
            log.warning(
                "%d spans did not reach the collector at %s", dropped, self._config.endpoint
            )
        return dropped


def _nanos(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    return int(clocks.parse(timestamp).timestamp() * 1e9)


def start(config: Tracing | None, body: Mapping[str, Any], provider: str, model: str) -> RunSpans:
    """The run's spans: real ones when its agent configures tracing (the SDK imported
    only then), else hooks that do nothing."""
    if config is None:
        return RunSpans()
    from agentworkers.otel import Tracer  # noqa: PLC0415

    meta = body["metadata"]
    tracer = Tracer(
        SERVICE,
        config.endpoint,
        config.sample_ratio,
        {spans.WORKER: meta["name"], spans.NAMESPACE: meta["namespace"]},
    )
    return TracedRun(tracer, body, provider, model, config)
