"""One trace per spawn tree, read back from a real Jaeger (built from Go modules) through
its query API, as a user's trace viewer reads it.

A planner spawns two profiled children: `a` calls tools (one refused by its profile, one
that works) and finishes; `b` sits in a long command until the planner kills it. The
operator (with --otlp-endpoint) and every run (AgentConfig spec.tracing) send spans; the
trace holds the root's run span, a spawn_worker span per child with the child's run span
below it, the operator's admission, binding and pod spans beside it, model and tool spans
with their token counts, and `b`'s run span ending with its kill reason. The tokens in
the trace add up to the tree's `status.tree.tokensUsed`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentworkers.api import WorkerSpec
from agentworkers.client import Client, UnknownWorkerError, WorkerInfo
from tests.e2e.jaeger import Jaeger
from tests.e2e.support import (
    Cluster,
    Operator,
    first_revision,
    free_port,
    pod_runner,
    wait_until,
    worker,
)

CHILD_SCRIPT = [
    # `a`'s profile hides run_command (the call comes back as an error); `b` sleeps in it.
    {"tool": "run_command", "args": {"command": ["sleep", "300"]}},
    {"tool": "write_file", "args": {"path": "note.txt", "content": "a note"}},
    {"reply": "done"},
]
ROOT_SCRIPT = [
    {"tool": "spawn_worker", "args": {"name": "a", "message": "write a note", "profile": "writer"}},
    {"tool": "spawn_worker", "args": {"name": "b", "message": "wait", "profile": "sleeper"}},
    {"reply": "spawned a and b"},
    # The query's turn.
    {"tool": "kill_worker", "args": {"name": "b", "reason": "not needed"}},
    {"reply": "b stopped"},
]


def agent(endpoint: str | None, name: str = "planner") -> dict[str, Any]:
    """The agent, tracing to `endpoint` (None: not tracing)."""
    tracing = {"endpoint": endpoint, "recordContent": True, "maxContentBytes": 256}
    return {
        "apiVersion": "agentworkers.io/v1alpha1",
        "kind": "AgentConfig",
        "metadata": {"name": name},
        "spec": {
            "model": {"provider": "scripted", "model": "demo", "script": CHILD_SCRIPT},
            "tools": ["write_file", "run_command", "spawn_worker", "kill_worker"],
            **({"tracing": tracing} if endpoint else {}),
            "virtualAgents": {
                "profiles": [
                    {"key": "writer", "overlay": {"disabledTools": ["run_command"]}},
                    {"key": "sleeper", "overlay": {"disabledTools": ["write_file"]}},
                ]
            },
        },
    }


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    with Jaeger.start(tmp_path_factory.mktemp("jaeger")) as running:
        yield running


@pytest.fixture
def traced(
    cluster: Cluster, jaeger: Jaeger, tmp_path: Path
) -> Iterator[tuple[str, Operator, Path]]:
    """A namespace of its own, its operator sending spans to Jaeger, its pod runner."""
    prefix = f"tr{uuid.uuid4().hex[:5]}"
    namespace = f"{prefix}-tree"
    core = kubernetes.client.CoreV1Api(cluster.api)
    (tmp_path / "operator").mkdir()
    with Operator.of_own(
        cluster,
        tmp_path / "operator",
        prefix,
        f"--otlp-endpoint={jaeger.otlp}",
        "--log-format=json",
    ) as operator:
        core.create_namespace({"metadata": {"name": namespace}})
        try:
            wait_until(
                "the namespace's default service account",
                lambda: core.list_namespaced_service_account(namespace).items,
                timeout=30,
            )
            with pod_runner(cluster, prefix, tmp_path / "pods"):
                yield namespace, operator, tmp_path / "pods"
        finally:
            core.delete_namespace(namespace)


def tag(span: dict[str, Any], key: str) -> Any:
    return next((t["value"] for t in span["tags"] if t["key"] == key), None)


def worker_of(found: dict[str, Any], span: dict[str, Any]) -> str | None:
    process = found["processes"][span["processID"]]
    return tag(span, "agentworkers.worker") or tag(process, "agentworkers.worker")


def parent_id(span: dict[str, Any]) -> str | None:
    refs = [r for r in span["references"] if r["refType"] == "CHILD_OF"]
    return refs[0]["spanID"] if refs else None


def info(client: Client, name: str) -> WorkerInfo | None:
    try:
        return client.get(name)
    except UnknownWorkerError:
        return None  # not spawned yet


def phase(client: Client, name: str) -> str | None:
    found = info(client, name)
    return found.phase if found else None


def run_the_tree(client: Client) -> tuple[str, int]:
    """The planner's tree, run to its end; its trace id and its tokens (status.tree)."""
    client.spawn(
        "lead",
        WorkerSpec(agent="planner", initial_message="plan", interactive=True, script=ROOT_SCRIPT),
    )
    wait_until("a to finish", lambda: phase(client, "a") == "Done", timeout=120)
    wait_until(
        "b to sit in its command",
        lambda: "run_command" in (((b := info(client, "b")) and b.status.last_event) or ""),
        timeout=120,
    )
    wait_until("lead to wait Idle", lambda: phase(client, "lead") == "Idle", timeout=60)
    client.query("lead", "stop b")
    wait_until("b to be killed", lambda: phase(client, "b") == "Killed", timeout=60)
    wait_until("lead to answer", lambda: client.get("lead").status.output == "b stopped")

    def tree_settled() -> int | None:
        runs = [client.get(n) for n in ("lead", "a", "b")]
        total = sum(r.status.tokens_used.total for r in runs if r.status.tokens_used)
        tree = client.get("lead").status.tree
        return total if tree is not None and tree.tokens_used == total else None

    tokens = wait_until("the tree's token sum", tree_settled, timeout=60)
    trace_id = client.tree("lead").trace_id
    assert trace_id is not None and len(trace_id) == 32
    client.kill("lead", "the test is over")  # its run span ends too
    wait_until("lead to be killed", lambda: phase(client, "lead") == "Killed", timeout=60)
    return trace_id, tokens


