"""The CLI on a real API server: every verb as a subprocess, its exit codes and its JSON.

Pods run nothing yet, so a worker reaches Running and stays there; where a test needs what
the in-pod runtime would report (events, Idle with an output), it writes the Worker's
status the way the runtime will.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from typing import Any

import kubernetes
import pytest
import yaml

from agentworkers.api import GROUP, VERSION, WorkerSpec
from agentworkers.client import AsyncClient, Client, CollectTimeoutError
from tests.e2e.support import PROFILES, Cluster, wait_until

pytestmark = pytest.mark.usefixtures("operator", "planner")


def cli(
    cluster: Cluster, namespace: str, *args: str, stdin: str | None = None, code: int = 0
) -> subprocess.CompletedProcess[str]:
    """`agentworkers -n NAMESPACE ARGS...` as a user runs it; expects exit `code`."""
    result = subprocess.run(
        [sys.executable, "-m", "agentworkers.cli", "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=180,
        check=False,
    )
    assert result.returncode == code, (
        f"agentworkers {' '.join(args)}: exit {result.returncode}, not {code}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def cli_json(cluster: Cluster, namespace: str, *args: str) -> Any:
    return json.loads(cli(cluster, namespace, *args, "-o", "json").stdout)


def report(cluster: Cluster, namespace: str, name: str, **status: Any) -> None:
    """Write the Worker's status as the in-pod runtime reports it."""
    kubernetes.client.CustomObjectsApi(cluster.api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "workers", name, {"status": status}
    )


def ring(*indices: int, kind: str = "assistant_message") -> list[dict[str, Any]]:
    return [
        {"index": i, "kind": kind, "time": f"2030-01-01T00:00:{i:02d}Z", "summary": f"step {i}"}
        for i in indices
    ]


def test_a_worker_from_spawn_to_collect(cluster: Cluster, namespace: str) -> None:
    spawned = cli(
        cluster,
        namespace,
        "spawn",
        "w1",
        "--agent",
        "planner",
        "-m",
        "hello",
        "--wait",
        "--timeout",
        "60",
        "-o",
        "json",
    )
    assert json.loads(spawned.stdout)["status"]["phase"] == "Running"
    assert "spawn w1: " in spawned.stderr  # progress, on stderr: stdout stays parseable
    # No --agent: the namespace's only AgentConfig.
    assert (
        cli(cluster, namespace, "spawn", "w2", "--wait").stdout == "worker/w2 spawned (Running)\n"
    )

    listed = cli_json(cluster, namespace, "list")["items"]
    assert [w["name"] for w in listed] == ["w1", "w2"]  # start time, then name
    assert listed[0]["spec"]["initialMessage"] == "hello"
    table = cli(cluster, namespace, "list").stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "PHASE", "KIND", "AGENT", "PROFILE", "PARENT"]
    assert [row.split()[:4] for row in table[1:]] == [
        ["w1", "Running", "static", "planner"],
        ["w2", "Running", "static", "planner"],
    ]

    assert cli(cluster, namespace, "query", "w1", "more please").stdout == (
        "worker/w1 queried (query 1)\n"
    )
    cli(cluster, namespace, "query", "w1", "-", stdin="from stdin")

    report(cluster, namespace, "w1", recentEvents=ring(1, 2, 3), eventIndex=3, lastEvent="step 3")
    inspected = cli_json(cluster, namespace, "inspect", "w1", "--since", "1")
    assert inspected["worker"]["spec"]["queries"] == ["more please", "from stdin"]
    assert [e["index"] for e in inspected["events"]] == [2, 3]
    assert (inspected["cursor"], inspected["missed"]) == (3, 0)
    described = cli(cluster, namespace, "inspect", "w1").stdout
    assert "Queries:" in described and "next --since 3" in described and "step 2" in described

    def indices(lines: str) -> list[tuple[str, int]]:
        return [(e["worker"], e["index"]) for e in map(json.loads, lines.splitlines())]

    assert indices(cli(cluster, namespace, "events", "w1", "-o", "json").stdout) == [
        ("w1", 1),
        ("w1", 2),
        ("w1", 3),
    ]
    assert indices(cli(cluster, namespace, "events", "--since", "2", "-o", "json").stdout) == [
        ("w1", 3)
    ]

    # Following all workers: what is there, then what comes, each (worker, index) once.
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentworkers.cli",
            "-n",
            namespace,
            "events",
            "--follow",
            "--timeout",
            "60",
            "-o",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster.env,
    )
    try:
        assert follow.stdout is not None
        seen = [json.loads(follow.stdout.readline()) for _ in range(3)]
        report(cluster, namespace, "w2", recentEvents=ring(1), eventIndex=1)
        # The ring again with one more: the three already seen must not come twice.
        report(cluster, namespace, "w1", recentEvents=ring(1, 2, 3, 4), eventIndex=4)
        seen += [json.loads(follow.stdout.readline()) for _ in range(2)]
    finally:
        follow.terminate()
        follow.wait(timeout=30)
    assert sorted((e["worker"], e["index"]) for e in seen) == [
        ("w1", 1),
        ("w1", 2),
        ("w1", 3),
        ("w1", 4),
        ("w2", 1),
    ]

    killed = cli(cluster, namespace, "kill", "w1", "--reason", "enough for today", "--by", "alice")
    assert killed.stdout == "worker/w1 killed: enough for today\n"
    collected = cli(cluster, namespace, "collect", "w1", "--timeout", "60", "-o", "json")
    assert json.loads(collected.stdout) == {
        "name": "w1",
        "phase": "Killed",
        "output": "",
        "error": "enough for today",
        "deleted": True,
        "killedChildren": [],  # it had none
        "namespace": namespace,
    }
    assert "collect w1: " in collected.stderr
    cli(cluster, namespace, "inspect", "w1", code=3)  # collected: removed

    report(cluster, namespace, "w2", phase="Idle", output="all done\nsee report.md")
    described = cli(cluster, namespace, "collect", "w2").stdout
    assert "Phase:   Idle" in described and "  all done\n  see report.md\n" in described
    assert cli_json(cluster, namespace, "list") == {"apiVersion": "v1", "kind": "List", "items": []}
    empty = cli(cluster, namespace, "list")
    assert (empty.stdout, empty.stderr) == ("", f"No workers found in namespace {namespace}.\n")


