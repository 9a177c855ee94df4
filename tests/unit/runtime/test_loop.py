"""The agent loop with a scripted model: turns, limits, output schema, prompt, statuses."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentworkers.core.effective import Block, EffectiveConfig
from agentworkers.runtime.events import EventBus, EventKind
from agentworkers.runtime.loop import (
    AgentLoop,
    LoopClosed,
    OutputSchemaError,
    StepLimitExceeded,
    TokenBudgetExceeded,
    system_prompt,
)
from agentworkers.runtime.models import (
    Message,
    Params,
    Reply,
    ToolCall,
    ToolSpec,
)
from agentworkers.runtime.providers import ScriptedModel
from agentworkers.runtime.tools import Sandbox, Toolbox
from agentworkers.virtualagent import block_name

Status = tuple[str, str | None, str | None]


def config(**fields: Any) -> EffectiveConfig:
    return EffectiveConfig(
        agent="a", provider="scripted", model="m", tools=("read_file", "write_file"), **fields
    )


def make_loop(
    tmp_path: Path, script: list[dict[str, Any]], **fields: Any
) -> tuple[AgentLoop, EventBus, list[Status]]:
    statuses: list[Status] = []
    cfg = config(**fields)
    bus = EventBus("w1")
    box = Toolbox.for_config(cfg, Sandbox(str(tmp_path)).tools())
    loop = AgentLoop(cfg, ScriptedModel(script), box, bus, lambda *s: statuses.append(s))
    return loop, bus, statuses


def test_a_turn_runs_tool_calls_and_publishes_every_step(tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        {"tool": "write_file", "args": {"path": "a.txt", "content": "hi"}},
        {"thought": "now read it back"},
        {"tool": "read_file", "args": {"path": "a.txt"}},
        {"tool": "list_files"},  # offered to nobody: refused, and the loop goes on
        {"reply": "wrote and read hi"},
    ]
    loop, bus, statuses = make_loop(tmp_path, script)

    assert loop.run_turn("write hi") == "wrote and read hi"

    assert (tmp_path / "a.txt").read_text() == "hi"
    assert loop.output() == "wrote and read hi"
    assert loop.steps == 4
    assert statuses == [("running", None, None), ("idle", "wrote and read hi", None)]
    events = bus.recent()
    assert [(e.kind.value, e.summary()) for e in events] == [
        ("status_change", "running"),
        ("tool_call", 'write_file({"path":"a.txt","content":"hi"})'),
        ("tool_result", 'write_file -> {"path":"a.txt","bytes":2}'),
        ("thought", "now read it back"),
        ("tool_call", 'read_file({"path":"a.txt"})'),
        ("tool_result", 'read_file -> {"path":"a.txt","content":"hi","truncated":false}'),
        ("tool_call", "list_files({})"),
        ("tool_result", "list_files error: tool 'list_files' is not available to this run"),
        ("assistant_message", "wrote and read hi"),
        ("status_change", "idle"),
    ]
    assert events[1].payload["id"] == events[2].payload["id"] == "call_1"


def test_max_steps_counts_every_model_call_of_the_run(tmp_path: Path) -> None:
    script = [{"tool": "read_file", "args": {"path": "x"}}] * 5
    loop, bus, statuses = make_loop(tmp_path, script, max_steps=3)

    with pytest.raises(StepLimitExceeded, match=r"max_steps \(3\) exhausted"):
        loop.run_turn("loop forever")

    assert loop.steps == 3
    assert statuses[-1] == ("failed", None, "max_steps (3) exhausted")
    assert bus.recent()[-1].payload == {"status": "failed", "error": "max_steps (3) exhausted"}
    with pytest.raises(LoopClosed):
        loop.run_turn("again")


def test_steps_carry_over_from_turn_to_turn(tmp_path: Path) -> None:
    script = [{"reply": "one"}, {"reply": "two"}, {"reply": "three"}]
    loop, _, _ = make_loop(tmp_path, script, max_steps=2)
    assert loop.run_turn("a") == "one"
    assert loop.run_turn("b") == "two"
    with pytest.raises(StepLimitExceeded):
        loop.run_turn("c")


def test_token_budget_is_cumulative(tmp_path: Path) -> None:
    # Scripted usage is every input word plus the reply's: "go"+"ok" costs 2; the second
    # turn sends "go", "ok", "go on now" and gets "ok" back: 6 more.
    loop, _, statuses = make_loop(tmp_path, [{"reply": "ok"}] * 3, token_budget=7)

    assert loop.run_turn("go") == "ok"
    assert loop.tokens == 2
    with pytest.raises(TokenBudgetExceeded, match=r"token_budget \(7\) exceeded: 8 tokens used"):
        loop.run_turn("go on now")
    assert statuses[-1] == ("failed", None, "token_budget (7) exceeded: 8 tokens used")


def test_a_spent_budget_stops_before_the_next_call(tmp_path: Path) -> None:
    loop, _, _ = make_loop(tmp_path, [{"reply": "ok"}] * 2, token_budget=2)
    loop.run_turn("go")
    with pytest.raises(TokenBudgetExceeded, match=r"token_budget \(2\) spent: 2 tokens"):
        loop.run_turn("go")
    assert loop.steps == 1


SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}},
    "required": ["verdict"],
}


def test_output_schema_accepts_a_matching_answer(tmp_path: Path) -> None:
    answer = '```json\n{"verdict": "pass"}\n```'
    loop, _, statuses = make_loop(tmp_path, [{"reply": answer}], output_schema=SCHEMA)
    assert loop.run_turn("review") == answer
    assert statuses[-1] == ("idle", answer, None)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ('{"verdict": "maybe"}', r"at \$\.verdict: 'maybe' is not one of \['pass', 'fail'\]"),
        ("{}", r"at \$: 'verdict' is a required property"),
        ("looks good", r"output is not JSON \(at \$\)"),
    ],
)
def test_output_schema_rejects_naming_the_path(tmp_path: Path, answer: str, message: str) -> None:
    loop, _, statuses = make_loop(tmp_path, [{"reply": answer}], output_schema=SCHEMA)
    with pytest.raises(OutputSchemaError, match=message):
        loop.run_turn("review")
    assert statuses[-1][0] == "failed"
    assert loop.output() == ""


def test_an_invalid_output_schema_is_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        make_loop(tmp_path, [], output_schema={"type": "nonsense"})


class Recorder:
    """A model that remembers what it was sent."""

    def __init__(self) -> None:
        self.sent: list[list[Message]] = []
        self.tools: list[list[str]] = []

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        self.sent.append(messages)
        self.tools.append([t.name for t in tools])
        return Reply("ok", completion_tokens=1)


def test_the_system_prompt_renders_instructions_and_named_blocks(tmp_path: Path) -> None:
    cfg = config(
        instructions="You review code.",
        blocks=(Block(name=block_name("reviewer"), text="Be strict."),),
        disabled_tools=("write_file",),
    )
    model = Recorder()
    box = Toolbox.for_config(cfg, Sandbox(str(tmp_path)).tools())
    loop = AgentLoop(cfg, model, box, EventBus("w"))

    loop.run_turn("review this")
    loop.run_turn("and this")

    system, user = model.sent[0]
    assert system == Message(
        "system", "You review code.\n\n## virtual_agent.reviewer\n\nBe strict."
    )
    assert user == Message("user", "review this")
    assert [m.content for m in model.sent[1]][1:] == ["review this", "ok", "and this"]
    assert model.tools == [["read_file"], ["read_file"]]


def test_the_output_schema_is_in_the_prompt() -> None:
    prompt = system_prompt(config(output_schema=SCHEMA))
    assert prompt.startswith("## output_schema\n\nYour final answer must be only a JSON")
    assert '"required": [\n    "verdict"\n  ]' in prompt
    assert system_prompt(config()) == ""


def test_send_runs_turns_in_the_background_in_order(tmp_path: Path) -> None:
    script = [{"reply": "first"}, {"match": "status", "reply": "all good"}]
    loop, bus, statuses = make_loop(tmp_path, script)
    bus.subscribe(maxsize=1)  # a subscriber that never reads slows nothing down

    loop.send("start")
    loop.send("status?")
    assert loop.wait_idle(timeout=5)
    assert loop.output() == "all good"
    loop.finish(timeout=5)

    assert statuses == [
        ("running", None, None),
        ("idle", "first", None),
        ("running", None, None),
        ("idle", "all good", None),
        ("done", "all good", None),
    ]
    assert bus.drops > 0
    with pytest.raises(LoopClosed):
        loop.send("more")


def test_a_background_failure_is_reported_and_final(tmp_path: Path) -> None:
    loop, _, statuses = make_loop(tmp_path, [{"reply": "once"}])
    loop.send("a")
    loop.send("b")  # the script is exhausted: the model fails
    assert loop.wait_idle(timeout=5)
    assert statuses[-1] == ("failed", None, "scripted model: script exhausted after 1 steps")
    assert loop.output() == "once"
    with pytest.raises(LoopClosed, match="failed"):
        loop.send("c")
    loop.finish(timeout=5)
    assert statuses[-1][0] == "failed"


def test_a_failing_status_callback_does_not_stop_the_run(tmp_path: Path) -> None:
    def broken(status: str, output: str | None, error: str | None) -> None:
        raise RuntimeError("API server down")

    cfg = config()
    box = Toolbox.for_config(cfg, [])
    loop = AgentLoop(cfg, ScriptedModel([{"reply": "fine"}]), box, EventBus("w"), broken)
    assert loop.run_turn("go") == "fine"


class Blocking:
    """A model call that waits until released (bounded), then asks for a tool."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def complete(self, messages: list[Message], tools: list[ToolSpec], params: Params) -> Reply:
        self.entered.set()
        self.release.wait(5)
        return Reply(None, (ToolCall("c1", "read_file", {"path": "x"}),))


def test_close_stops_a_running_turn_without_reporting(tmp_path: Path) -> None:
    statuses: list[Status] = []
    cfg = config()
    model = Blocking()
    bus = EventBus("w")
    box = Toolbox.for_config(cfg, Sandbox(str(tmp_path)).tools())
    loop = AgentLoop(cfg, model, box, bus, lambda *s: statuses.append(s))

    loop.send("go")
    assert model.entered.wait(5)
    closer = threading.Thread(target=loop.close, kwargs={"timeout": 5})
    closer.start()
    model.release.set()
    closer.join(5)

    assert not closer.is_alive()
    assert loop.wait_idle(timeout=5)
    assert statuses == [("running", None, None)]
    assert EventKind.TOOL_CALL not in [e.kind for e in bus.recent()]
    with pytest.raises(LoopClosed):
        loop.send("more")
