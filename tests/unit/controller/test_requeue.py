"""Requeue: passes on the queue's threads, one per object at a time; a pass that meets API
trouble runs again, backing off; success resets it; a bug is logged, not fatal."""

from __future__ import annotations

import logging
import threading
import time

import kopf
import pytest

from agentworkers.controller.infra import metrics
from agentworkers.controller.passes import requeue as requeue_module
from agentworkers.controller.passes.requeue import Requeue
from agentworkers.errors import ApiError


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requeue_module, "BACKOFF", (0.01, 0.02, 0.05))


class Flaky:
    """Fails with each of `failures` in turn, then succeeds; records every pass."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.passes: list[tuple[str, str]] = []
        self.done = threading.Event()

    def __call__(self, namespace: str, name: str) -> None:
        self.passes.append((namespace, name))
        if self.failures:
            raise self.failures.pop(0)
        self.done.set()


def test_api_trouble_is_retried_until_a_pass_succeeds() -> None:
    flaky = Flaky(
        ApiError("500 Internal", 500),
        ApiError("cannot reach the API server: connection reset"),
        kopf.TemporaryError("not yet", delay=0.01),
    )
    requeue = Requeue("AgentConfig", "profile", flaky)
    try:
        requeue.attempt("team-a", "planner")
        assert flaky.done.wait(5), flaky.passes
        assert flaky.passes == [("team-a", "planner")] * 4
    finally:
        requeue.stop()


def test_a_bug_is_logged_with_its_object_and_the_queue_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = Flaky(ValueError("a bug"))
    requeue = Requeue("Worker", "worker", flaky)
    try:
        requeue.attempt("team-a", "w1")
        requeue_idle(requeue)
        requeue.attempt("team-a", "w2")
        assert flaky.done.wait(5)
        assert flaky.passes == [("team-a", "w1"), ("team-a", "w2")]  # w1 not retried
        (record,) = [r for r in caplog.records if r.exc_info]
        assert "Worker team-a/w1: the pass failed" in record.getMessage()
        assert "a bug" in str(record.exc_info[1])  # type: ignore[index]
    finally:
        requeue.stop()


def requeue_idle(requeue: Requeue) -> None:
    deadline = time.monotonic() + 5
    while requeue.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert requeue.pending() == 0


def test_a_stopped_queue_runs_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requeue_module, "BACKOFF", (0.2,))
    failed = threading.Event()

    def fails(namespace: str, name: str) -> None:
        passes.append(name)
        failed.set()
        raise ApiError("503 Service Unavailable", 503)

    passes: list[str] = []
    requeue = Requeue("Worker", "worker", fails)
    requeue.attempt("team-a", "w1")
    assert failed.wait(5)
    requeue.stop()  # with a retry due in 0.2 s
    requeue.attempt("team-a", "w1")  # stopped: nothing runs
    time.sleep(0.4)
    assert passes == ["w1"]  # the retry never fired


def test_a_pass_asked_for_while_one_runs_runs_once_after_it_not_beside_it() -> None:
    running = threading.Event()
    release = threading.Event()
    passes: list[str] = []
    overlaps: list[str] = []
    busy = threading.Lock()

    def reconcile(namespace: str, name: str) -> None:
        if not busy.acquire(blocking=False):
            overlaps.append(name)
            return
        try:
            passes.append(name)
            if len(passes) == 1:
                running.set()
                assert release.wait(5)
        finally:
            busy.release()

    requeue = Requeue("Worker", "worker", reconcile, threads=4)
    try:
        requeue.attempt("team-a", "w1")
        assert running.wait(5)
        started = time.monotonic()
        for _ in range(10):  # a burst of events for the same Worker
            requeue.attempt("team-a", "w1")
        assert time.monotonic() - started < 1, "a caller waited for the running pass"
        time.sleep(0.1)  # idle threads had time to take w1 again, were it allowed
        release.set()
        requeue_idle(requeue)  # nothing kept once it ended well
        assert passes == ["w1", "w1"] and not overlaps
    finally:
        requeue.stop()


def test_objects_pass_side_by_side_and_attempt_never_runs_a_pass_itself() -> None:
    inside = threading.Barrier(3, timeout=5)
    callers: list[str] = []

    def reconcile(namespace: str, name: str) -> None:
        callers.append(threading.current_thread().name)
        inside.wait()  # all three objects in a pass at once

    requeue = Requeue("Worker", "worker", reconcile, threads=3)
    try:
        for name in ("w1", "w2", "w3"):
            requeue.attempt("team-a", name)  # returns at once: the barrier is still up
        requeue_idle(requeue)
        assert len(callers) == 3 and threading.current_thread().name not in callers
    finally:
        requeue.stop()


def test_a_nearer_pass_at_a_time_is_not_held_back_by_a_farther_one() -> None:
    # A clock's pass due in a minute, then (a pass asked for meanwhile) one due at once.
    flaky = Flaky(requeue_module.Later(60), requeue_module.Later(0.01))
    queue = Requeue("Thing", "thing", flaky, threads=1)
    try:
        queue.attempt("ns", "a")
        time.sleep(0.1)
        queue.attempt("ns", "a")
        assert flaky.done.wait(5)
        assert len(flaky.passes) == 3
    finally:
        queue.stop()


def test_a_conflict_is_retried_as_routine_not_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 409 (a runtime's report landed between the store's copy and the pass's write) is
    what every controller meets: retried, but no warning and no handler error."""
    errors = metrics.HANDLER_ERRORS.labels(handler="conflicted")
    before = errors._value.get()
    flaky = Flaky(ApiError("409 Conflict: the object has been modified", 409))
    requeue = Requeue("Worker", "conflicted", flaky)
    try:
        with caplog.at_level(logging.DEBUG, logger=requeue_module.__name__):
            requeue.attempt("team-a", "w1")
            assert flaky.done.wait(5), flaky.passes
        assert flaky.passes == [("team-a", "w1")] * 2
        assert errors._value.get() == before
        assert [r.levelno for r in caplog.records if "w1" in r.getMessage()] == [logging.DEBUG]
        assert metrics.RECONCILES.labels(handler="conflicted", result="conflict")._value.get() == 1
    finally:
        requeue.stop()


def test_stop_waits_for_the_running_pass_and_starts_no_other() -> None:
    """A clean exit gives its Leases up only once no pass of its runs any more."""
    started, release = threading.Event(), threading.Event()
    passes: list[str] = []

    def slow(namespace: str, name: str) -> None:
        passes.append(name)
        started.set()
        release.wait(5)

    requeue = Requeue("Worker", "worker", slow)
    requeue.attempt("team-a", "w1")
    assert started.wait(5)
    requeue.attempt("team-a", "w2")  # queued behind it: dropped by the stop
    assert requeue.stop(wait=0.05) is False  # w1 still runs
    threading.Timer(0.1, release.set).start()
    assert requeue.stop(wait=5) is True
    assert passes == ["w1"]