def test_errors_have_exit_codes_and_no_traceback(cluster: Cluster, namespace: str) -> None:
    for verb in (
        ("inspect", "nobody"),
        ("collect", "nobody", "--timeout", "5"),
        ("kill", "nobody"),
        ("query", "nobody", "hello?"),
        ("explain", "nobody"),
        ("events", "nobody"),
    ):
        refused = cli(cluster, namespace, *verb, code=3)
        assert refused.stderr.startswith("error: UnknownWorker: unknown worker 'nobody'"), verb

    cli(cluster, namespace, "spawn", "busy", "-m", "think for a long time", "--wait")
    conflict = cli(cluster, namespace, "spawn", "busy", code=4)
    assert "WorkerNameConflict" in conflict.stderr

    timeout = cli(cluster, namespace, "collect", "busy", "--timeout", "2", code=5)
    assert "CollectTimeout: worker 'busy' still Running after 2s" in timeout.stderr
    assert cli_json(cluster, namespace, "inspect", "busy")["worker"]["status"]["phase"] == "Running"
    # A suspended worker never starts: spawn --wait times out the same way.
    cli(cluster, namespace, "spawn", "held", "--suspend", "--wait", "--timeout", "2", code=5)

    cli(cluster, namespace, "kill", "busy", "--reason", "stop")
    wait_until(
        "busy to be Killed",
        lambda: (
            cli_json(cluster, namespace, "inspect", "busy")["worker"]["status"].get("phase")
            == "Killed"
        ),
    )
    assert "WorkerFinished" in cli(cluster, namespace, "query", "busy", "too late", code=6).stderr

    cli(cluster, namespace, "spawn", code=2)  # no name
    cli(cluster, namespace, "inspect", "busy", "--since", "-1", code=2)
    cli(cluster, namespace, "list", "-o", "xml", code=2)
    cli(cluster, namespace, "spawn", "bad", "--wait", "Sleeping", code=2)
    cli(cluster, namespace, "profiles", "show", "nope", code=3)
    cli(cluster, namespace, "revisions", "--agent", "ghost", code=3)
    cli(cluster, namespace, "profiles", "diff", "1", "7", code=3)


