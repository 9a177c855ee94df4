"""Retry a reconcile later: the watch-driven handlers' answer to a transient failure.

kopf retries its create/update/resume handlers, but not `on.event` ones, which drive
Workers and profile changes. A `Requeue` runs one pass, and on trouble on the way to the
API server runs it again later: one pending retry per object, the delay backing off
(1 s to 1 min) while failures repeat and reset once a pass succeeds.
"""

from __future__ import annotations

import logging
import threading
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
    """Passes of `reconcile(namespace, name)` for one kind, retried on trouble."""

    def __init__(self, kind: str, handler: str, reconcile: Callable[[str, str], None]) -> None:
        self.kind = kind
        self._handler = handler  # the metric's label
        self._reconcile = reconcile
        self._timers: dict[Key, threading.Timer] = {}
        self._failures: dict[Key, int] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def attempt(self, namespace: str, name: str) -> None:
        """One pass now; another later if this one meets API trouble or a TemporaryError."""
        key = (namespace, name)
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
        with self._lock:
            if self._stopped or key in self._timers:
                return
            timer = threading.Timer(delay, self._fire, args=(key,))
            timer.daemon = True
            self._timers[key] = timer
        timer.start()

    def _fire(self, key: Key) -> None:
        with self._lock:
            self._timers.pop(key, None)
        self.attempt(*key)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
