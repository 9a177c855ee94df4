"""The OpenTelemetry SDK for one process (the operator, or one run), set up never to hold
it up. Imported only where tracing is configured: the SDK and its exporter (with
protobuf and requests) cost a run about 4 MB and 0.1 to 0.2 s of its start here.

Spans go through a BatchSpanProcessor with a bounded queue to an OTLP/HTTP exporter
whose every export is bounded in time, on the processor's own thread. A collector that
is down or slow costs the spans, never the run: each span that does not reach it (its
batch refused or timed out, or still queued when the process closes the tracer) is
counted in `dropped`, and handed to `on_drop` (the operator's Prometheus counter).

A run span's ids are fixed (`core.tracing.run_context`): `start(..., fixed=...)` makes
a span with exactly those ids, which is what lets the operator's spans and the run's
agree without a word between them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from agentworkers.core.tracing import Attributes, TraceContext

MAX_QUEUE = 2048  # spans waiting for export; past it the newest are dropped (and counted)
BATCH = 256
SCHEDULE_MILLIS = 1000
EXPORT_SECONDS = 5.0  # one export, retries included
CLOSE_SECONDS = 3.0  # what closing the tracer may add to a process's end
KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT, "server": SpanKind.SERVER}


class _Ids(IdGenerator):
    """Random ids, except for the one span being started with fixed ids on this thread."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._fixed = threading.local()

    @contextlib.contextmanager
    def fixed(self, ids: TraceContext | None) -> Iterator[None]:
        self._fixed.ids = ids
        try:
            yield
        finally:
            self._fixed.ids = None

    def _ids(self) -> TraceContext | None:
        ids: TraceContext | None = getattr(self._fixed, "ids", None)
        return ids

    def generate_span_id(self) -> int:
        ids = self._ids()
        return ids.span_id if ids is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = self._ids()
        return ids.trace_id if ids is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return True  # fixed ones come from a sha256 of a random uid


class _Counting(SpanExporter):
    """The exporter, counting the spans handed to it and those it did not deliver; and
    (`ended`, from `_Ended`) the sampled spans that ended."""

    def __init__(self, inner: SpanExporter, on_drop: Callable[[int], None]) -> None:
        self._inner, self._on_drop = inner, on_drop
        self._lock = threading.Lock()
        self.ended = self.handed = self.dropped = 0
        self.closed = False  # from then on, what was not sent is counted already

    def count_end(self) -> None:
        with self._lock:
            self.ended += 1

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # the exporter's trouble is the spans', never the process's
            result = SpanExportResult.FAILURE
        with self._lock:
            self.handed += len(spans)
        if result is not SpanExportResult.SUCCESS and not self.closed:
            self.drop(len(spans))
        return result

    def drop(self, count: int) -> None:
        if count <= 0:
            return
        with self._lock:
            self.dropped += count
        self._on_drop(count)

    def finish(self) -> None:
        """Count what was never handed to the exporter (or is still on its way)."""
        with self._lock:
            self.closed = True
            unsent = self.ended - self.handed
        self.drop(unsent)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _Ended(SpanProcessor):
    """Ahead of the batch processor: counts each sampled span that ends."""

    def __init__(self, counting: _Counting) -> None:
        self._counting = counting

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._counting.count_end()


def remote(parent: TraceContext) -> Context:
    """A context whose current span is `parent`, a span of another process."""
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if parent.sampled else 0)
    span = NonRecordingSpan(SpanContext(parent.trace_id, parent.span_id, True, flags))
    return trace.set_span_in_context(span, Context())


def context_of(span: trace.Span) -> TraceContext | None:
    """A span's context as a traceparent carries it; None for an invalid one."""
    ctx = span.get_span_context()
    return (
        TraceContext(ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled) if ctx.is_valid else None
    )


def failed(span: trace.Span, description: str) -> None:
    """Mark a span as failed (it ends as usual)."""
    span.set_status(Status(StatusCode.ERROR, description))


def end(span: trace.Span, ok: bool, description: str = "") -> None:
    """End a span with its outcome as the span's status."""
    span.set_status(Status(StatusCode.OK) if ok else Status(StatusCode.ERROR, description))
    span.end()


class Tracer:
    """One process's tracer: `service` names it in the trace viewer."""

    def __init__(
        self,
        service: str,
        endpoint: str,
        ratio: float,
        resource: Mapping[str, str] | None = None,
        on_drop: Callable[[int], None] = lambda _: None,
        export_seconds: float = EXPORT_SECONDS,
        exporter: SpanExporter | None = None,
    ) -> None:
        self._ids = _Ids()
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service, **(resource or {})}),
            sampler=ParentBased(TraceIdRatioBased(ratio)),
            id_generator=self._ids,
            # `close` ends it, bounded in time; the SDK's own exit hook is not.
            shutdown_on_exit=False,
        )
        url = endpoint.rstrip("/") + "/v1/traces"
        inner = exporter or OTLPSpanExporter(endpoint=url, timeout=export_seconds)
        self._counting = _Counting(inner, on_drop)
        self._provider.add_span_processor(_Ended(self._counting))
        self._provider.add_span_processor(
            BatchSpanProcessor(
                self._counting,
                max_queue_size=MAX_QUEUE,
                schedule_delay_millis=SCHEDULE_MILLIS,
                max_export_batch_size=BATCH,
            )
        )
        self._tracer = self._provider.get_tracer("agentworkers")
        self._closed = False

    @property
    def dropped(self) -> int:
        """Spans that did not reach the collector (so far)."""
        return self._counting.dropped

    def start(
        self,
        name: str,
        parent: TraceContext | None,
        *,
        fixed: TraceContext | None = None,
        attributes: Attributes | None = None,
        kind: str = "internal",
        start_ns: int | None = None,
    ) -> trace.Span:
        """A span under `parent` (a span of any process; None: a trace's root), with the
        ids of `fixed` when given. The caller ends it (`end`)."""
        context = remote(parent) if parent is not None else Context()
        with self._ids.fixed(fixed):
            return self._tracer.start_span(
                name,
                context=context,
                kind=KINDS[kind],
                attributes=dict(attributes or {}),
                start_time=start_ns,
            )

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        parent: TraceContext | trace.Span | None = None,
        attributes: Attributes | None = None,
        kind: str = "internal",
    ) -> Iterator[trace.Span]:
        """A span, current on this thread while the block runs, under `parent` (a context
        or a span object), else under this thread's current span. An exception ends it
        as an error and goes on."""
        if isinstance(parent, TraceContext):
            context: Context | None = remote(parent)
        elif parent is not None:
            context = trace.set_span_in_context(parent, Context())
        else:
            context = None  # the current one
        span = self._tracer.start_span(
            name, context=context, kind=KINDS[kind], attributes=dict(attributes or {})
        )
        with trace.use_span(span, end_on_exit=True):
            yield span

    def current(self) -> TraceContext | None:
        """This thread's current span, as a traceparent would carry it: a span the
        sampler dropped too (its context says so), so that a tree not sampled stays so."""
        return context_of(trace.get_current_span())

    def close(self, seconds: float = CLOSE_SECONDS) -> int:
        """Send what is queued, for at most `seconds`, and stop; the spans not sent by
        then are counted (one still on its way counts too). Returns `dropped`."""
        if not self._closed:
            self._closed = True
            # On a thread of its own: the SDK's flush and shutdown wait for a collector
            # that does not answer for longer than a process should take to end.
            closing = threading.Thread(target=self._provider.shutdown, daemon=True)
            closing.start()
            closing.join(seconds)
            self._counting.finish()
        return self._counting.dropped
