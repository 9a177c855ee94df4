"""The operator's spans of a spawn: admission, binding and pod creation.

Off unless the operator is given an OTLP endpoint (`--otlp-endpoint`, the chart's
`tracing.endpoint`); the SDK is imported only then. Each span goes under the span the
Worker was spawned under (`spec.traceparent`: a parent run's spawn_worker span), so a
slow spawn shows where it waited, beside the child's run span; a Worker without one (a
top-level run) has them under its own run span, whose ids core.tracing derives. Spans
that do not reach the collector are counted (agentworkers_trace_spans_dropped_total).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agentworkers.controller.infra import metrics
from agentworkers.core import tracing as spans
from agentworkers.core.objects import meta
from agentworkers.errors import REFUSALS

if TYPE_CHECKING:
    from agentworkers.otel import Tracer

SERVICE = "agentworkers-operator"
_state: dict[str, Any] = {"tracer": None, "ratio": 1.0}


def configure(endpoint: str | None, ratio: float) -> None:
    """Trace the operator's part of each spawn to `endpoint` (None: off)."""
    if not endpoint:
        return
    from agentworkers.otel import Tracer  # noqa: PLC0415

    _state["tracer"] = Tracer(SERVICE, endpoint, ratio, on_drop=metrics.SPANS_DROPPED.inc)
    _state["ratio"] = ratio


def close() -> None:
    tracer: Tracer | None = _state["tracer"]
    if tracer is not None:
        tracer.close()
        _state["tracer"] = None


def parent_of(body: Mapping[str, Any], ratio: float) -> spans.TraceContext | None:
    """Where the operator's spans of a Worker go: under its traceparent's span, else
    under its own run span; None when neither can be known (no uid yet, a traceparent
    admission refuses)."""
    spec = body.get("spec") or {}
    try:
        under = spans.spawned_under(spec.get("traceparent"))
    except REFUSALS:
        return None
    if under is not None:
        return under
    uid = meta(body).uid
    return spans.run_context(None, uid, ratio) if uid else None


@contextlib.contextmanager
def spawn_span(name: str, body: Mapping[str, Any]) -> Iterator[None]:
    """A span of the operator's part of a Worker's spawn (`name`: admission, bind, pod),
    while the block runs; nothing when tracing is off."""
    tracer: Tracer | None = _state["tracer"]
    parent = parent_of(body, _state["ratio"]) if tracer is not None else None
    if tracer is None or parent is None:
        yield
        return
    worker = meta(body)
    attributes: spans.Attributes = {spans.WORKER: worker.name, spans.NAMESPACE: worker.namespace}
    with tracer.span(name, parent, attributes):
        yield