def test_a_spawn_tree_is_one_trace_in_jaeger(
    cluster: Cluster, jaeger: Jaeger, traced: tuple[str, Operator, Path]
) -> None:
    namespace, _, _ = traced
    client = Client(cluster.api, namespace)
    cluster.apply(namespace, agent(jaeger.otlp))
    first_revision(cluster, namespace)
    trace_id, tokens = run_the_tree(client)

    names: set[str] = set()

    def whole() -> dict[str, Any] | None:
        found = jaeger.trace(trace_id)
        names.clear()
        if found:
            names.update(s["operationName"] for s in found["spans"])
        return found if {"run lead", "run a", "run b"} <= names else None

    try:
        found = wait_until("the trace in jaeger", whole, timeout=60)
    except AssertionError as e:
        # What a user would look at next: the spans that did arrive, and where each run
        # says its trace is.
        runs = {w: client.tree(w).trace_id for w in ("lead", "a", "b")}
        raise AssertionError(f"{e}: spans {sorted(names)}; each run's trace {runs}") from None
    spans = found["spans"]
    by_id = {s["spanID"]: s for s in spans}
    runs = {
        s["operationName"].split()[1]: s for s in spans if s["operationName"].startswith("run ")
    }

    # One trace: the root's run span is its root; each child's run span sits below the
    # root's spawn_worker span that made it, in the root's turn.
    assert parent_id(runs["lead"]) is None
    for child in ("a", "b"):
        spawn = by_id[parent_id(runs[child])]
        assert spawn["operationName"] == "execute_tool spawn_worker"
        assert worker_of(found, spawn) == "lead"
        assert f'"name": "{child}"' in tag(spawn, "gen_ai.tool.call.arguments")  # opted in
        turn = by_id[parent_id(spawn)]
        assert turn["operationName"] == "invoke_agent planner"
        assert parent_id(turn) == runs["lead"]["spanID"]
        # The operator's part of the spawn, under the same spawn_worker span.
        operator = {
            s["operationName"]
            for s in spans
            if parent_id(s) == spawn["spanID"] and worker_of(found, s) == child
        }
        assert {"admission", "bind profile", "create pod"} <= operator
        assert tag(runs[child], "agentworkers.profile") == {"a": "writer", "b": "sleeper"}[child]
    assert {"admission", "create pod"} <= {
        s["operationName"] for s in spans if parent_id(s) == runs["lead"]["spanID"]
    }

    # Model calls, with their tokens; the tree's total in the trace is the operator's sum.
    chats = [s for s in spans if tag(s, "gen_ai.operation.name") == "chat"]
    assert {worker_of(found, s) for s in chats} == {"lead", "a", "b"}
    assert all(tag(s, "gen_ai.request.model") == "demo" for s in chats)
    in_trace = sum(
        tag(s, "gen_ai.usage.input_tokens") + tag(s, "gen_ai.usage.output_tokens") for s in chats
    )
    assert in_trace == tokens

    # Tool calls: `a`'s refused run_command failed, its write_file did not.
    tools = {
        (worker_of(found, s), tag(s, "gen_ai.tool.name")): s
        for s in spans
        if tag(s, "gen_ai.operation.name") == "execute_tool"
    }
    assert tag(tools["a", "run_command"], "error.type") == "tool_error"
    assert tag(tools["a", "write_file"], "error") is None
    assert tag(tools["a", "write_file"], "gen_ai.tool.call.result") == (
        '{"path": "note.txt", "bytes": 6}'
    )

    # How each run ended, as its run span's status.
    assert tag(runs["b"], "otel.status_code") == "ERROR"
    assert tag(runs["b"], "otel.status_description") == "Killed: not needed"
    assert tag(runs["a"], "otel.status_code") == "OK"
    assert tag(runs["lead"], "otel.status_description") == "Killed: the test is over"
    # b's command was cut short by the kill, and says so.
    assert tag(tools["b", "run_command"], "otel.status_description") == (
        "cut short: the run ended (Killed)"
    )


