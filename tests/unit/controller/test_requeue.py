"""Requeue: a pass that meets API trouble runs again, backing off; success resets it."""

from __future__ import annotations

import threading
import time

import kopf
import pytest

from agentworkers.controller import requeue as requeue_module
from agentworkers.controller.requeue import Requeue
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


def test_other_errors_are_not_swallowed() -> None:
    requeue = Requeue("Worker", "worker", Flaky(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        requeue.attempt("team-a", "w1")


def test_one_pending_retry_per_object_and_none_after_stop() -> None:
    flaky = Flaky(*[ApiError("503 Service Unavailable", 503)] * 3)
    requeue = Requeue("Worker", "worker", flaky)
    requeue.attempt("team-a", "w1")
    requeue.attempt("team-a", "w1")  # a retry is already pending: no second timer
    requeue.stop()
    time.sleep(0.2)
    assert len(flaky.passes) == 2  # the two direct passes; the stopped timer never fired


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

    requeue = Requeue("Worker", "worker", reconcile)
    try:
        first = threading.Thread(target=requeue.attempt, args=("team-a", "w1"))
        first.start()
        assert running.wait(5)
        started = time.monotonic()
        for _ in range(10):  # a burst of events for the same Worker, from other threads
            requeue.attempt("team-a", "w1")
        assert time.monotonic() - started < 1, "a caller waited for the running pass"
        release.set()
        first.join(5)
        assert passes == ["w1", "w1"] and not overlaps
        assert requeue.pending() == 0  # nothing kept once it ended well
    finally:
        requeue.stop()
