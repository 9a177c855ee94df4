"""Verbs across namespaces and selectors (-A, -l, --agent/--phase/--parent, --all,
--dry-run): how they parse, what they refuse, what they select and what they print."""

from __future__ import annotations

import argparse

import pytest

from agentworkers.api import WorkerSpec, WorkerStatus
from agentworkers.cli import main as cli
from agentworkers.cli.parsers import EVENT_COLUMNS, WATCH_COLUMNS, UsageError, parsed_defaults
from agentworkers.cli.render import (
    collect_line,
    count,
    event_row,
    kill_lines,
    quotas_text,
    revisions_text,
    stream_header,
    tree_text,
    watch_row,
    worker_rows,
)
from agentworkers.cli.verbs import selection, worker_filter
from agentworkers.client import (
    CollectResult,
    EventRecord,
    KillResult,
    QuotaInfo,
    RevisionInfo,
    WorkerFilter,
    WorkerInfo,
    kill_outcome,
    spawn_forest,
)
from agentworkers.kube.api import ALL_NAMESPACES, _verb_and_resource, path


def parse(*argv: str) -> argparse.Namespace:
    return parsed_defaults(cli.build_parser().parse_args(argv))


def info(
    name: str,
    namespace: str = "team-a",
    parent: str | None = None,
    phase: str | None = "Running",
    agent: str = "planner",
    **spec: object,
) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        spec=WorkerSpec.model_validate({"agent": agent, "parent": parent, **spec}),
        status=WorkerStatus.model_validate({"phase": phase}),
        created="2030-01-01T00:00:00Z",
        namespace=namespace,
    )


# --- parsing ---------------------------------------------------------------------------


def test_list_takes_a_scope_a_selector_and_filters() -> None:
    args = parse(
        "list", "-A", "-l", "team=a,tier!=batch", "--agent", "planner", "--phase",
        "running,IDLE", "--parent", "lead", "-w", "--timeout", "30",
    )  # fmt: skip
    assert args.all_namespaces and args.watch and args.timeout == 30
    assert worker_filter(args) == WorkerFilter(
        "team=a,tier!=batch", "planner", frozenset({"Running", "Idle"}), "lead"
    )
    plain = parse("list")
    assert not plain.all_namespaces and worker_filter(plain).everything


@pytest.mark.parametrize("verb", ["list", "events", "tree", "profiles", "revisions"])
def test_every_reading_verb_reads_every_namespace_with_A(verb: str) -> None:
    assert parse(verb, "-A").all_namespaces is True
    assert parse(verb, "--all-namespaces").all_namespaces is True
    assert parse(verb).all_namespaces is False


def test_profiles_A_reaches_its_list_subcommand_either_side() -> None:
    assert parse("profiles", "-A", "list").all_namespaces is True
    assert parse("profiles", "list", "-A").all_namespaces is True


def test_an_unknown_phase_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["list", "--phase", "Sleeping"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown phase 'Sleeping'" in err and "Pending, Running, Idle, Done" in err


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (["kill"], "kill needs NAME..., -l SELECTOR, a filter or --all"),
        (["collect"], "collect needs NAME..., -l SELECTOR, a filter or --all"),
        (["kill", "-l", "team=a", "--all"], "cannot set --all and --selector at the same time"),
        (["kill", "w1", "-l", "team=a"], "NAME cannot be given with -l, --all or a filter"),
        (["collect", "w1", "--all"], "NAME cannot be given with -l, --all or a filter"),
        (["kill", "w1", "--phase", "Pending"], "NAME cannot be given with -l, --all or a filter"),
        (["kill", "w1", "-A"], "a worker is named in its namespace"),
    ],
)
def test_kill_and_collect_refuse_what_kubectl_delete_refuses(argv: list[str], rule: str) -> None:
    args = parse(*argv)
    with pytest.raises(UsageError, match=rule.replace(".", r"\.")):
        selection(args, argv[0])


