"""Retry a reconcile later: the watch-driven handlers' answer to a transient failure.

One pending retry per key; the delay backs off (1 s to 1 min) while failures repeat
and resets once a pass succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class Requeue:
    def __init__(self, run: Callable[[tuple[str, str]], None]) -> None:
        self._run = run
        self._timers: dict[Hashable, threading.Timer] = {}
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def backoff(self, key: tuple[str, str]) -> float:
        with self._lock:
            count = self._failures.get(key, 0)
            self._failures[key] = count + 1
        return BACKOFF[min(count, len(BACKOFF) - 1)]

    def after(self, key: tuple[str, str], delay: float) -> None:
        with self._lock:
            if self._stopped or key in self._timers:
                return
            timer = threading.Timer(delay, self._fire, args=(key,))
            timer.daemon = True
            self._timers[key] = timer
        timer.start()

    def _fire(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._timers.pop(key, None)
        self._run(key)

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