def test_a_collector_that_is_down_costs_a_run_only_its_spans(
    cluster: Cluster, traced: tuple[str, Operator, Path]
) -> None:
    """Spans to a port where nothing listens: the run does its work and ends Done as
    usual, and says how many spans it dropped."""
    namespace, _, _ = traced
    client = Client(cluster.api, namespace)
    cluster.apply(namespace, agent(f"http://127.0.0.1:{free_port()}"), agent(None, "plain"))
    first_revision(cluster, namespace)
    first_revision(cluster, namespace, "plain")
    took = {}
    for name, agent_name in (("solo", "planner"), ("untraced", "plain")):
        started = time.monotonic()
        client.spawn(
            name,
            WorkerSpec(
                agent=agent_name,
                initial_message="write",
                script=[
                    {"tool": "write_file", "args": {"path": "n.txt", "content": "x"}},
                    {"reply": "written"},
                ],
            ),
        )
        wait_until(f"{name} to finish", lambda n=name: phase(client, n) == "Done", timeout=120)  # type: ignore[misc]
        took[name] = time.monotonic() - started
        assert client.get(name).status.output == "written"
    notices = wait_until(
        "its dropped spans to be told",
        lambda: [
            e.summary
            for e in client.get("solo").status.recent_events
            if "spans did not" in e.summary
        ],
        timeout=30,
    )
    # run, turn, two model calls, one tool call: none reached a collector.
    assert "tracing: 5 spans did not reach the collector" in notices[0]
    # A figure for the record, not a claim (bench/ makes those): spawn to Done.
    print(f"spawn to Done: collector down {took['solo']:.1f}s, no tracing {took['untraced']:.1f}s")


def test_a_child_may_not_claim_another_tree_s_trace(
    cluster: Cluster, traced: tuple[str, Operator, Path]
) -> None:
    namespace, _, _ = traced
    cluster.apply(namespace, agent("http://127.0.0.1:9"))
    first_revision(cluster, namespace)
    cluster.apply(namespace, worker("lead", initialMessage="x"))
    foreign = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    refused = cluster.apply(
        namespace, worker("kid", parent="lead", traceparent=foreign), check=False
    )
    assert refused.returncode != 0
    assert (
        "spec.traceparent: names trace 4bf92f3577b34da6a3ce929d0e0e4736, but a child runs in "
        "its parent's trace ('lead': "
    ) in refused.stderr
    zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
    refused = cluster.apply(namespace, worker("odd", traceparent=zeros), check=False)
    assert refused.returncode != 0
    assert "spec.traceparent" in refused.stderr and "neither id all zeros" in refused.stderr
    # The parent's own trace is the child's: admitted.
    client = Client(cluster.api, namespace)
    own = client.tree("lead").trace_id
    cluster.apply(
        namespace, worker("kid", parent="lead", traceparent=f"00-{own}-1111111111111111-01")
    )
    # A child the client spawns goes under its parent's run span, as spawn_worker's would.
    spawned = client.spawn("kid2", WorkerSpec(agent="planner", parent="lead"))
    assert spawned.spec.traceparent is not None
    assert spawned.spec.traceparent.split("-")[1] == own
