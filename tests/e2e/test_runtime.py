"""Real runs: the runtime in worker pods (through the local pod runner), scripted models."""

from __future__ import annotations

import copy
import json
import os
import signal
from typing import Any

import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client, TreeLimitError, WorkerFinishedError
from tests.e2e.support import (
    CONFIG,
    PROFILES,
    Cluster,
    apply_example_skills,
    first_revision,
    process_with,
    reached,
    wait_until,
)
from tests.model_servers import Call, ModelServer, Turn

pytestmark = pytest.mark.usefixtures("operator", "podrunner")


def _agent(
    cluster: Cluster,
    namespace: str,
    script: list[dict[str, Any]],
    spec: dict[str, Any] | None = None,
    **limits: int,
) -> None:
    """The example agent, its profiles and skills, and a script its workers (children too) follow;
    `spec`: fields of the AgentConfig's spec to replace."""
    config = copy.deepcopy(CONFIG)
    config["spec"]["model"]["script"] = script
    config["spec"]["limits"].update(limits)
    config["spec"].update(spec or {})
    apply_example_skills(cluster, namespace)
    cluster.apply(namespace, *PROFILES, config)
    first_revision(cluster, namespace)


@pytest.fixture
def client(cluster: Cluster, namespace: str) -> Client:
    return Client(cluster.api, namespace)


def test_a_single_run_ends_done_with_its_output_and_events(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, [{"thought": "easy one"}, {"reply": "hello from the sandbox"}])
    client.spawn("solo", WorkerSpec(agent="planner", initial_message="say hello"))
    info = reached(client, "solo", "Done")
    assert info.status.output == "hello from the sandbox"
    kinds = [e.kind for e in info.status.recent_events]
    assert kinds[0] == "status_change" and "thought" in kinds and "assistant_message" in kinds
    assert [e.index for e in info.status.recent_events] == list(range(1, len(kinds) + 1))
    wait_until(
        "the pod to succeed",
        lambda: (
            cluster.kubectl_json("get", "pod", "solo", "-n", namespace)["status"]["phase"]
            == "Succeeded"
        ),
    )
    # Every event is a JSON line on the pod's stdout: `kubectl logs` shows the run.
    logs = cluster.kubectl("logs", "solo", "-n", namespace).stdout.splitlines()
    lines = [json.loads(line) for line in logs if line.startswith("{")]
    assert {line["kind"] for line in lines} >= {"status_change", "thought", "assistant_message"}
    assert all(line["worker"] == "solo" for line in lines)
    assert [line["index"] for line in lines] == list(range(1, len(lines) + 1))
    result = client.collect("solo", timeout=10)
    assert (result.phase, result.output) == ("Done", "hello from the sandbox")


def test_a_query_round_trip_through_idle(cluster: Cluster, namespace: str, client: Client) -> None:
    _agent(cluster, namespace, [{"match": "ping", "reply": "pong"}, {"reply": "ready"}])
    client.spawn("chat", WorkerSpec(agent="planner", initial_message="start", interactive=True))
    assert reached(client, "chat", "Idle").status.output == "ready"
    client.query("chat", "ping please")
    info = wait_until("the answer", lambda: (i := client.get("chat")).status.output == "pong" and i)
    assert info.status.queries_delivered == 1 and info.status.phase == "Idle"
    result = client.collect("chat", timeout=10)
    assert (result.phase, result.output) == ("Idle", "pong")