def test_explain_names_the_layer_behind_each_field(cluster: Cluster, namespace: str) -> None:
    # A profile asking for more than the agent allows: the agent's limits clamp it.
    greedy = copy.deepcopy(PROFILES[1])
    greedy["metadata"]["name"] = "planner-greedy"
    greedy["spec"].update(
        key="greedy", label="Greedy", overlay={"maxSteps": 500, "maxTokens": 8192}
    )
    cluster.apply(namespace, greedy)
    wait_until(
        "the greedy profile in the active revision",
        lambda: (
            "greedy"
            in {p["profile"]["key"] for p in cli_json(cluster, namespace, "profiles")["profiles"]}
        ),
    )
    cli(cluster, namespace, "spawn", "parent", "-m", "plan", "--wait")
    cli(
        cluster,
        namespace,
        "spawn",
        "child",
        "--parent",
        "parent",
        "--profile",
        "reviewer",
        "--wait",
    )
    cli(
        cluster, namespace, "spawn", "hungry", "--parent", "parent", "--profile", "greedy", "--wait"
    )

    def layers(name: str) -> tuple[dict[str, Any], dict[str, tuple[Any, str]]]:
        found = cli_json(cluster, namespace, "explain", name)
        return found, {f["field"]: (f["value"], f["layer"]) for f in found["fields"]}

    found, child = layers("child")
    assert (found["agent"], found["profile"]) == ("planner", "reviewer")
    assert found["config"] == "AgentConfigRevision/planner-r2"  # what the parent froze
    assert child["model"] == ("demo-small", "profile")
    assert child["temperature"] == (0.2, "profile")
    assert child["maxTokens"] == (1024, "profile")
    assert child["maxSteps"] == (10, "profile")
    assert child["tokenBudget"] == (20000, "profile")
    assert child["reasoningEffort"] == ("high", "profile")
    assert child["skills"] == (["code-review"], "profile")
    assert child["disabledTools"] == (["spawn_worker", "write_file"], "profile")
    assert child["provider"] == ("scripted", "agent")
    assert child["instructions"][1] == "agent"
    assert child["blocks"][1] == "profile"
    tree = {f["field"]: (f["value"], f["layer"]) for f in found["tree"]}
    deadline_at = tree.pop("clock.deadlineAt")
    assert tree == {
        "tree.root": ("parent", "tree"),
        "tree.depth": (1, "tree"),
        "clock.deadlineSeconds": (600, "AgentConfig/planner"),
        "clock.idleTimeoutSeconds": (None, "none"),
        "clock.ttlSecondsAfterFinished": (None, "none"),
        "tree.maxDepth": (3, "AgentConfig/planner"),
        "tree.maxChildren": (10, "AgentConfig/planner"),
        "tree.maxLiveDescendants": (50, "AgentConfig/planner"),
    }
    # Started after its parent, with the same 600 s: cut to what was left of the parent's.
    assert deadline_at[1] == "parent parent"

    _, hungry = layers("hungry")
    assert hungry["maxSteps"] == (50, "clamp")
    assert hungry["maxTokens"] == (4096, "clamp")
    assert hungry["model"] == ("demo-large", "agent")

    found, parent = layers("parent")
    assert found["profile"] is None
    assert parent["model"] == ("demo-large", "agent") and parent["maxSteps"] == (50, "agent")

    table = cli(cluster, namespace, "explain", "child").stdout
    assert "Profile:   reviewer\n" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.split("\n\n", 1)[1].splitlines()}
    assert rows["FIELD"] == ["VALUE", "LAYER"]
    assert rows["model"] == ["demo-small", "profile"]
    assert rows["maxSteps"] == ["10", "profile"]
    assert rows["tree.maxDepth"] == ["3", "AgentConfig/planner"]


