"""One trace per spawn tree: its ids, its rules and its spans' attributes. Pure.

A Worker's trace and its run span's id follow from the Worker alone, so the operator,
which makes the run's pod, and the runtime, which runs it, agree on them without a word:

- its trace: the trace of `spec.traceparent` (its spawner's span); without one (a
  top-level run, or a Worker applied by hand) a trace of its own, whose id is derived
  from the Worker's uid;
- its run span: id derived from the uid; its parent is the span `spec.traceparent`
  names (a parent run's `spawn_worker` span), or none;
- sampled: the traceparent's flag; without one, the ratio applied to the trace id the
  way OpenTelemetry's TraceIdRatioBased sampler does, so every process decides alike.

A child may not claim another trace than its parent's run's (`check_child_trace`).

Span attributes follow OpenTelemetry's GenAI semantic conventions (`chat` spans for model
calls, `execute_tool` for tool calls, `invoke_agent` for each message a run answers);
what they do not name is under `agentworkers.`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentworkers.api.names import mcp_tool_of
from agentworkers.api.tracing import TRACEPARENT_RULE
from agentworkers.core.objects import meta
from agentworkers.errors import InvalidSpecError
from agentworkers.virtualagent.text import utf8_len

SAMPLED = 0x01
_ID_BITS = {"trace": 128, "span": 64}
CUT_MARK = "…[cut]"
MAX_STATUS_BYTES = 1024  # of a span status's description: an error, a kill reason

# The GenAI conventions' names (semantic conventions 1.37+), in one place.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the older name of the provider, still read by many viewers
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
MCP_SERVER = "agentworkers.mcp.server"
WORKER = "agentworkers.worker"
NAMESPACE = "k8s.namespace.name"


@dataclass(frozen=True)
class TraceContext:
    """A span's W3C trace context: what a traceparent carries."""

    trace_id: int
    span_id: int
    sampled: bool

    @property
    def trace_hex(self) -> str:
        return f"{self.trace_id:032x}"

    def header(self) -> str:
        """As a traceparent header (version 00)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{SAMPLED if self.sampled else 0:02x}"


def parse(traceparent: str, field: str = "spec.traceparent") -> TraceContext:
    """A traceparent's context; InvalidSpecError, naming `field` and the rule, when it is
    not one (the API's pattern says the same; this is for headers from elsewhere)."""
    parts = traceparent.split("-")
    ok = len(parts) == 4 and [len(p) for p in parts] == [2, 32, 16, 2] and parts[0] == "00"
    ok = ok and all(c in "0123456789abcdef" for c in "".join(parts))
    if not ok or int(parts[1], 16) == 0 or int(parts[2], 16) == 0:
        raise InvalidSpecError(field=field, rule=f"must be {TRACEPARENT_RULE}, not {traceparent!r}")
    return TraceContext(int(parts[1], 16), int(parts[2], 16), bool(int(parts[3], 16) & SAMPLED))


def _derived(uid: str, what: str) -> int:
    """A non-zero id of `what` ("trace" or "span") from a Worker's uid: the same in
    every process, and as random as the uid (a random UUID)."""
    bits = _ID_BITS[what]
    value = int.from_bytes(hashlib.sha256(f"{what}:{uid}".encode()).digest()[: bits // 8])
    return value or 1


def sampled_by_ratio(trace_id: int, ratio: float) -> bool:
    """OpenTelemetry's TraceIdRatioBased decision: the trace id's low 64 bits under the
    ratio's share of 2**64."""
    return (trace_id & (2**64 - 1)) < round(ratio * 2**64)


def spawned_under(traceparent: str | None) -> TraceContext | None:
    """The span a Worker was spawned under, if its spec names one."""
    return parse(traceparent) if traceparent else None


def trace_id_of(traceparent: str | None, uid: str) -> int:
    """The trace a Worker's run is in."""
    parent = spawned_under(traceparent)
    return parent.trace_id if parent is not None else _derived(uid, "trace")


def trace_hex_of(traceparent: str | None, uid: str) -> str:
    """The trace id as trace viewers show it (32 hex digits)."""
    return f"{trace_id_of(traceparent, uid):032x}"


def run_context(traceparent: str | None, uid: str, ratio: float) -> TraceContext:
    """The context of a Worker's run span, which the operator and the runtime both use."""
    parent = spawned_under(traceparent)
    trace_id = parent.trace_id if parent is not None else _derived(uid, "trace")
    sampled = parent.sampled if parent is not None else sampled_by_ratio(trace_id, ratio)
    return TraceContext(trace_id, _derived(uid, "span"), sampled)


def run_traceparent(body: Mapping[str, Any], ratio: float) -> str:
    """The traceparent of a Worker's run span: what a child spawned from outside its run
    (a client) carries, to sit under it."""
    spec = body.get("spec") or {}
    return run_context(spec.get("traceparent"), meta(body).uid, ratio).header()


def check_child_trace(traceparent: str | None, parent_name: str, parent_trace_id: int) -> None:
    """A child's traceparent names its parent's run's trace, or the child is refused: a
    tree is one trace, and a run cannot hang its spans in another tree's."""
    claimed = spawned_under(traceparent)
    if claimed is not None and claimed.trace_id != parent_trace_id:
        raise InvalidSpecError(
            field="spec.traceparent",
            rule=f"names trace {claimed.trace_hex}, but a child runs in its parent's trace "
            f"({parent_name!r}: {parent_trace_id:032x})",
        )


def check_spawn_trace(traceparent: str | None, parent_body: Mapping[str, Any]) -> None:
    """`check_child_trace` against the parent Worker as stored."""
    parent = meta(parent_body)
    parent_trace = trace_id_of((parent_body.get("spec") or {}).get("traceparent"), parent.uid)
    check_child_trace(traceparent, parent.name, parent_trace)


def bounded(text: str, limit: int) -> str:
    """`text` in at most `limit` bytes of UTF-8, cut on a character boundary and marked."""
    if utf8_len(text) <= limit:
        return text
    mark = CUT_MARK if limit > utf8_len(CUT_MARK) else ""  # too small a limit: cut bare
    return text.encode()[: limit - utf8_len(mark)].decode("utf-8", "ignore") + mark


def recorded(value: Any, limit: int) -> str:
    """A tool call's arguments or result as recorded on its span: JSON, bounded."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return bounded(text, limit)


# --- attributes --------------------------------------------------------------------

Attributes = dict[str, str | bool | int | float | tuple[str, ...]]


def chat_attributes(
    provider: str, model: str, temperature: float | None, max_tokens: int | None
) -> Attributes:
    """A model call's, before it is made."""
    found: Attributes = {
        OPERATION: "chat",
        PROVIDER: provider,
        SYSTEM: provider,
        REQUEST_MODEL: model,
    }
    if temperature is not None:
        found["gen_ai.request.temperature"] = temperature
    if max_tokens is not None:
        found["gen_ai.request.max_tokens"] = max_tokens
    return found


def usage_attributes(
    input_tokens: int, output_tokens: int, finish: str, estimated: bool
) -> Attributes:
    """A model call's, once it answered: usage as the run counts it (estimated when the
    provider sent none), and why the reply ended."""
    return {
        INPUT_TOKENS: input_tokens,
        OUTPUT_TOKENS: output_tokens,
        FINISH_REASONS: (finish,),
        "agentworkers.usage.estimated": estimated,
    }


def tool_attributes(
    name: str,
    call_id: str,
    arguments: Mapping[str, Any] | str | None,
    record: bool,
    limit: int,
) -> Attributes:
    """A tool call's: its name and id, its MCP server for a server's tool, and (only
    when the agent records content) its arguments, bounded."""
    found: Attributes = {OPERATION: "execute_tool", TOOL_NAME: name, TOOL_CALL_ID: call_id}
    server = mcp_tool_of(name)
    found[TOOL_TYPE] = "extension" if server else "function"
    if server:
        found[MCP_SERVER] = server[0]
    if record and arguments is not None:
        found[TOOL_ARGUMENTS] = recorded(arguments, limit)
    return found


def tool_result_attributes(result: Mapping[str, Any], record: bool, limit: int) -> Attributes:
    """A tool call's outcome: `error.type` when it failed, the result when recorded."""
    found: Attributes = {}
    if "error" in result:
        found[ERROR_TYPE] = "tool_error"
    if record:
        found[TOOL_RESULT] = recorded(result.get("result", result.get("error")), limit)
    return found


def run_outcome(phase: str, error: str | None) -> tuple[bool, str]:
    """(ok, description) of a run span's status from how the run ended: Done is ok;
    Failed and Killed are errors whose description is the error or the kill reason."""
    if phase == "Done":
        return True, ""
    return False, f"{phase}: {error}" if error else phase
