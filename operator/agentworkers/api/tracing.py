"""Tracing's part of the API: a spawn's W3C trace context and an agent's OTLP settings.

A Worker's `spec.traceparent` is the W3C Trace Context header of the span it was spawned
under (a parent run's `spawn_worker` tool span, or a client's own span): its run span and
the operator's spans for it sit under that span, in that trace. An AgentConfig's
`spec.tracing` turns tracing on for its runs (off when absent).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from agentworkers.api.common import KubeModel

# Version 00, the only version of the W3C Trace Context recommendation: version, trace
# id, parent span id, flags, lower-case hex. The CRD's pattern says the same (RE2, so the
# all-zero ids, which the recommendation forbids, are refused by the validator below).
TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
TRACEPARENT_RULE = (
    "a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lower-case, "
    "neither id all zeros"
)
DEFAULT_CONTENT_BYTES = 1024
MAX_CONTENT_BYTES = 16 * 1024


def _nonzero_ids(value: str) -> str:
    _, trace_id, span_id, _ = value.split("-")
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        raise ValueError(f"must be {TRACEPARENT_RULE}")
    return value


TraceParent = Annotated[
    StrictStr,
    Field(
        pattern=TRACEPARENT_PATTERN,
        max_length=55,
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!self.matches('^00-0{32}-') && !self.matches('-0{16}-[0-9a-f]{2}$')",
                    "message": f"must be {TRACEPARENT_RULE}",
                }
            ]
        },
        description="The W3C traceparent of the span this run was spawned under (a parent "
        "run's spawn_worker span, or a client's): the run's span and the operator's spans "
        "for it go under that span. A child's must name its parent's trace. Omitted: a "
        "top-level run starts a trace of its own. Fixed at creation.",
    ),
    AfterValidator(_nonzero_ids),
]


class Tracing(KubeModel):
    """Where the agent's runs send their spans (OTLP over HTTP), and how many."""

    endpoint: StrictStr = Field(
        description="The OTLP/HTTP endpoint of a collector (e.g. "
        "http://otel-collector.observability:4318); spans go to <endpoint>/v1/traces. The "
        "exporter never holds a run up: spans a collector does not take are dropped and "
        "counted.",
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        max_length=2048,
    )
    sample_ratio: StrictFloat = Field(
        default=1.0,
        description="The share of trees traced (0 to 1), decided once per trace from its id, "
        "so a tree is traced whole or not at all.",
        ge=0,
        le=1,
    )
    record_content: StrictBool = Field(
        default=False,
        description="Record tool call arguments and results on the execute_tool spans "
        "(gen_ai.tool.call.arguments and .result). Off by default: they may hold data a "
        "team must not send to its trace store.",
    )
    max_content_bytes: StrictInt = Field(
        default=DEFAULT_CONTENT_BYTES,
        description="With recordContent: each argument or result is cut to this many bytes "
        f"of UTF-8 (at most {MAX_CONTENT_BYTES}).",
        ge=1,
        le=MAX_CONTENT_BYTES,
    )