def test_a_planner_spawns_a_profiled_child_and_collects_it(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    # Children follow the agent's script; the planner has its own.
    _agent(cluster, namespace, [{"match": "review", "reply": '{"verdict": "approve"}'}])
    planner_script = [
        {
            "tool": "spawn_worker",
            "args": {"name": "reviewer-1", "message": "review this diff", "profile": "reviewer"},
        },
        {"tool": "collect_worker", "args": {"name": "reviewer-1", "timeout": 60}},
        {"reply": "the reviewer approved"},
    ]
    client.spawn("boss", WorkerSpec(agent="planner", initial_message="plan", script=planner_script))
    info = reached(client, "boss", "Done", timeout=90)
    assert info.status.output == "the reviewer approved"
    results = [e.summary for e in info.status.recent_events if e.kind == "tool_result"]
    assert any('"verdict": "approve"' in r or "approve" in r for r in results), results
    # collect returns once the child settles: Idle with its answer, or Done.
    assert any(
        '"error":""' in r and ('"phase":"Idle"' in r or '"phase":"Done"' in r) for r in results
    )


def test_a_profiled_child_cannot_spawn_a_profiled_grandchild(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    child_script = [
        {
            "tool": "spawn_worker",
            "args": {"name": "grandchild", "message": "go", "profile": "translator"},
        },
        {"reply": "tried"},
    ]
    _agent(cluster, namespace, child_script)
    planner_script = [
        {
            "tool": "spawn_worker",
            "args": {"name": "kid", "message": "research", "profile": "researcher"},
        },
        {"reply": "ok"},
    ]
    client.spawn("top", WorkerSpec(agent="planner", initial_message="plan", script=planner_script))
    reached(client, "top", "Done", timeout=90)
    kid = reached(client, "kid", "Done", timeout=90)
    assert kid.status.output == "tried"
    refusals = [e.summary for e in kid.status.recent_events if e.kind == "tool_result"]
    assert any("ProfileRecursion" in r for r in refusals), refusals
    assert (
        cluster.kubectl("get", "worker", "grandchild", "-n", namespace, check=False).returncode != 0
    )


def test_hidden_tools_sandbox_escapes_and_limits(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    script = [
        {"tool": "write_file", "args": {"path": "../escape.txt", "content": "x"}},
        {"tool": "read_file", "args": {"path": "/etc/passwd"}},
        {"tool": "write_file", "args": {"path": "notes.txt", "content": "inside"}},
        {"tool": "read_file", "args": {"path": "notes.txt"}},
        {"reply": "four tools later"},
    ]
    _agent(cluster, namespace, script, maxSteps=3)
    client.spawn("limited", WorkerSpec(agent="planner", initial_message="go"))
    info = reached(client, "limited", "Failed")
    assert "max_steps (3) exhausted" in (info.status.error or "")
    results = [e.summary for e in info.status.recent_events if e.kind == "tool_result"]
    assert any("escape" in r and "outside" in r.lower() for r in results), results
    assert any("/etc/passwd" in r for r in results), results

    # A profile that disables write_file: the tool is not there for the child.
    hidden = [
        {"tool": "write_file", "args": {"path": "a.txt", "content": "x"}},
        {"reply": '{"verdict": "approve"}'},
    ]
    client.spawn(
        "p",
        WorkerSpec(
            agent="planner", initial_message="x", interactive=True, script=[{"reply": "idle"}]
        ),
    )
    reached(client, "p", "Idle")
    client.spawn(
        "rev",
        WorkerSpec(
            agent="planner", parent="p", profile="reviewer", initial_message="review", script=hidden
        ),
    )
    info = reached(client, "rev", "Done")
    results = [e.summary for e in info.status.recent_events if e.kind == "tool_result"]
    assert any("not available" in r for r in results), results


def test_an_output_that_fails_its_schema_fails_the_run(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, [{"reply": "idle"}])
    client.spawn("p", WorkerSpec(agent="planner", initial_message="x", interactive=True))
    reached(client, "p", "Idle")
    client.spawn(
        "rev",
        WorkerSpec(
            agent="planner",
            parent="p",
            profile="reviewer",
            initial_message="review",
            script=[{"reply": '{"verdict": "maybe"}'}],
        ),
    )
    info = reached(client, "rev", "Failed")
    assert "verdict" in (info.status.error or "")


def test_a_kill_mid_run_stops_the_process_and_collect_returns_the_reason(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, [{"reply": "waiting for more"}])
    client.spawn("longrun", WorkerSpec(agent="planner", initial_message="start", interactive=True))
    reached(client, "longrun", "Idle")
    client.kill("longrun", reason="the plan changed", by="planner")
    result = client.collect("longrun", timeout=30)
    assert (result.phase, result.error) == ("Killed", "the plan changed")


def test_a_runtime_killed_by_a_signal_fails_its_run_loud_and_collect_says_why(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    """Its process SIGKILLed (an OOM kill, say): the pod fails as a kubelet reports it,
    the run is Failed with what its container's end says and one Event, never a silent
    hang, and whoever collects it (its parent) gets that reason."""
    _agent(cluster, namespace, [{"reply": "waiting for more"}])
    client.spawn("victim", WorkerSpec(agent="planner", initial_message="start", interactive=True))
    reached(client, "victim", "Idle")
    pid = process_with(
        {"AGENTWORKERS_WORKER": "victim", "AGENTWORKERS_NAMESPACE": namespace}, "run"
    )
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    info = reached(client, "victim", "Failed", timeout=30)
    said = "container agent exited 137 (SIGKILL): Error"
    assert info.status.error == said
    events = cluster.kubectl_json(
        "get", "events", "-n", namespace,
        "--field-selector", "involvedObject.name=victim,reason=PodFailed",
    )["items"]  # fmt: skip
    assert [(e["type"], e["message"]) for e in events] == [("Warning", said)]
    result = client.collect("victim", timeout=10)
    assert (result.phase, result.error) == ("Failed", said)


def _plan_writer(body: dict[str, Any]) -> Turn:
    """A model that writes the plan with a tool, then says so (either protocol)."""
    wire = json.dumps(body["messages"])
    if '"role": "tool"' in wire or '"tool_result"' in wire:
        return Turn(text="wrote the plan", usage=(30, 12))
    write = Call("write_file", '{"path": "plan.md", "content": "1. ship"}', id="call_1")
    return Turn(calls=(write,), thinking="a plan needs a file", usage=(20, 10))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_run_against_a_vendor_endpoint_with_its_key_from_a_secret(
    provider: str, cluster: Cluster, namespace: str, client: Client
) -> None:
    """The runtime in its pod, through the vendor's SDK, streaming, against a loopback
    server that speaks the vendor's protocol: a tool call, its result, the answer."""
    with ModelServer(_plan_writer) as server:
        cluster.kubectl(
            "create", "secret", "generic", "model-key", "-n", namespace,
            "--from-literal=apiKey=sk-test-123",
        )  # fmt: skip
        config = copy.deepcopy(CONFIG)
        config["spec"]["model"].update(
            provider=provider,
            baseURL=server.openai_url if provider == "openai" else server.anthropic_url,
            apiKeySecret="model-key",
        )
        if provider == "anthropic":
            config["spec"]["model"]["reasoningAPI"] = "enabled"
        cluster.apply(namespace, config)
        first_revision(cluster, namespace)
        client.spawn("real", WorkerSpec(agent="planner", initial_message="write the plan"))
        info = reached(client, "real", "Done")
        first, second = server.seen
    assert info.status.output == "wrote the plan"
    assert info.status.tokens_used is not None
    assert (info.status.tokens_used.total, info.status.tokens_used.estimated) == (72, 0)
    assert "thought" in [e.kind for e in info.status.recent_events]
    key = first.headers.get("authorization", "") + first.headers.get("x-api-key", "")
    assert "sk-test-123" in key
    assert first.body["model"] == "demo-large" and first.body["stream"] is True
    assert first.body["max_tokens"] == 4096
    if provider == "openai":
        offered = {t["function"]["name"] for t in first.body["tools"]}
        tool_reply = next(m for m in second.body["messages"] if m["role"] == "tool")
        assert tool_reply["tool_call_id"] == "call_1" and "plan.md" in tool_reply["content"]
    else:
        offered = {t["name"] for t in first.body["tools"]}
        # reasoningAPI enabled, effort medium (the example's): half of maxTokens.
        assert first.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
        thinking, use = second.body["messages"][1]["content"]
        assert (thinking["type"], use["type"], use["id"]) == ("thinking", "tool_use", "call_1")
        result = second.body["messages"][2]["content"][0]
        assert result["tool_use_id"] == "call_1" and "plan.md" in result["content"]
    assert "write_file" in offered and "spawn_worker" in offered


def _events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return list(
        cluster.kubectl_json(
            "get", "events", "-n", namespace, "--field-selector", f"reason={reason}"
        )["items"]
    )


def test_an_idle_run_past_its_idle_timeout_ends_and_frees_its_pod(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, [{"reply": "ready"}])
    client.spawn(
        "chat",
        WorkerSpec(
            agent="planner", initial_message="start", interactive=True, idle_timeout_seconds=3
        ),
    )
    assert reached(client, "chat", "Idle").status.idle_since
    info = reached(client, "chat", "Done", timeout=30)
    assert info.status.output == "ready"
    ready = next(c for c in info.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "IdleTimeout")
    wait_until(
        "the pod to go",
        lambda: cluster.kubectl("get", "pod", "chat", "-n", namespace, check=False).returncode,
    )
    (event,) = _events(cluster, namespace, "IdleTimeout")
    assert "Idle for 3 s (idleTimeoutSeconds)" in event["message"]
    assert not _events(cluster, namespace, "Completed")  # one Event for the end, not two


def test_a_finished_run_is_deleted_after_its_ttl(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    _agent(cluster, namespace, [{"reply": "done"}])
    client.spawn(
        "brief",
        WorkerSpec(agent="planner", initial_message="go", ttl_seconds_after_finished=2),
    )
    wait_until(
        "the finished run to be deleted",
        lambda: cluster.kubectl("get", "worker", "brief", "-n", namespace, check=False).returncode,
        timeout=60,
    )
    (event,) = _events(cluster, namespace, "TTLExpired")
    assert event["involvedObject"]["name"] == "brief"
    assert "finished 2 s ago (ttlSecondsAfterFinished): deleted" in event["message"]
    assert [e["involvedObject"]["name"] for e in _events(cluster, namespace, "Completed")] == [
        "brief"
    ]


def test_a_tree_that_spends_its_token_budget_is_stopped_below_its_root(
    cluster: Cluster, namespace: str, client: Client
) -> None:
    spec = {
        # Every model call reads the instructions: 300 tokens of the scripted model's count.
        "instructions": "ponder " * 300,
        "limits": {"maxSteps": 50},  # no budget of a run's own: the tree's is the one
        "tree": {"tokenBudget": 1500},
    }
    _agent(cluster, namespace, [{"match": ".", "reply": "noted"}], spec)
    client.spawn("root", WorkerSpec(agent="planner", initial_message="lead", interactive=True))
    reached(client, "root", "Idle")
    for name in ("a", "b"):
        client.spawn(
            name, WorkerSpec(agent="planner", parent="root", initial_message="go", interactive=True)
        )
    for name in ("a", "b"):
        used = reached(client, name, "Idle").status.tokens_used
        assert used is not None and used.prompt > 300 and used.completion == 1  # "noted"
    # Each query's call reads the whole conversation again: the tree soon runs out.
    for i in range(6):
        try:
            client.query("a", f"more {i}")
        except WorkerFinishedError:
            break  # killed meanwhile
        wait_until(
            "a's answer or its end",
            lambda n=i + 1: (
                (s := client.get("a").status).phase == "Killed" or s.queries_delivered == n
            ),
        )
    for name in ("a", "b"):
        status = reached(client, name, "Killed").status
        assert status.error is not None
        assert status.error.startswith("TreeBudgetExhausted: the tree used "), status.error
        assert status.error.endswith(" of its 1500 tokens")
    killed = sorted(
        e["involvedObject"]["name"] for e in _events(cluster, namespace, "TreeBudgetExhausted")
    )
    assert killed == ["a", "b", "root"]  # one Event each, and the root told once
    tree = client.get("root").status.tree
    assert tree is not None and tree.budget_exhausted and tree.tokens_used >= 1500
    assert client.get("root").status.phase == "Idle"  # the root itself goes on
    with pytest.raises(TreeLimitError) as refused:
        client.spawn("c", WorkerSpec(agent="planner", parent="root", initial_message="late"))
    assert refused.value.reason == "TreeBudget"
    assert "has 0 of its tokenBudget 1500 tokens left" in str(refused.value)
