"""The verbs across namespaces and selectors on a real API server: list -A over three
namespaces, kill -l (dry, then for real), collect --all, events/tree/revisions/profiles -A,
and the client's one request per kind for the whole cluster."""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from agentworkers.client import AsyncClient, Client, WorkerFilter
from agentworkers.kube.api import REQUESTS
from tests.e2e.support import CONFIG, PROFILES, Cluster, first_revision, wait_until
from tests.e2e.test_cli import cli, cli_json, report, ring

pytestmark = pytest.mark.usefixtures("operator", "planner")


@pytest.fixture
def teams(cluster: Cluster, namespace: str) -> Iterator[list[str]]:
    """Three namespaces of the session's operator (the test's own and two more, in name
    order), each with the example agent at revision 1."""
    session = namespace.split("-", maxsplit=1)[0]
    core = kubernetes.client.CoreV1Api(cluster.api)
    more = [f"{session}-fleet-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for name in more:
        core.create_namespace({"metadata": {"name": name}})
    try:
        for name in more:
            wait_until(
                f"{name}'s default service account",
                lambda n=name: core.list_namespaced_service_account(n).items,
                timeout=30,
            )
            config = copy.deepcopy(CONFIG)
            config["spec"]["allowedSecrets"] = ["model-key"]
            cluster.apply(name, *PROFILES, config)
            first_revision(cluster, name)
        yield sorted([namespace, *more])  # as -A orders them
    finally:
        for name in more:
            core.delete_namespace(name)


def spawn(cluster: Cluster, namespace: str, name: str, team: str) -> None:
    cli(cluster, namespace, "spawn", name, "-l", f"team={team}", "-m", "hi", "--wait")


def phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    found: str | None = cli_json(cluster, namespace, "inspect", name)["worker"]["status"].get(
        "phase"
    )
    return found


def ours(items: list[dict[str, Any]], teams: list[str]) -> list[tuple[str, str]]:
    """(namespace, name) of the listed workers in our namespaces (other tests' may exist)."""
    return [(w["namespace"], w["name"]) for w in items if w["namespace"] in teams]


def test_verbs_across_namespaces_and_selectors(cluster: Cluster, teams: list[str]) -> None:
    one, two, three = teams
    spawn(cluster, one, "a1", "a")
    spawn(cluster, one, "b1", "b")
    spawn(cluster, two, "a2", "a")
    spawn(cluster, three, "c3", "c")
    lists(cluster, teams)
    kills(cluster, teams)
    reads(cluster, teams)
    collects(cluster, teams)


def lists(cluster: Cluster, teams: list[str]) -> None:
    one, two, three = teams
    # list -A: every namespace, NAMESPACE first, ordered by namespace.
    listed = cli_json(cluster, one, "list", "-A")["items"]
    assert ours(listed, teams) == sorted([(one, "a1"), (one, "b1"), (two, "a2"), (three, "c3")])
    table = cli(cluster, one, "list", "-A").stdout.splitlines()
    assert table[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
    rows = [r.split()[:3] for r in table[1:] if r.split()[0] in teams]
    assert [tuple(r) for r in rows] == [(ns, name, "Running") for ns, name in ours(listed, teams)]
    team_a = cli_json(cluster, three, "list", "-A", "-l", "team=a")["items"]
    assert ours(team_a, teams) == sorted([(one, "a1"), (two, "a2")])
    assert [w["name"] for w in cli_json(cluster, one, "list", "-l", "team!=a")["items"]] == ["b1"]
    assert cli_json(cluster, one, "list", "--phase", "Idle,Done")["items"] == []
    assert len(cli_json(cluster, one, "list", "--agent", "planner")["items"]) == 2
    none = cli(cluster, one, "list", "--agent", "nobody")
    assert none.stderr == f"No workers found in namespace {one}.\n"


def kills(cluster: Cluster, teams: list[str]) -> None:
    one, two, _ = teams
    # kill -l: dry first (nothing changes), then for real, in one namespace or all.
    dry = cli(cluster, one, "kill", "-l", "team=a", "--dry-run", "--reason", "flush")
    assert dry.stdout == "worker/a1 killed: flush (dry run)\n"
    assert dry.stderr == "1 worker matched: 1 killed (dry run: nothing sent)\n"
    dry_all = cli(cluster, one, "kill", "-A", "-l", "team=a", "--dry-run").stdout
    assert (
        dry_all
        == f"{one}/worker/a1 killed: killed (dry run)\n{two}/worker/a2 killed: killed (dry run)\n"
    )
    assert "kill" not in cli_json(cluster, one, "inspect", "a1")["worker"]["spec"]
    assert cli(cluster, one, "list", "--phase", "Running").stdout.count("Running") == 2

    killed = cli(cluster, one, "kill", "-A", "-l", "team=a", "--reason", "flush", "--by", "ops")
    assert killed.stdout == f"{one}/worker/a1 killed: flush\n{two}/worker/a2 killed: flush\n"
    assert killed.stderr == "2 workers matched: 2 killed\n"
    for ns, name in ((one, "a1"), (two, "a2")):
        wait_until(
            f"{name} Killed",
            lambda ns=ns, name=name: phase(cluster, ns, name) == "Killed",
        )
    again = cli(cluster, one, "kill", "-A", "-l", "team=a", "--reason", "twice")
    assert again.stdout == (
        f"{one}/worker/a1 already killed: flush\n{two}/worker/a2 already killed: flush\n"
    )
    nothing = cli(cluster, one, "kill", "-l", "team=nobody")
    assert (nothing.stdout, nothing.stderr) == ("", f"No workers found in namespace {one}.\n")
    assert cli_json(cluster, one, "kill", "-l", "team=nobody")["items"] == []
    refused = cli(cluster, one, "kill", "-l", "team=a", "--all", code=2)
    assert refused.stderr == "error: cannot set --all and --selector at the same time\n"
    cli(cluster, one, "kill", code=2)


def reads(cluster: Cluster, teams: list[str]) -> None:
    one, two, three = teams
    # The events of every namespace, from one watch, each with its namespace.
    report(cluster, three, "c3", recentEvents=ring(1, 2), eventIndex=2, lastEvent="step 2")
    streamed = [
        json.loads(line)
        for line in cli(
            cluster, one, "events", "-A", "-l", "team=c", "-o", "json"
        ).stdout.splitlines()
    ]
    assert [(e["namespace"], e["worker"], e["index"]) for e in streamed] == [
        (three, "c3", 1),
        (three, "c3", 2),
    ]
    events = cli(cluster, one, "events", "-A", "--agent", "planner").stdout.splitlines()
    assert events[0].split()[:2] == ["NAMESPACE", "WORKER"]
    assert [line.split()[:3] for line in events[1:] if line.startswith(three)] == [
        [three, "c3", "1"],
        [three, "c3", "2"],
    ]

    # tree -A: every tree, each row with its namespace; revisions and profiles likewise.
    forest = cli(cluster, one, "tree", "-A").stdout.splitlines()
    assert forest[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [r.split()[:2] for r in forest if r.split()[0] in teams] == [
        [one, "a1"], [one, "b1"], [two, "a2"], [three, "c3"],
    ]  # fmt: skip
    revisions = cli_json(cluster, one, "revisions", "-A")["items"]
    assert [
        (r["namespace"], r["name"], r["active"]) for r in revisions if r["namespace"] in teams
    ] == [(ns, "planner-r1", True) for ns in teams]
    profiles = cli(cluster, one, "profiles", "-A").stdout.splitlines()
    assert profiles[0].split()[:3] == ["NAMESPACE", "AGENT", "KEY"]
    assert {r.split()[0] for r in profiles[1:] if r.split()[0] in teams} == set(teams)
    cli(cluster, one, "profiles", "-A", "--revision", "1", code=2)


def collects(cluster: Cluster, teams: list[str]) -> None:
    one, two, _ = teams
    # collect --all: dry (nothing waited for or removed), then for real, each as it settles.
    report(cluster, one, "b1", phase="Idle", output="b's answer")
    dry_collect = cli(cluster, two, "collect", "--all", "--dry-run")
    assert dry_collect.stdout == "worker/a2 collected (dry run): Killed now\n"
    assert "1 worker matched" in dry_collect.stderr
    collected = cli(cluster, one, "collect", "--all", "--timeout", "60", "-o", "json").stdout
    results = sorted((json.loads(line) for line in collected.splitlines()), key=lambda r: r["name"])
    assert [(r["name"], r["phase"], r["output"], r["error"], r["deleted"]) for r in results] == [
        ("a1", "Killed", "", "flush", True),
        ("b1", "Idle", "b's answer", "", True),
    ]
    assert cli_json(cluster, one, "list")["items"] == []
    assert [w["name"] for w in cli_json(cluster, two, "list")["items"]] == ["a2"]  # dry: kept
    empty = cli(cluster, one, "collect", "--all")
    assert (empty.stdout, empty.stderr) == ("", f"No workers found in namespace {one}.\n")


def test_the_client_reads_the_cluster_in_one_request_per_kind(
    cluster: Cluster, teams: list[str]
) -> None:
    for i, ns in enumerate(teams):
        spawn(cluster, ns, f"w{i}", "x")

    def sent(verb: str) -> float:
        return REQUESTS.labels(verb, "workers", "200")._value.get()

    with Client(cluster.api, teams[0]) as client:
        before = sent("LIST")
        everyone = client.list(WorkerFilter("team=x"), all_namespaces=True)
        assert sent("LIST") == before + 1
        assert [(w.namespace, w.name) for w in everyone] == sorted(
            (ns, f"w{i}") for i, ns in enumerate(teams)
        )
        before_watch = sent("WATCH")
        seen = {
            (info.namespace, info.name)
            for kind, info in client.watch(WorkerFilter("team=x"), all_namespaces=True, timeout=3)
            if kind == "ADDED"
        }
        assert seen == {(w.namespace, w.name) for w in everyone}
        assert sent("WATCH") == before_watch + 1  # one watch for three namespaces

    async def dry_kill() -> list[tuple[str, str]]:
        async with AsyncClient(Client(cluster.api, teams[1])) as aclient:
            found = await aclient.kill_selected(WorkerFilter("team=x"), "x", dry_run=True)
            return [(r.namespace, r.outcome) for r in found]

    assert asyncio.run(dry_kill()) == [(teams[1], "killed")]
