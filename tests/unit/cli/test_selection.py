"""Kill and collect by selector, decided without a cluster: which selected workers collect
takes when, and what kill reports (the e2e tests in test_cluster_wide.py run them)."""

from __future__ import annotations

from typing import Any

import pytest

from agentworkers.client import WorkerFinishedError, WorkerInfo
from agentworkers.client.selection import (
    GONE,
    PendingCollection,
    collect_result,
    kill_result,
    nothing_to_kill,
    settled,
)


def worker(
    name: str, phase: str | None = None, parent: str = "", kill: str = "", **status: Any
) -> WorkerInfo:
    spec: dict[str, Any] = {"agent": "planner"}
    if parent:
        spec |= {"parent": parent, "kind": "dynamic"}
    if kill:
        spec["kill"] = {"reason": kill, "by": "me"}
    if phase:
        status["phase"] = phase
    return WorkerInfo.from_body(
        {"metadata": {"name": name, "namespace": "a"}, "spec": spec, "status": status}
    )


def names(infos: Any) -> list[str]:
    return [i.name for i in infos]


def test_a_parent_is_collected_after_its_selected_children() -> None:
    pending = PendingCollection([worker("p", "Done"), worker("c", "Running", parent="p")], False)
    # Removing the parent would take the running child along: neither is ready.
    assert names(pending.ready()) == []
    pending.update(worker("c", "Done", parent="p"))
    assert names(pending.ready()) == ["c", "p"]
    assert not pending


def test_with_keep_a_parent_does_not_wait_for_its_children() -> None:
    pending = PendingCollection([worker("p", "Done"), worker("c", "Running", parent="p")], True)
    assert names(pending.ready()) == ["p"]
    assert pending.left() == "c (Running)"


def test_a_run_asked_to_stop_settles_only_when_killed() -> None:
    assert settled(worker("w", "Idle"))
    assert not settled(worker("w", "Idle", kill="over budget"))
    assert settled(worker("w", "Killed", kill="over budget"))


def test_a_worker_removed_by_someone_else_is_reported_and_no_longer_waited_for() -> None:
    gone = worker("w", "Running")
    pending = PendingCollection([gone, worker("v", "Running")], False)
    assert gone in pending
    result = pending.gone(gone)
    assert (result.name, result.deleted, result.error) == ("w", False, GONE)
    assert gone not in pending and pending.left() == "v (Running)"


def test_a_killed_runs_error_is_its_kill_reason() -> None:
    result = collect_result(worker("w", "Killed", kill="over budget"), keep=False)
    assert (result.phase, result.error, result.deleted) == ("Killed", "over budget", True)
    failed = collect_result(worker("w", "Failed", error="boom"), keep=True)
    assert (failed.error, failed.deleted) == ("boom", False)


def test_kill_reports_the_reason_that_stands() -> None:
    first = kill_result(worker("w", "Running", kill="first"), "already killed", "second", False)
    assert (first.reason, first.outcome) == ("first", "already killed")
    asked = kill_result(worker("w", "Running"), "killed", "  ", True)
    assert (asked.reason, asked.dry_run) == ("killed", True)


def test_a_run_that_ended_has_nothing_to_kill() -> None:
    error = nothing_to_kill(worker("w", "Done"))
    with pytest.raises(WorkerFinishedError, match="worker 'w' is Done; there is no run to kill"):
        raise error