def test_profiles_and_revisions(cluster: Cluster, namespace: str) -> None:
    listed = cli_json(cluster, namespace, "profiles")
    assert listed["revision"]["revision"] == 1 and listed["revision"]["active"]
    profiles = {p["profile"]["key"]: p for p in listed["profiles"]}
    assert sorted(profiles) == ["researcher", "reviewer", "translator"]
    assert profiles["reviewer"]["source"] == "AgentConfig"
    assert profiles["researcher"]["source"] == "VirtualAgentProfile/planner-researcher"
    assert all(len(p["hash"]) == 64 for p in profiles.values())
    table = cli(cluster, namespace, "profiles", "--agent", "planner").stdout.splitlines()
    assert table[0].split() == ["KEY", "LABEL", "HASH", "SOURCE", "REVISION"]

    shown = yaml.safe_load(
        cli(cluster, namespace, "profiles", "show", "reviewer", "-o", "yaml").stdout
    )
    assert shown["hash"] == profiles["reviewer"]["hash"]
    assert shown["profile"]["overlay"]["model"] == "demo-small"
    assert (
        f"Hash:    {shown['hash']}"
        in cli(cluster, namespace, "profiles", "show", "reviewer").stdout
    )

    edited = copy.deepcopy(PROFILES[0])
    edited["spec"]["overlay"]["maxSteps"] = 12
    cluster.apply(namespace, edited)
    # Revision 2 is made, then made active (the AgentConfig's status): two writes.
    revisions = wait_until(
        "revision 2 to be active",
        lambda: (
            (found := cli_json(cluster, namespace, "revisions")["items"])
            and len(found) == 2
            and found[1]["active"]
            and found
        ),
    )
    assert [(r["revision"], r["active"]) for r in revisions] == [(1, False), (2, True)]
    assert revisions[0]["digest"] != revisions[1]["digest"]
    table = cli(cluster, namespace, "revisions").stdout.splitlines()
    header = ["NAME", "REVISION", "DIGEST", "PROFILES", "ACTIVE", "AGE", "APPLIED", "BY"]
    assert table[0].split() == header
    assert table[2].split()[:5] == ["planner-r2", "2", revisions[1]["digest"][:12], "3", "yes"]

    diff = cli_json(cluster, namespace, "profiles", "diff", "1", "planner-r2")
    changes = {c["key"]: c for c in diff["changes"]}
    assert changes["researcher"]["change"] == "changed"
    assert changes["researcher"]["fields"] == [
        {"path": "profile.overlay.maxSteps", "before": 20, "after": 12}
    ]
    assert {changes[k]["change"] for k in ("reviewer", "translator")} == {"unchanged"}
    assert "researcher   changed" in cli(cluster, namespace, "profiles", "diff", "r1", "r2").stdout
    old = cli_json(cluster, namespace, "profiles", "list", "--revision", "1")
    assert old["revision"]["name"] == "planner-r1"


def test_the_async_client_leaves_the_event_loop_free(cluster: Cluster, namespace: str) -> None:
    async def scenario() -> None:
        client = AsyncClient(Client(cluster.api, namespace))
        await client.spawn("a1", WorkerSpec(agent="planner"), wait={"Running"}, timeout=60)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.1)
                ticks += 1

        ticker = asyncio.create_task(tick())
        with pytest.raises(CollectTimeoutError):
            await client.collect("a1", timeout=2)
        ticker.cancel()
        assert ticks >= 10  # the loop kept running while collect waited

        await asyncio.to_thread(
            report, cluster, namespace, "a1", recentEvents=ring(1, 2), eventIndex=2
        )
        assert [e.index async for e in client.events("a1", follow=False)] == [1, 2]
        assert [w.name for w in await client.list()] == ["a1"]

    asyncio.run(scenario())


def test_a_typo_a_wait_and_a_repeated_kill_say_what_happened(
    cluster: Cluster, namespace: str, planner: dict[str, Any]
) -> None:
    # A mistyped agent is refused before anything persists, with the agents there are.
    typo = cli(cluster, namespace, "spawn", "c1", "--agent", "plannr", "-m", "x", code=3)
    assert typo.stderr.startswith("error: NotFound: unknown agent 'plannr'")
    assert "(known: planner)" in typo.stderr
    assert cluster.kubectl("get", "worker", "c1", "-n", namespace, check=False).returncode != 0

    # Asked for all the same, it waits, and says why wherever one looks.
    waited = cli(
        cluster, namespace, "spawn", "c1", "--agent", "plannr", "--any-agent", "-m", "x",
        "--wait", "--timeout", "3", code=5,
    )  # fmt: skip
    assert "still Pending after 3s: AgentConfigMissing: AgentConfig 'plannr' does not exist" in (
        waited.stderr
    )
    assert "AgentConfigMissing" in cli(cluster, namespace, "inspect", "c1").stdout
    assert "waiting: AgentConfig 'plannr' does not exist" in cli(cluster, namespace, "list").stdout

    # A kill is idempotent: the repeat says so and succeeds, the first reason stands.
    assert (
        "worker/c1 killed: first"
        in cli(cluster, namespace, "kill", "c1", "--reason", "first").stdout
    )
    again = cli(cluster, namespace, "kill", "c1", "--reason", "second").stdout
    assert again == "worker/c1 already killed: first\n"

    # A run that ended on its own has nothing to kill: it says so, with its own exit code.
    cli(cluster, namespace, "spawn", "done", "-m", "x", "--wait")
    report(cluster, namespace, "done", phase="Done", output="42")
    finished = cli(cluster, namespace, "kill", "done", code=6)
    assert (
        finished.stderr
        == "error: WorkerFinished: spec.kill: worker 'done' is Done; there is no run to kill\n"
    )
