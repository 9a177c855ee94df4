"""ScriptedModel: the script format, its validation, and deterministic replies and usage."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agentworkers.core.effective import EffectiveConfig
from agentworkers.runtime.models import Message, ModelError, Params, Reply, ToolCall
from agentworkers.runtime.providers import ScriptedModel, client_for

SCRIPT = [
    {"thought": "look first"},
    {"tool": "list_files", "args": {"path": "."}},
    {"reply": "two files"},
    {"match": "status\\?", "reply": "all good"},
]


def run(model: ScriptedModel, *contents: str) -> list[Reply]:
    return [model.complete([Message("user", c)], [], Params()) for c in contents]


def test_replies_are_deterministic() -> None:
    first = run(ScriptedModel(SCRIPT), "go", "more")
    second = run(ScriptedModel(json.dumps(SCRIPT)), "go", "more")

    assert first == second
    assert first[0] == Reply(
        None,
        (ToolCall("call_1", "list_files", {"path": "."}),),
        "look first",
        prompt_tokens=1,  # "go"
        completion_tokens=3,  # the tool's name and its JSON arguments
        finish="tool_calls",
    )
    assert first[1] == Reply("two files", prompt_tokens=1, completion_tokens=2)


def test_match_answers_user_messages_and_stays() -> None:
    model = ScriptedModel(SCRIPT)

    replies = run(model, "status?", "status? again")

    assert [r.content for r in replies] == ["all good", "all good"]
    assert run(model, "go")[0].tool_calls[0].name == "list_files"  # ordered steps untouched


def test_match_does_not_answer_a_tool_result() -> None:
    model = ScriptedModel([{"match": ".*", "reply": "keyed"}, {"reply": "ordered"}])
    reply = model.complete([Message("tool", "status?", tool_call_id="c1")], [], Params())
    assert reply.content == "ordered"


def test_an_exhausted_script_is_a_model_error() -> None:
    model = ScriptedModel([{"reply": "once"}])
    run(model, "a")
    with pytest.raises(ModelError, match="script exhausted after 1 steps"):
        run(model, "b")


def test_usage_counts_words_of_input_and_output() -> None:
    model = ScriptedModel([{"tool": "write_file", "args": {"path": "a b"}}, {"reply": "x y z"}])
    messages = [Message("system", "be brief"), Message("user", "one two three")]

    call = model.complete(messages, [], Params())
    answer = model.complete(messages, [], Params())

    assert call.usage_tokens == 5 + 1 + len(json.dumps({"path": "a b"}).split())
    assert answer.usage_tokens == 5 + 3


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"reply": "a", "tool": "b"}, "exactly one of reply, tool or thought"),
        ({}, "exactly one of reply, tool or thought"),
        ({"reply": "a", "args": {"x": 1}}, "args goes with tool"),
        ({"match": "x", "tool": "t"}, "match goes with reply"),
        ({"match": "(", "reply": "a"}, "not a valid regex"),
        ({"reply": "a", "extra": 1}, "Extra inputs are not permitted"),
        ({"reply": 3}, "valid string"),
    ],
)
def test_invalid_steps_are_refused(step: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ScriptedModel([step])


def test_client_for_a_scripted_provider_needs_a_script() -> None:
    scripted = EffectiveConfig(agent="a", provider="scripted", model="m")
    assert isinstance(client_for(scripted, script='[{"reply": "hi"}]'), ScriptedModel)
    with pytest.raises(ValueError, match="needs a script"):
        client_for(scripted)