def test_kill_and_collect_select_as_kubectl_delete_does() -> None:
    assert selection(parse("kill", "w1", "w2"), "kill") is None  # by name
    assert parse("kill", "w1", "w2").names == ["w1", "w2"]
    assert selection(parse("kill", "--all"), "kill") == WorkerFilter()
    assert selection(parse("kill", "-l", "team=a"), "kill") == WorkerFilter("team=a")
    # A filter narrows --all (as --field-selector does kubectl delete --all).
    narrowed = selection(parse("collect", "--all", "--phase", "Idle", "-A"), "collect")
    assert narrowed == WorkerFilter(phases=frozenset({"Idle"}))
    assert selection(parse("kill", "--agent", "planner"), "kill") == WorkerFilter(agent="planner")
    assert parse("kill", "--all", "--dry-run").dry_run == "client"
    assert parse("kill", "--all", "--dry-run=client").dry_run == "client"
    assert parse("kill", "--all").dry_run is None


# --- selecting -------------------------------------------------------------------------


def test_a_filter_matches_agent_phase_and_parent() -> None:
    pending = info("w1", phase=None)
    assert WorkerFilter(phases=frozenset({"Pending"})).matches(pending)
    assert not WorkerFilter(phases=frozenset({"Running"})).matches(pending)
    assert WorkerFilter(agent="planner", parent="lead").matches(info("c", parent="lead"))
    assert not WorkerFilter(agent="coder").matches(pending)
    assert not WorkerFilter(parent="lead").matches(pending)
    # Labels are the API server's to match: the filter leaves them to it.
    assert WorkerFilter(labels="team=a").matches(pending)
    assert WorkerFilter().everything and not WorkerFilter(labels="x").everything


def test_what_a_kill_would_do_to_a_run_as_it_is() -> None:
    assert kill_outcome(info("w1")) == "killed"
    assert kill_outcome(info("w1", phase=None)) == "killed"
    assert kill_outcome(info("w1", phase="Done")) == "finished"
    asked = info("w1", kill={"reason": "stop", "by": "alice"})
    assert kill_outcome(asked) == "already killed"


def test_a_forest_spans_namespaces_keeping_same_names_apart() -> None:
    workers = [
        info("lead", "team-b"),
        info("child", "team-b", parent="lead"),
        info("lead", "team-a"),
        info("orphan", "team-a", parent="collected-long-ago"),
        info("child", "team-a", parent="lead"),
    ]
    roots = spawn_forest(workers)
    assert [(r.worker.namespace, r.worker.name) for r in roots] == [
        ("team-a", "lead"),
        ("team-a", "orphan"),
        ("team-b", "lead"),
    ]
    # Each lead has its own namespace's child only.
    assert [[c.worker.namespace for c in r.children] for r in roots] == [["team-a"], [], ["team-b"]]


def test_a_parent_loop_still_shows_in_the_forest() -> None:
    roots = spawn_forest([info("a", parent="b"), info("b", parent="a"), info("c")])
    shown = {r.worker.name for r in roots} | {c.worker.name for r in roots for c in r.children}
    assert shown == {"a", "b", "c"}


# --- printing --------------------------------------------------------------------------


def test_list_A_leads_with_the_namespace() -> None:
    rows = worker_rows([info("w1", "team-a"), info("w1", "team-b")], namespaces=True)
    lines = rows.splitlines()
    assert lines[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["team-a", "w1", "Running"],
        ["team-b", "w1", "Running"],
    ]
    assert "NAMESPACE" not in worker_rows([info("w1")])


def test_streamed_rows_line_up_with_their_header() -> None:
    header = stream_header(EVENT_COLUMNS, namespaces=True)
    row = event_row(EventRecord("w1", 3, "thought", "2030-01-01T00:00:00Z", "hmm", "team-a"), True)
    assert header.split()[:3] == ["NAMESPACE", "WORKER", "INDEX"]
    assert row.index("w1") == header.index("WORKER")
    assert row.split()[:2] == ["team-a", "w1"]
    # A namespace longer than its column is printed whole, never cut.
    long = "team-" + "x" * 50
    assert event_row(EventRecord("w1", 3, "thought", "", "hmm", long), True).startswith(
        long + " w1"
    )
    watched = watch_row(info("w1", "team-b"), namespaces=True)
    assert watched.index("Running") == stream_header(WATCH_COLUMNS, True).index("PHASE")


