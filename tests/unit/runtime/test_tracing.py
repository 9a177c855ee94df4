"""A run's spans through the OpenTelemetry SDK (its in-memory exporter standing in for a
collector): a turn, its model calls with their usage, its tool calls with their outcome;
content only when asked and bounded; a collector that is down costs only the spans, and
counts them; a run without tracing never imports the SDK."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentworkers.api.tracing import Tracing
from agentworkers.core.effective import EffectiveConfig
from agentworkers.core.tracing import run_context
from agentworkers.otel import Tracer
from agentworkers.runtime.events import EventBus
from agentworkers.runtime.loop import AgentLoop
from agentworkers.runtime.models import ToolCall
from agentworkers.runtime.providers import ScriptedModel
from agentworkers.runtime.tools import Sandbox, Toolbox
from agentworkers.runtime.tracing import TracedRun

BODY = {
    "metadata": {
        "name": "kid",
        "namespace": "ns",
        "uid": "uid-kid",
        "creationTimestamp": "2026-12-02T10:00:00Z",
    },
    "spec": {
        "agent": "planner",
        "parent": "lead",
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    },
}


def _run(
    tmp_path: Path, script: list[dict[str, Any]], **tracing: Any
) -> tuple[list[ReadableSpan], AgentLoop]:
    """One turn of a run, its spans once the run span closed (Idle, then killed)."""
    exporter = InMemorySpanExporter()
    tracer = Tracer("test", "http://127.0.0.1:9", 1.0, exporter=exporter)
    config = EffectiveConfig(
        agent="planner", provider="scripted", model="m", tools=("read_file", "write_file")
    )
    spans = TracedRun(
        tracer, BODY, "scripted", "m", Tracing(endpoint="http://127.0.0.1:9", **tracing)
    )
    loop = AgentLoop(
        config,
        ScriptedModel(script),
        Toolbox.for_config(config, Sandbox(str(tmp_path)).tools()),
        EventBus("kid"),
    )
    loop.spans = spans
    loop.run_turn("go")
    spans.observe({"phase": "Idle"})
    spans.killed("not needed")
    spans.close()
    return list(exporter.get_finished_spans()), loop


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_a_turn_s_model_and_tool_calls_are_spans_under_the_run_span(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"path": "a.txt", "content": "hi"}},
        {"tool": "read_file", "args": {"path": "missing.txt"}},
        {"reply": "done"},
    ]
    finished, loop = _run(tmp_path, script)
    named = _by_name(finished)
    turn = named["invoke_agent planner"][0]
    chats = named["chat m"]
    assert len(chats) == 3
    assert all(c.parent is not None and c.parent.span_id == turn.context.span_id for c in chats)
    usage = sum(
        int(c.attributes["gen_ai.usage.input_tokens"])
        + int(c.attributes["gen_ai.usage.output_tokens"])
        for c in chats
    )
    assert usage == loop.tokens  # the spans count what the run reports
    assert chats[-1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert chats[0].attributes["gen_ai.provider.name"] == "scripted"
    write, read = named["execute_tool write_file"][0], named["execute_tool read_file"][0]
    assert write.status.status_code is not StatusCode.ERROR
    assert read.status.status_code is StatusCode.ERROR
    assert read.attributes["error.type"] == "tool_error"
    assert "gen_ai.tool.call.arguments" not in write.attributes  # not asked for
    # The run span: the ids the operator derives too, under the spawner's span.
    expected = run_context(BODY["spec"]["traceparent"], "uid-kid", 1.0)
    assert turn.parent is not None and turn.parent.span_id == expected.span_id
    assert turn.context.trace_id == expected.trace_id


def test_the_run_span_covers_the_run_and_ends_with_its_kill_reason(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    tracer = Tracer("test", "http://127.0.0.1:9", 1.0, exporter=exporter)
    spans = TracedRun(tracer, BODY, "scripted", "m", Tracing(endpoint="http://127.0.0.1:9"))
    spans.observe({"phase": "Running"})
    spans.observe({"phase": "Idle"})
    spans.killed("not needed")
    spans.close()
    (run,) = exporter.get_finished_spans()
    assert run.name == "run kid"
    assert run.context.span_id == run_context(None, "uid-kid", 1.0).span_id
    assert run.parent is not None and run.parent.span_id == 0x00F067AA0BA902B7
    assert f"{run.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    created = dt.datetime(2026, 12, 2, 10, tzinfo=dt.UTC)
    assert run.start_time == int(created.timestamp()) * 10**9  # queued time too
    assert [e.name for e in run.events] == ["Pending", "pod started", "Running", "Idle"]
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "Killed: not needed"
    assert run.attributes["agentworkers.phase"] == "Killed"


def test_tool_content_is_recorded_only_when_asked_and_bounded(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x" * 500}},
        {"reply": "done"},
    ]
    finished, _ = _run(tmp_path, script, recordContent=True, maxContentBytes=64)
    (write,) = _by_name(finished)["execute_tool write_file"]
    arguments = str(write.attributes["gen_ai.tool.call.arguments"])
    assert arguments.startswith('{"path": "a.txt", "content": "xxx') and arguments.endswith("[cut]")
    assert len(arguments.encode()) <= 64
    assert write.attributes["gen_ai.tool.call.result"] == '{"path": "a.txt", "bytes": 500}'


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_collector_that_is_down_costs_only_the_spans_and_they_are_counted() -> None:
    dropped: list[int] = []
    tracer = Tracer(
        "test",
        f"http://127.0.0.1:{_closed_port()}",
        1.0,
        on_drop=dropped.append,
        export_seconds=1.0,
    )
    started = time.monotonic()
    for i in range(50):
        with tracer.span(f"s{i}", run_context(None, "u", 1.0)):
            pass
    spent_in_spans = time.monotonic() - started
    assert spent_in_spans < 0.5  # the run never waits for the exporter
    started = time.monotonic()
    assert tracer.close(seconds=2.0) == 50
    assert time.monotonic() - started < 3.0  # closing is bounded too
    assert sum(dropped) == 50


def test_a_run_without_tracing_never_imports_the_sdk() -> None:
    code = (
        "import sys\n"
        "from agentworkers.runtime import main, tracing\n"
        "spans = tracing.start(None, {}, 'scripted', 'm')\n"
        "assert type(spans) is tracing.RunSpans\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_tree_not_sampled_hands_its_children_the_same_decision() -> None:
    exporter = InMemorySpanExporter()
    tracer = Tracer("test", "http://127.0.0.1:9", 0.0, exporter=exporter)
    root = {"metadata": {**BODY["metadata"], "name": "lead"}, "spec": {"agent": "planner"}}
    spans = TracedRun(
        tracer, root, "scripted", "m", Tracing(endpoint="http://127.0.0.1:9", sampleRatio=0.0)
    )
    call = ToolCall("c1", "spawn_worker", {"name": "kid"})
    with spans.turn(0), spans.tool_call(call):
        handed = spans.traceparent()
    spans.close()
    assert handed is not None
    _, trace_id, _, flags = handed.split("-")
    assert trace_id == run_context(None, "uid-kid", 0.0).trace_hex  # the tree's trace
    assert flags == "00"  # not sampled: the child's spans are not sent either
    assert exporter.get_finished_spans() == ()
