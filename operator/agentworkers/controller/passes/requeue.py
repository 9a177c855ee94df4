"""A work queue for reconciles, as client-go's: one pass per object at a time, retried.

kopf retries its create/update/resume handlers, but not `on.event` ones, which drive
every kind here (the others write kopf's annotations on users' objects). A `Requeue`
gives every reconcile of a kind these rules:

* **Passes run on the queue's own threads.** Asking for one (`attempt`) returns at once,
  so kopf's handlers can be `async` and hand each event over as it arrives; the queue
  holds keys, never bodies (a pass reads the store).
* **One pass per object at a time.** A pass asked for while one runs is not run beside
  it: the object goes back on the queue when the running pass ends. An object waiting in
  the queue is there once, however many events asked for it.
* **Passes at a time**: a pass that returns a delay (or raises `Later`) runs again after
  it (the soonest, when an earlier pass asked for a later one).
* **Retries on trouble**: an API error, or a `kopf.TemporaryError` (a run waiting for its
  AgentConfig), runs the object again later, one pending retry per object (the nearest), the delay
  backing off (1 s to 1 min) while failures repeat and reset once a pass succeeds. One
  thread keeps every pending retry (a heap), not a timer thread each. A conflict (409: the
  object changed since the store's copy the pass wrote against, a runtime's report or a
  user's edit) is routine, as for client-go's controllers: retried the same way, but
  neither logged as a warning nor counted as a handler error; the change's own event
  usually brings the next pass first. Any other error is a bug: it is logged with its
  traceback and counted, and the queue goes on.
* Nothing is kept for an object once its pass has ended well.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import kopf

from agentworkers.controller.infra import metrics
from agentworkers.errors import ApiError

log = logging.getLogger(__name__)

CONFLICT = 409
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

Key = tuple[str, str]  # (namespace, name)


class Later(kopf.TemporaryError):
    """Nothing is wrong: the pass wants another in `delay` seconds (a clock to check)."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"again in {delay:.1f} s", delay=delay)


def trouble(e: ApiError) -> str:
    if e.status is not None:
        return f"API error {e.status}: {e.rule}"
    return f"API unreachable ({e.rule})"


class Requeue:
    """Passes of `reconcile(namespace, name)` for one kind, on `threads` threads of its
    own: serialised per object, retried."""

    def __init__(
        self,
        kind: str,
        handler: str,
        reconcile: Callable[[str, str], float | None],
        *,
        threads: int = 1,
    ) -> None:
        self.kind = kind
        self._handler = handler  # the metric's label
        self._reconcile = reconcile
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # a key was queued, or stop
        self._timer = threading.Condition(self._lock)  # a retry was scheduled, or stop
        self._ended = threading.Condition(self._lock)  # a pass ended
        self._queue: deque[Key] = deque()
        self._dirty: set[Key] = set()  # asked for and not yet taken by a pass
        self._running: set[Key] = set()
        self._failures: dict[Key, int] = {}
        # Pending retries: a heap of (due, key) and each key's due time.
        self._heap: list[tuple[float, Key]] = []
        self._due: dict[Key, float] = {}
        self._stopped = False
        for i in range(threads):
            threading.Thread(target=self._work_loop, name=f"{handler}-{i}", daemon=True).start()
        threading.Thread(target=self._retry_loop, name=f"requeue-{handler}", daemon=True).start()

    def attempt(self, namespace: str, name: str) -> None:
        """A pass soon, on one of the queue's threads; after the running one, if any."""
        key = (namespace, name)
        with self._lock:
            if self._stopped or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._running:
                self._queue.append(key)
                self._work.notify()

    def _work_loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and not self._queue:
                    self._work.wait()
                if self._stopped:
                    return
                key = self._queue.popleft()
                self._dirty.discard(key)
                self._running.add(key)
            try:
                self._pass(key)
            finally:
                with self._lock:
                    self._running.discard(key)
                    self._ended.notify_all()
                    if key in self._dirty:  # asked for again while it ran
                        self._queue.append(key)
                        self._work.notify()

    def _pass(self, key: Key) -> None:
        namespace, name = key
        ref = {"k8s_ref": {"kind": self.kind, "name": name, "namespace": namespace}}
        result = "success"
        again = None
        try:
            again = self._reconcile(namespace, name)
        except kopf.TemporaryError as e:
            result = "requeue_after" if isinstance(e, Later) else "wait"
            self._after(key, e.delay or 5)
        except ApiError as e:
            if e.status == CONFLICT:
                result = "conflict"
                log.debug("%s %s/%s: %s; again", self.kind, namespace, name, trouble(e), extra=ref)
            else:
                result = "error"
                metrics.HANDLER_ERRORS.labels(handler=self._handler).inc()
                log.warning(
                    "%s %s/%s: %s; retrying", self.kind, namespace, name, trouble(e), extra=ref
                )
            self._after(key, self._backoff(key))
        except Exception:
            result = "error"
            metrics.HANDLER_ERRORS.labels(handler=self._handler).inc()
            log.exception("%s %s/%s: the pass failed", self.kind, namespace, name, extra=ref)
        else:
            self.forget(key)
            if again is not None:
                result = "requeue_after"
                self._after(key, again)
        finally:
            metrics.RECONCILES.labels(handler=self._handler, result=result).inc()

    def _backoff(self, key: Key) -> float:
        with self._lock:
            count = self._failures.get(key, 0)
            self._failures[key] = count + 1
        return BACKOFF[min(count, len(BACKOFF) - 1)]

    def _after(self, key: Key, delay: float) -> None:
        """A retry of `key` in `delay` seconds, unless one is pending already that is due
        no later: a clock's far pass must not hold back a near one (a queued run's
        deadline, then its pod's start; a warm pool's refill after its next pod's idle end)."""
        with self._lock:
            due = time.monotonic() + delay
            if self._stopped or self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._timer.notify()

    def _retry_loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._timer.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                due, key = heapq.heappop(self._heap)
                if self._due.get(key) != due:
                    continue  # dropped (the object is gone) while it waited
                del self._due[key]
            self.attempt(*key)

    def pending(self) -> int:
        """Objects queued, with a pass running or with a retry waiting."""
        with self._lock:
            return len(self._dirty | self._running | self._due.keys())

    def forget(self, key: Key) -> None:
        """A pass ended well: the next failure backs off from the start again."""
        with self._lock:
            self._failures.pop(key, None)

    def drop(self, key: Key) -> None:
        """The object is gone: forget it, and its pending retry."""
        with self._lock:
            self._failures.pop(key, None)
            self._due.pop(key, None)

    def stop(self, wait: float = 0.0) -> bool:
        """No pass starts from now on; waits up to `wait` seconds for the running ones to
        end. True when none runs."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            self._heap.clear()
            self._due.clear()
            self._work.notify_all()
            self._timer.notify()
            return self._ended.wait_for(lambda: not self._running, timeout=wait)
