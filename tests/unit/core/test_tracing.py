"""The pure parts of tracing: traceparents, the ids a run derives, the one-trace rule,
span attributes after the GenAI conventions, and content recorded only bounded."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased
from pydantic import ValidationError

from agentworkers.api import AgentConfigSpec, WorkerSpec
from agentworkers.core import tracing
from agentworkers.errors import InvalidSpecError, describe

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_traceparent_parses_to_its_ids_and_flag() -> None:
    ctx = tracing.parse(GOOD)
    assert ctx.trace_hex == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert ctx.span_id == 0x00F067AA0BA902B7
    assert ctx.sampled
    assert ctx.header() == GOOD
    assert not tracing.parse(GOOD[:-2] + "00").sampled


@pytest.mark.parametrize(
    "bad",
    [
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # a version not spoken
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # a short trace id
        "",
    ],
)
def test_a_malformed_traceparent_is_refused_naming_the_field_and_the_rule(bad: str) -> None:
    with pytest.raises(InvalidSpecError) as e:
        tracing.parse(bad)
    assert str(e.value).startswith("spec.traceparent: must be a W3C traceparent: 00-<32 hex")
    with pytest.raises(ValidationError) as v:
        WorkerSpec.model_validate({"agent": "a", "traceparent": bad})
    assert describe(v.value).field == "spec.traceparent"


def test_the_api_takes_a_good_traceparent() -> None:
    assert WorkerSpec.model_validate({"agent": "a", "traceparent": GOOD}).traceparent == GOOD


def test_a_top_level_run_s_trace_and_run_span_follow_from_its_uid_alone() -> None:
    first = tracing.run_context(None, "uid-1", 1.0)
    assert first == tracing.run_context(None, "uid-1", 1.0)  # the operator's = the runtime's
    other = tracing.run_context(None, "uid-2", 1.0)
    assert first.trace_id != other.trace_id and first.span_id != other.span_id
    assert tracing.trace_id_of(None, "uid-1") == first.trace_id
    assert first.trace_id and first.span_id


def test_a_spawned_run_is_in_its_traceparent_s_trace_with_its_flag() -> None:
    ctx = tracing.run_context(GOOD[:-2] + "00", "uid-1", 1.0)
    assert ctx.trace_hex == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert not ctx.sampled  # the spawner's decision, not the ratio's
    assert ctx.span_id == tracing.run_context(None, "uid-1", 1.0).span_id


def test_sampling_by_ratio_decides_like_opentelemetry_s_sampler() -> None:
    for ratio in (0.0, 0.25, 0.5, 1.0):
        sampler = TraceIdRatioBased(ratio)
        for uid in ("a", "b", "c", "d", "e", "f", "g", "h"):
            trace_id = tracing.trace_id_of(None, uid)
            theirs = sampler.should_sample(None, trace_id, "x").decision
            assert tracing.sampled_by_ratio(trace_id, ratio) == (
                theirs == Decision.RECORD_AND_SAMPLE
            )


def test_a_child_may_not_claim_another_trace_than_its_parent_s() -> None:
    parent = {"metadata": {"name": "lead", "uid": "uid-lead"}, "spec": {"agent": "a"}}
    own = tracing.run_context(None, "uid-lead", 1.0)
    tracing.check_spawn_trace(None, parent)  # none claimed: fine
    tracing.check_spawn_trace(tracing.TraceContext(own.trace_id, 7, True).header(), parent)
    with pytest.raises(InvalidSpecError) as e:
        tracing.check_spawn_trace(GOOD, parent)
    assert str(e.value) == (
        "spec.traceparent: names trace 4bf92f3577b34da6a3ce929d0e0e4736, but a child runs in "
        f"its parent's trace ('lead': {own.trace_hex})"
    )
    spawned = {**parent, "spec": {"agent": "a", "traceparent": GOOD}}
    tracing.check_spawn_trace(GOOD[:36] + "1111111111111111-01", spawned)


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("a" * 20, 10, "a" * (10 - len("…[cut]".encode())) + "…[cut]"),
        ("é" * 10, 11, "é" + "…[cut]"),  # never half a character
        ("abcdef", 3, "abc"),  # no room for the mark
    ],
)
def test_recorded_content_is_bounded_in_bytes(text: str, limit: int, expected: str) -> None:
    assert tracing.bounded(text, limit) == expected
    assert len(tracing.bounded(text, limit).encode()) <= limit


def test_a_tool_call_s_attributes_name_its_mcp_server_and_hold_content_only_if_asked() -> None:
    hidden = tracing.tool_attributes("search__echo", "c1", {"q": "secret"}, False, 100)
    assert hidden == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search__echo",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "extension",
        "agentworkers.mcp.server": "search",
    }
    shown = tracing.tool_attributes("read_file", "c2", {"path": "x" * 50}, True, 20)
    assert shown["gen_ai.tool.type"] == "function"
    assert shown["gen_ai.tool.call.arguments"] == tracing.bounded('{"path": "' + "x" * 50, 20)
    assert tracing.tool_result_attributes({"error": "no such file"}, False, 100) == {
        "error.type": "tool_error"
    }
    assert tracing.tool_result_attributes({"result": {"n": 1}}, True, 100) == {
        "gen_ai.tool.call.result": '{"n": 1}'
    }


def test_a_model_call_s_attributes() -> None:
    assert tracing.chat_attributes("openai", "gpt", 0.2, 100) | tracing.usage_attributes(
        12, 3, "stop", False
    ) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 100,
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("stop",),
        "agentworkers.usage.estimated": False,
    }


def test_a_run_s_outcome_is_its_span_s_status() -> None:
    assert tracing.run_outcome("Done", None) == (True, "")
    assert tracing.run_outcome("Killed", "not needed") == (False, "Killed: not needed")
    assert tracing.run_outcome("Failed", "max_steps (3) exhausted") == (
        False,
        "Failed: max_steps (3) exhausted",
    )


def test_an_agent_s_tracing_settings_are_checked() -> None:
    base = {"model": {"provider": "scripted", "model": "m"}}
    spec = AgentConfigSpec.model_validate(
        {**base, "tracing": {"endpoint": "http://collector:4318", "recordContent": True}}
    )
    assert spec.tracing is not None and spec.tracing.max_content_bytes == 1024
    for bad, field in (
        ({"endpoint": "collector:4318"}, "spec.tracing.endpoint"),
        ({"endpoint": "http://c:4318", "sampleRatio": 2.0}, "spec.tracing.sampleRatio"),
        ({"endpoint": "http://c:4318", "maxContentBytes": 0}, "spec.tracing.maxContentBytes"),
    ):
        with pytest.raises(ValidationError) as e:
            AgentConfigSpec.model_validate({**base, "tracing": bad})
        assert describe(e.value).field == field
