"""A work queue for reconciles, as client-go's: one pass per object at a time, retried.

kopf retries its create/update/resume handlers, but not `on.event` ones, which drive
Workers and profile changes. A `Requeue` gives every reconcile of a kind these rules:

* **One pass per object at a time.** A pass asked for while one runs is not run beside
  it, nor does it wait: it marks the object, and the running pass goes once more when it
  ends. A burst of events for one object costs at most one more pass, and no handler
  thread blocks on another's lock.
* **Retries on trouble**: an API error, or a `kopf.TemporaryError` (a run waiting for its
  AgentConfig), runs the object again later, one pending retry per object, the delay
  backing off (1 s to 1 min) while failures repeat and reset once a pass succeeds. One
  thread keeps every pending retry (a heap), not a timer thread each.
* Nothing is kept for an object once its pass has ended well.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

import kopf

from agentworkers.controller import metrics
from agentworkers.errors import ApiError

log = logging.getLogger(__name__)

BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

Key = tuple[str, str]  # (namespace, name)


def trouble(e: ApiError) -> str:
    if e.status is not None:
        return f"API error {e.status}: {e.rule}"
    return f"API unreachable ({e.rule})"


class Requeue:
    """Passes of `reconcile(namespace, name)` for one kind: serialised per object, retried."""

    def __init__(self, kind: str, handler: str, reconcile: Callable[[str, str], None]) -> None:
        self.kind = kind
        self._handler = handler  # the metric's label
        self._reconcile = reconcile
        self._lock = threading.Condition()
        # Objects with a pass running -> whether another pass was asked for meanwhile.
        self._running: dict[Key, bool] = {}
        self._failures: dict[Key, int] = {}
        # Pending retries: a heap of (due, key) and each key's due time.
        self._heap: list[tuple[float, Key]] = []
        self._due: dict[Key, float] = {}
        self._stopped = False
        self._thread = threading.Thread(
            target=self._retry_loop, name=f"requeue-{handler}", daemon=True
        )
        self._thread.start()

    def attempt(self, namespace: str, name: str) -> None:
        """A pass now, in this thread; or, if one is running, one more after it."""
        key = (namespace, name)
        with self._lock:
            if key in self._running:
                self._running[key] = True
                return
            self._running[key] = False
        while True:
            self._pass(key)
            with self._lock:
                if not self._running[key]:
                    del self._running[key]
                    return
                self._running[key] = False

    def _pass(self, key: Key) -> None:
        namespace, name = key
        try:
            self._reconcile(namespace, name)
        except kopf.TemporaryError as e:
            self._after(key, e.delay or 5)
        except ApiError as e:
            metrics.HANDLER_ERRORS.labels(handler=self._handler).inc()
            log.warning(
                "%s %s/%s: %s; retrying",
                self.kind,
                namespace,
                name,
                trouble(e),
                extra={"k8s_ref": {"kind": self.kind, "name": name, "namespace": namespace}},
            )
            self._after(key, self._backoff(key))
        else:
            self.forget(key)

    def _backoff(self, key: Key) -> float:
        with self._lock:
            count = self._failures.get(key, 0)
            self._failures[key] = count + 1
        return BACKOFF[min(count, len(BACKOFF) - 1)]

    def _after(self, key: Key, delay: float) -> None:
        """A retry of `key` in `delay` seconds, unless one is pending already."""
        with self._lock:
            if self._stopped or key in self._due:
                return
            due = time.monotonic() + delay
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._lock.notify()

    def _retry_loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._lock.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                due, key = heapq.heappop(self._heap)
                if self._due.get(key) != due:
                    continue  # dropped (the object is gone) while it waited
                del self._due[key]
            self.attempt(*key)

    def pending(self) -> int:
        """Objects with a pass running or a retry waiting (what the queue holds)."""
        with self._lock:
            return len(self._running.keys() | self._due.keys())

    def forget(self, key: Key) -> None:
        """A pass ended well: the next failure backs off from the start again."""
        with self._lock:
            self._failures.pop(key, None)

    def drop(self, key: Key) -> None:
        """The object is gone: forget it, and its pending retry."""
        with self._lock:
            self._failures.pop(key, None)
            self._due.pop(key, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._heap.clear()
            self._due.clear()
            self._lock.notify()