def test_tree_A_draws_every_tree_with_its_namespace() -> None:
    roots = spawn_forest(
        [info("lead", "team-a"), info("c", "team-a", parent="lead"), info("x", "b")]
    )
    rows = tree_text(roots, namespaces=True).splitlines()
    assert rows[0].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
    assert [r.split()[0] for r in rows[1:]] == ["b", "team-a", "team-a"]
    assert "└── c" in rows[3]


def test_revisions_A_lead_with_the_namespace() -> None:
    found = [RevisionInfo("planner-r1", "planner", 1, "a" * 64, "", True, 2, "team-a")]
    rows = revisions_text(found, namespaces=True).splitlines()
    assert rows[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert rows[1].split()[:2] == ["team-a", "planner-r1"]


def test_a_kill_by_selector_says_what_it_did_to_each_and_counts() -> None:
    results = [
        KillResult("w1", "team-a", "killed", "Running", "flush", dry_run=True),
        KillResult("w2", "team-a", "already killed", "Running", "earlier", dry_run=True),
        KillResult("w3", "team-a", "finished", "Done", "flush", dry_run=True),
    ]
    assert kill_lines(results) == (
        "worker/w1 killed: flush (dry run)\n"
        "worker/w2 already killed: earlier (dry run)\n"
        "worker/w3 Done already: nothing to kill (dry run)\n"
    )
    assert kill_lines(results[:1], namespaces=True).startswith("team-a/worker/w1 killed")
    assert count(results) == (
        "3 workers matched: 1 killed, 1 already killed, 1 left alone (finished) "
        "(dry run: nothing sent)"
    )
    assert count(results[:1]).startswith("1 worker matched: 1 killed")


def test_a_collect_by_selector_prints_a_line_per_worker() -> None:
    done = CollectResult("w1", "Done", "42", "", namespace="team-a")
    assert collect_line(done) == "worker/w1 collected: Done, output: 42\n"
    assert collect_line(done, dry_run=True) == "worker/w1 collected (dry run): Done now\n"
    gone = CollectResult("w2", "Running", "", "deleted before it was collected", deleted=False)
    assert collect_line(gone) == "worker/w2 deleted before it was collected\n"


def test_a_collection_across_namespaces_is_one_request() -> None:
    across = path("workers", ALL_NAMESPACES)
    assert across == "/apis/agentworkers.io/v1alpha1/workers"
    assert path("pods", ALL_NAMESPACES) == "/api/v1/pods"
    assert _verb_and_resource("GET", across, []) == ("LIST", "workers")
    assert _verb_and_resource("GET", across, [("watch", "true")]) == ("WATCH", "workers")
    assert _verb_and_resource("GET", "/api/v1/pods", []) == ("LIST", "pods")
    with pytest.raises(ValueError, match="in its namespace"):
        path("workers", ALL_NAMESPACES, "w1")


def test_quota_shows_limit_use_and_reset_with_A_a_namespace() -> None:
    body = {
        "metadata": {"name": "team-a", "namespace": "a"},
        "spec": {"tokens": 1000, "window": "Hour"},
        "status": {"used": 300, "reserved": 200, "remaining": 500,
                   "resetsAt": "2030-01-01T01:00:00Z"},
    }  # fmt: skip
    found = [QuotaInfo.from_body(body)]
    rows = quotas_text(found, namespaces=True).splitlines()
    assert rows[0].split() == [
        "NAMESPACE", "NAME", "AGENT", "WINDOW", "LIMIT", "USED", "RESERVED", "REMAINING", "RESETS",
    ]  # fmt: skip
    assert rows[1].split() == [
        "a", "team-a", "(all)", "Hour", "1000", "300", "200", "500", "2030-01-01T01:00:00Z",
    ]  # fmt: skip
    # Not summed yet: all of it remains.
    fresh = QuotaInfo.from_body({**body, "status": {}})
    assert (fresh.used, fresh.remaining, fresh.resets_at) == (0, 1000, None)
